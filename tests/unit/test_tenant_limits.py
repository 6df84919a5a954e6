"""A tenant's claim cannot make the planner work without bound: each limit refuses with a reason naming the field."""

from __future__ import annotations

import time

import pytest

from builders import GPU, GPU_CLASS, node
from phalanx.planner import DeviceMatcher, Fits, Short, plan, quantity
from phalanx.planner import cel as planner_cel
from phalanx.planner.allocator import MAX_STEPS
from phalanx.planner.model import Claim, Device, DeviceRequest, Group, MatchAttribute, Member, Snapshot, frozen_map

SQUARE = "[" + ",".join(str(i) for i in range(300)) + "]"


def one_member(claim: Claim, devices: list[Device]) -> tuple[Snapshot, Group]:
    snapshot = Snapshot(
        nodes=(node("n1"),), devices=tuple(devices), classes=frozen_map({GPU: GPU_CLASS}), claims=frozen_map({claim.key: claim})
    )
    return snapshot, Group("ml", "g", 1, (Member("ml", "p", "u", claims=(claim.name,)),))


def many_gpus(count: int) -> list[Device]:
    return [Device(GPU, "n1", f"gpu-{i}", node_name="n1", attributes=frozen_map({f"{GPU}/id": i, f"{GPU}/same": 1})) for i in range(count)]


@pytest.mark.parametrize("text", ["1e999999", "9" * 5000, "1e-999999", "123456789012345678901234567890123456789012345678901234567890Ki"])
def test_quantities_beyond_kubernetes_range_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="limit"):
        quantity.amount("memory", text)


def test_ordinary_quantities_still_parse() -> None:
    assert quantity.amount("memory", "80Gi") == 80 * 2**30
    assert quantity.amount("cpu", "1.5") == 1500
    assert quantity.amount("", "1E") == 10**18


def test_a_nested_comprehension_over_the_cost_limit_is_refused_naming_the_field() -> None:
    expression = f"{SQUARE}.all(x, {SQUARE}.all(y, x + y >= 0 && x * y >= 0))"
    assert planner_cel.estimated_cost(expression) > planner_cel.MAX_COST
    claim = Claim("ml", "costly", "uid", (DeviceRequest("gpu", GPU, selectors=(expression,)),))
    result = plan(*one_member(claim, many_gpus(2)))
    assert isinstance(result, Short)
    assert "claim ml/costly spec.devices.requests[0].exactly.selectors[0].cel.expression" in result.message
    assert "exceeds the limit of 1000000" in result.message


def test_a_single_comprehension_over_a_literal_is_allowed() -> None:
    claim = Claim("ml", "fine", "uid", (DeviceRequest("gpu", GPU, selectors=(f"{SQUARE}.exists(x, x == 7)",)),))
    assert isinstance(plan(*one_member(claim, many_gpus(1))), Fits)


def test_an_out_of_range_quantity_in_a_selector_is_refused_naming_the_field() -> None:
    expression = f'device.capacity["{GPU}"].memory.compareTo(quantity("1e999999")) < 0'
    claim = Claim("ml", "huge", "uid", (DeviceRequest("gpu", GPU, selectors=(expression,)),))
    result = plan(*one_member(claim, many_gpus(1)))
    assert isinstance(result, Short)
    assert "claim ml/huge spec.devices.requests[0].exactly.selectors[0].cel.expression" in result.message
    assert "out of range" in result.message


def test_seven_match_attribute_constraints_that_never_settle_hit_the_budget() -> None:
    """Eight one-device requests over 16 devices; the first and last must share a distinct id, so every arrangement of
    the six in between is tried before each failure: the search stops at the budget and names the constraints."""
    requests = tuple(DeviceRequest(f"r{i}", GPU) for i in range(8))
    constraints = (MatchAttribute(f"{GPU}/id", ("r0", "r7")), *(MatchAttribute(f"{GPU}/same", (f"r{i}", "r7")) for i in range(1, 7)))
    claim = Claim("ml", "tangled", "uid", requests, constraints)
    result = plan(*one_member(claim, many_gpus(16)))
    assert isinstance(result, Short)
    assert f"claim ml/tangled: spec.devices.constraints (matchAttribute) need more than {MAX_STEPS} candidate devices" in result.message


def test_constraints_that_settle_are_still_planned() -> None:
    requests = tuple(DeviceRequest(f"r{i}", GPU) for i in range(8))
    claim = Claim("ml", "fine", "uid", requests, tuple(MatchAttribute(f"{GPU}/same", (f"r{i}", "r7")) for i in range(7)))
    result = plan(*one_member(claim, many_gpus(16)))
    assert isinstance(result, Fits) and len(result.claims[0].results) == 8


def test_a_range_that_is_not_a_literal_counts_as_a_full_attribute_map() -> None:
    """`m["k"]` is an index, not a one-element list: a comprehension over it is costed at the 32 entries a device may have."""
    over_map = planner_cel.estimated_cost(f'device.attributes["{GPU}"].all(k, k != "")')
    over_list = planner_cel.estimated_cost('["a"].all(k, k != "")')
    assert over_map >= planner_cel.UNKNOWN_RANGE * 4 > over_list


def test_the_limit_counts_time_in_selectors_not_the_plans_own() -> None:
    """Placing 2,048 members on 5,000 nodes takes longer than 10 s of its own: a limit on the whole plan's time
    stopped it, blaming selectors that took under a millisecond a device (the 5,000-node bench)."""
    matcher = DeviceMatcher()
    devices = many_gpus(20)
    with matcher.time_limit(0.05):
        time.sleep(0.1)  # the plan's own work, past the limit
        assert all(matcher.matches(f'device.attributes["{GPU}"].same == 1', d) for d in devices)


def test_selectors_that_take_too_long_stop_the_plan_naming_the_claim_and_the_next_attempt_goes_on() -> None:
    """A selector within the cost limit can still take tens of ms per device: a plan is bounded in time (here a
    tiny limit, so the test takes no time; the loop's is 10 s), the verdict names the claim field and says why, and
    the verdicts reached stay cached, so attempts make progress until one completes."""
    expression = f"{SQUARE}.exists(x, string(x).matches('^9+9$') && device.attributes['{GPU}'].id == x)"  # ~3 ms per device
    assert planner_cel.estimated_cost(expression) <= planner_cel.MAX_COST
    claim = Claim("ml", "slow", "uid", (DeviceRequest("gpu", GPU, selectors=(expression,)),))
    snapshot, group = one_member(claim, many_gpus(40))
    matcher = DeviceMatcher()
    plan(*one_member(Claim("ml", "plain", "uid", (DeviceRequest("gpu", GPU),)), many_gpus(40)), matcher)  # the class's verdicts
    attempts = []
    for _ in range(200):
        with matcher.time_limit(0.02):
            attempts.append(plan(snapshot, group, matcher))
        if not (isinstance(attempts[-1], Short) and attempts[-1].timed_out):
            break
    first, last = attempts[0], attempts[-1]
    assert isinstance(first, Short) and first.timed_out, first
    assert "claim ml/slow spec.devices.requests[0]: device selectors took over" in first.message
    assert "ms per device" in first.message
    assert len(attempts) > 1 and isinstance(last, Short) and not last.timed_out, "a later attempt finished judging every device"
    assert "no combination" in last.message or "short" in last.message, last.message
