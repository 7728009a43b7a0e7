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

from api.admission import HEALTH_MAX_WAITING, MIN_DEPARTURES, MIN_GENERATIONS, Admission, Gate


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


# ------------------------------------------ refusing from the tail by the measured drain rate
# The clock is the test's; times are multiples of 1/8 so the arithmetic is exact. The
# allowances (10.1 s) are long in real time too, so no expiry timer fires during a test: every
# refusal here is a prediction.


async def _settle() -> None:
    for _ in range(5):  # a set future wakes its shield, then the task awaiting it
        await asyncio.sleep(0)


async def _queue_up(gate: Gate, count: int) -> list[asyncio.Task[bool]]:
    tasks = [asyncio.ensure_future(gate.enter()) for _ in range(count)]
    await _settle()
    assert gate.queued == count
    return tasks


def _outcomes(tasks: list[asyncio.Task[bool]]) -> list[bool | None]:
    return [task.result() if task.done() else None for task in tasks]


def _gate(now: list[float]) -> Gate:
    return Gate(1, target_s=10.1, saturated_wait_s=10.1, max_queued=1000,
                clock=lambda: now[0])


def test_a_burst_the_drain_rate_lets_in_within_the_target_is_never_refused() -> None:
    """40 waiters; the first departure comes after 3 s (one service time, the place filling),
    then one every 0.125 s: the last waits 3 + 39 x 0.125 = 7.875 s, within the 10.1 s
    allowance, and nobody is refused early. (Counting the 3 s before the first departure
    as an interval would predict 0.47 s per departure at the 8th and refuse the tail.)"""
    now = [0.0]
    gate = _gate(now)

    async def scenario() -> list[bool | None]:
        assert await gate.enter()
        tasks = await _queue_up(gate, 40)
        now[0] = 3.0
        for _ in range(40):
            gate.leave()
            await _settle()
            assert gate.refused == 0, (now[0], gate.departure_interval_s())
            now[0] += 0.125
        return _outcomes(tasks)

    assert asyncio.run(scenario()) == [True] * 40
    assert gate.admitted_after_wait == 40 and gate.longest_wait_s == 7.875
    assert gate.queued == 0 and gate.holders == 1


def test_a_tail_that_cannot_make_it_is_refused_early_and_the_head_keeps_its_place() -> None:
    """100 waiters at t = 0, one departure every 0.25 s from t = 0.625. At the 8th
    (t = 2.375) the drain rate is measured: the waiter at position k would get a place at
    2.375 + 0.25 k s, within 10.1 s for k <= 30, so the 62 behind them are refused then
    (7.7 s before their timers), from the tail; the 30 ahead are all admitted. A newcomer
    is refused at once when its position times 0.25 s exceeds 10.1 s (position 41)."""
    now = [0.0]
    gate = _gate(now)

    async def scenario() -> tuple[list[bool | None], list[bool | None], bool]:
        assert await gate.enter()
        tasks = await _queue_up(gate, 100)
        for index in range(8):  # the 8th departure at 2.375 s
            now[0] = 0.625 + 0.25 * index
            gate.leave()
        await _settle()
        assert gate.departure_interval_s() == 0.25
        assert gate.refused_predicted == 62 and gate.queued == 30
        outcomes = _outcomes(tasks)
        assert outcomes == [True] * 8 + [None] * 30 + [False] * 62  # the tail only
        newcomers = await _queue_up_after(gate, 10)  # positions 31..40: 10 s at most
        last = await gate.enter()  # position 41: 10.25 s > 10.1 s, refused at once
        for _ in range(40):
            now[0] += 0.25
            gate.leave()
            await _settle()
        return _outcomes(tasks), _outcomes(newcomers), last

    outcomes, newcomers, last = asyncio.run(scenario())
    assert outcomes == [True] * 38 + [False] * 62 and newcomers == [True] * 10
    assert last is False
    assert gate.refused_predicted == 63 and gate.refused_late == 0 and gate.refused == 63
    assert gate.longest_wait_s == 10.0  # the last newcomer (40 x 0.25 s): within 10.1 s


async def _queue_up_after(gate: Gate, count: int) -> list[asyncio.Task[bool]]:
    before = gate.queued
    tasks = [asyncio.ensure_future(gate.enter()) for _ in range(count)]
    await _settle()
    assert gate.queued == before + count and not any(task.done() for task in tasks)
    return tasks


@pytest.mark.parametrize("places", [1, 6])
def test_nothing_is_predicted_before_the_minimum_departures(places: int) -> None:
    """Departures 0.25 s apart and 100 waiters (the tail would need 25 s): before
    `min_departures` departures (MIN_DEPARTURES, or MIN_GENERATIONS clumps of `places`)
    nobody is refused early, not even a newcomer; at the `min_departures`-th the tail is."""
    now = [0.0]
    gate = Gate(places, target_s=10.1, saturated_wait_s=10.1, max_queued=1000,
                clock=lambda: now[0])
    minimum = gate.min_departures

    async def scenario() -> None:
        for _ in range(places):
            assert await gate.enter()
        await _queue_up(gate, 100)
        now[0] = 1.0
        for _ in range(minimum - 1):
            gate.leave()
            now[0] += 0.25
        await _settle()
        assert gate.departure_interval_s() is None
        assert gate.refused == 0 and gate.queued == 100 - (minimum - 1)
        await _queue_up_after(gate, 1)  # 90 or more places back (22.5 s): still queued
        gate.leave()
        assert gate.departure_interval_s() == 0.25 and gate.refused_predicted > 0

    assert minimum == max(MIN_DEPARTURES, MIN_GENERATIONS * places) > 1  # 8, then 12
    asyncio.run(scenario())


def test_the_drain_rate_is_measured_afresh_once_the_queue_empties() -> None:
    """A slow busy period (a departure per second) ends when the queue empties; the next
    burst of 12 is not judged by it (12 x 1 s would exceed 10.1 s: the last two would be
    refused at once), and its own drain rate, 0.25 s, is measured from its own first
    departure."""
    now = [0.0]
    gate = _gate(now)

    async def scenario() -> list[bool | None]:
        assert await gate.enter()
        first = await _queue_up(gate, 10)
        for _ in range(8):
            now[0] += 1.0
            gate.leave()
        assert gate.departure_interval_s() == 1.0
        for _ in range(2):
            now[0] += 1.0
            gate.leave()
        await _settle()
        assert _outcomes(first) == [True] * 10 and gate.queued == 0
        assert gate.departure_interval_s() is None  # reset with the queue
        now[0] = 20.0
        second = await _queue_up(gate, 12)  # none refused at once
        for _ in range(8):
            now[0] += 0.25
            gate.leave()
        assert gate.departure_interval_s() == 0.25
        for _ in range(4):
            now[0] += 0.25
            gate.leave()
        await _settle()
        return _outcomes(second)

    assert asyncio.run(scenario()) == [True] * 12
    assert gate.refused == 0


def test_a_cancelled_waiter_leaves_the_queue_while_the_drain_rate_is_measured() -> None:
    """Waiters cancelled in the middle and at the tail of a measured queue leave it (and
    its bookkeeping); the others get their places in order, none is refused, and nothing of
    the cancelled ones stays behind."""
    now = [0.0]
    gate = _gate(now)

    async def scenario() -> list[bool | None]:
        assert await gate.enter()
        tasks = await _queue_up(gate, 20)
        for _ in range(8):
            now[0] += 0.25
            gate.leave()
        await _settle()
        assert gate.departure_interval_s() == 0.25
        for index in (12, 19):
            tasks[index].cancel()
        await _settle()
        assert gate.queued == 20 - 8 - 2
        for _ in range(20 - 8 - 2):
            now[0] += 0.25
            gate.leave()
        await _settle()
        assert gate.queued == 0
        return [None if task.cancelled() else task.result() for task in tasks]

    outcomes = asyncio.run(scenario())
    assert outcomes == [True] * 12 + [None] + [True] * 6 + [None]
    assert gate.refused == 0 and gate.holders == 1 and not gate._waiters
