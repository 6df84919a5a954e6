"""Writes beside the walk (`scheduling.background`): one task per key at a time, and a key whose writes failed waits
out a back-off before it is written again, so a group whose writes keep failing cannot spin."""

from __future__ import annotations

import asyncio

from phalanx.scheduling.background import Background


async def test_one_task_per_key_and_a_failed_key_backs_off_until_it_is_forgotten() -> None:
    background = Background(lambda: True)
    tries: list[str] = []

    async def refused() -> None:
        tries.append("a")
        raise RuntimeError("forbidden")

    assert background.run("a", "test", refused)
    assert not background.run("a", "test", refused), "writes of the key under way: none started beside them"
    await background.drain()
    assert tries == ["a"]
    assert not background.run("a", "test", refused), "failed: not started again inside its back-off"
    await background.drain()
    assert tries == ["a"]
    background.keep_only({"b"})
    assert background.run("a", "test", refused), "a key forgotten (its group gone) has no back-off left"
    await background.drain()
    assert tries == ["a", "a"]


async def test_a_deposed_leader_starts_no_write_and_cancel_stops_those_under_way() -> None:
    leading = True
    background = Background(lambda: leading)
    started: list[str] = []
    hold = asyncio.Event()

    async def write(key: str) -> str:
        started.append(key)
        await hold.wait()
        return key

    background.run("a", "test", lambda: write("a"))
    await asyncio.sleep(0)
    leading = False
    background.run("b", "test", lambda: write("b"))
    await asyncio.sleep(0)
    assert started == ["a"], "b's write would start after the Lease was lost"
    background.cancel()
    assert await background.after("a") is None and not background.busy("a")
