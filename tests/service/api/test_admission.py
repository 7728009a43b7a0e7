"""api/admission.py: the queue of the ``api`` places (issue 38: requests wait for a place up
to a target delay, in order, holding nothing, and are refused only beyond it or when the queue
is full; a standing queue shortens the wait), and health checks, which are never refused for
overlapping (issue 24: a third overlapping /healthz on an idle server was a 503): they wait,
boundedly, for a place."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from api.admission import HEALTH_MAX_WAITING, Admission, Gate


def _admission() -> Admission:
    return Admission(max_in_flight=2, max_health=2, max_waiting=10, retry_after_s=1)


def test_a_health_check_over_its_reserve_borrows_a_free_request_place() -> None:
    admission = _admission()

    async def three() -> list[str | None]:
        return [await admission.enter_health() for _ in range(3)]

    assert anyio.run(three) == ["health", "health", "api"]
    assert admission.refused == 0


def test_a_health_check_waits_for_a_place_and_a_flood_is_refused_at_once() -> None:
    admission = _admission()
    admission.health_in_flight, admission.api.holders = 2, 2  # every place taken

    async def scenario() -> tuple[list, float]:
        answers: list = []

        async def check() -> None:
            answers.append(await admission.enter_health())

        async with anyio.create_task_group() as group:
            for _ in range(HEALTH_MAX_WAITING):
                group.start_soon(check)
            await anyio.sleep(0.1)
            started = time.monotonic()
            flood = await admission.enter_health()  # one more than may wait: refused at once
            refused_after = time.monotonic() - started
            assert flood is None
            assert answers == []  # all still waiting
            admission.leave("health")  # a place frees: one waiter gets it ...
            await anyio.sleep(0.1)
            assert answers == ["health"]
            admission.max_health += HEALTH_MAX_WAITING  # ... and the others once more are free
        return answers, refused_after

    answers, refused_after = anyio.run(scenario)
    assert refused_after < 0.05
    assert answers == ["health"] * HEALTH_MAX_WAITING
    assert admission.health_waiting == 0


# ------------------------------------------------------------------ the queue of `api` places


def test_waiters_get_places_in_order_and_never_more_holders_than_places() -> None:
    gate = Gate(3, target_s=10.0, saturated_wait_s=1.0, max_queued=100)
    order: list[int] = []
    most = 0

    async def request(index: int) -> None:
        nonlocal most
        assert await gate.enter()
        order.append(index)
        most = max(most, gate.holders)
        await asyncio.sleep(0.01)  # the request's work
        gate.leave()

    async def burst() -> None:
        async with anyio.create_task_group() as group:
            for index in range(60):
                group.start_soon(request, index)
                await asyncio.sleep(0)  # arrive in this order

    asyncio.run(burst())
    assert order == list(range(60))  # FIFO
    assert most == 3 and gate.holders == 0 and gate.queued == 0
    assert gate.refused == 0 and gate.admitted == 60 and gate.admitted_after_wait == 57


def test_a_waiter_is_refused_after_its_allowance_and_a_full_queue_at_once() -> None:
    gate = Gate(1, target_s=0.3, saturated_wait_s=0.3, max_queued=1)

    async def scenario() -> tuple[bool, float, bool, float]:
        assert await gate.enter()  # the only place, never given back
        started = time.monotonic()
        waiting = asyncio.ensure_future(gate.enter())
        await asyncio.sleep(0.05)
        full = await gate.enter()  # the queue holds its one waiter: refused at once
        full_after = time.monotonic() - started
        late = await waiting
        return full, full_after, late, time.monotonic() - started

    full, full_after, late, late_after = asyncio.run(scenario())
    assert full is False and full_after < 0.25
    assert late is False and 0.3 <= late_after < 2.0  # generous upper bound: a loaded machine
    assert gate.refused_full == 1 and gate.refused_late == 1 and gate.queued == 0
    assert gate.holders == 1


def test_a_standing_queue_shortens_the_wait_until_it_drains() -> None:
    """CoDel-style: the full target while the queue has drained within the last target; the
    saturated wait once it has stayed non-empty for longer; the full target again once it
    empties."""
    now = [100.0]
    gate = Gate(1, target_s=1.0, saturated_wait_s=0.1, max_queued=10, clock=lambda: now[0])

    async def scenario() -> list[float]:
        allowances = [gate.allowed_wait_s()]  # empty queue: a burst may wait the target
        assert await gate.enter()
        waiters = [asyncio.ensure_future(gate.enter()) for _ in range(2)]
        await asyncio.sleep(0)
        now[0] += 0.5
        allowances.append(gate.allowed_wait_s())  # non-empty for 0.5 s: still a burst
        now[0] += 0.6
        allowances.append(gate.allowed_wait_s())  # non-empty for 1.1 s: saturation
        gate.leave()
        gate.leave()  # both waiters admitted: the queue has drained
        allowances.append(gate.allowed_wait_s())
        assert await asyncio.gather(*waiters) == [True, True]
        return allowances

    assert asyncio.run(scenario()) == [1.0, 1.0, 0.1, 1.0]


@pytest.mark.parametrize("granted_first", [False, True])
def test_a_cancelled_waiter_leaves_the_queue_and_passes_on_a_place_handed_to_it(
        granted_first: bool) -> None:
    gate = Gate(1, target_s=10.0, saturated_wait_s=10.0, max_queued=10)

    async def scenario() -> None:
        assert await gate.enter()
        cancelled = asyncio.ensure_future(gate.enter())
        await asyncio.sleep(0)
        second = asyncio.ensure_future(gate.enter())
        await asyncio.sleep(0)
        if granted_first:
            gate.leave()  # handed to `cancelled`, which is cancelled before it runs
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        if not granted_first:
            assert gate.queued == 1
            gate.leave()
        assert await asyncio.wait_for(second, 1) is True  # the place reached the next waiter
        assert gate.holders == 1 and gate.queued == 0

    asyncio.run(scenario())
