"""api/admission.py: health checks are never refused for overlapping (issue 24: a third
overlapping /healthz on an idle server was a 503); they wait, boundedly, for a place."""

from __future__ import annotations

import time

import anyio

from api.admission import HEALTH_MAX_WAITING, Admission


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
    admission.in_flight.update(health=2, api=2)  # every place taken

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
