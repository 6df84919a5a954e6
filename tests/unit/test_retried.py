"""A transient answer is sent again; a refusal never is."""

from __future__ import annotations

import pytest

from phalanx.kube import client
from phalanx.kube.client import ApiError, Forbidden, retried


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instant(_: float) -> None:
        return None

    monkeypatch.setattr(client.asyncio, "sleep", instant)


def answers(*errors: ApiError | None) -> tuple[list[int], object]:
    sent: list[int] = []

    async def call() -> str:
        sent.append(1)
        error = errors[len(sent) - 1]
        if error is not None:
            raise error
        return "done"

    return sent, call


async def test_transient_answers_are_sent_again_until_one_succeeds() -> None:
    sent, call = answers(ApiError(503, "ServiceUnavailable", "etcd leader changed"), ApiError(429, "TooManyRequests", ""), None)
    assert await retried(call) == "done"
    assert len(sent) == 3


async def test_a_refusal_is_raised_at_once() -> None:
    sent, call = answers(Forbidden(403, "Forbidden", "a policy"), None)
    with pytest.raises(Forbidden):
        await retried(call)
    assert len(sent) == 1


async def test_the_last_transient_answer_is_raised() -> None:
    sent, call = answers(*[ApiError(500, "InternalError", "")] * 3)
    with pytest.raises(ApiError):
        await retried(call, attempts=3)
    assert len(sent) == 3
