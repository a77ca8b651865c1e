"""The one retry helper: delays grow and cap, jitter stays bounded, retry-after is honoured, tries are bounded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.core.retry import (
    CHANNEL_RECONNECT,
    CRASH_RESTART,
    MEMORY_MODEL_CALL,
    MODEL_API,
    PENDING_EXTRACTION,
    TELEGRAM_SEND,
    Backoff,
    RetryStreak,
    retrying,
)


class Transient(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("transient")
        self.retry_after = retry_after


class Fatal(Exception):
    pass


class Script:
    """A call failing with the given errors in turn, then answering "done"; the waits asked for."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.slept: list[float] = []

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def transient(exc: Exception) -> bool:
    return isinstance(exc, Transient)


def told(exc: Exception) -> float | None:
    return exc.retry_after if isinstance(exc, Transient) else None


# -- Backoff ------------------------------------------------------------------------------------


def test_delays_grow_by_the_factor_and_stop_at_the_maximum() -> None:
    policy = Backoff(base=1.0, maximum=60.0)
    assert [policy.delay(n, rand=lambda: 0.0) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    tripled = Backoff(base=0.5, maximum=10.0, factor=3.0)
    assert [tripled.delay(n, rand=lambda: 0.0) for n in range(5)] == [0.5, 1.5, 4.5, 10.0, 10.0]


def test_a_very_long_streak_stays_at_the_maximum() -> None:
    assert Backoff(base=1.0, maximum=60.0).delay(100_000) == 60.0


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.5, 0.999999])
def test_jitter_only_shortens_a_wait_and_by_at_most_its_share(draw: float) -> None:
    policy = Backoff(base=1.0, maximum=60.0, jitter=0.2)
    for retry in range(10):
        nominal = policy.delay(retry, rand=lambda: 0.0)
        waited = policy.delay(retry, rand=lambda: draw)
        assert nominal * 0.8 <= waited <= nominal
    assert policy.delay(10, rand=lambda: 1.0) == pytest.approx(48.0)


def test_without_a_drawn_number_the_jitter_still_stays_within_bounds() -> None:
    policy = Backoff(base=2.0, maximum=2.0, jitter=0.25)
    assert all(1.5 <= policy.delay(0) <= 2.0 for _ in range(200))


def test_attempts_bound_the_retries() -> None:
    policy = Backoff(base=1.0, maximum=4.0, attempts=3)
    assert [policy.allows(n) for n in range(4)] == [True, True, False, False]
    assert [policy.wait(n, rand=lambda: 0.0) for n in range(3)] == [1.0, 2.0, None]
    assert Backoff(base=1.0, maximum=1.0, attempts=1).wait(0) is None
    assert Backoff(base=1.0, maximum=1.0).allows(10**6)  # no limit: for ever


def test_retry_after_replaces_the_backoff_without_jitter() -> None:
    policy = Backoff(base=0.5, maximum=8.0, jitter=0.25, attempts=4, longest_wait=30.0)
    assert policy.wait(0, retry_after=7.0, rand=lambda: 0.9) == 7.0
    assert policy.wait(1, retry_after=-3.0) == 0.0  # a clock-skewed date in the past: at once
    assert policy.wait(2, retry_after=30.0) == 30.0


def test_a_retry_after_longer_than_the_longest_wait_gives_up() -> None:
    policy = Backoff(base=0.5, maximum=8.0, attempts=4, longest_wait=30.0)
    assert not policy.honours(31.0)
    assert policy.wait(0, retry_after=31.0) is None
    assert Backoff(base=0.5, maximum=8.0).wait(0, retry_after=3600.0) == 3600.0  # no limit set: as told


def test_retry_after_does_not_add_tries() -> None:
    assert Backoff(base=0.5, maximum=8.0, attempts=2).wait(1, retry_after=0.1) is None


@pytest.mark.parametrize("options", [
    {"base": -1.0, "maximum": 1.0}, {"base": 2.0, "maximum": 1.0}, {"base": 1.0, "maximum": 2.0, "factor": 0.5},
    {"base": 1.0, "maximum": 2.0, "jitter": 1.5}, {"base": 1.0, "maximum": 2.0, "attempts": 0},
])
def test_a_policy_that_makes_no_sense_is_refused(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**options)  # type: ignore[arg-type]


def test_the_sites_keep_their_numbers() -> None:
    no_jitter = lambda: 0.0
    assert [MODEL_API.delay(n, no_jitter) for n in range(6)] == [0.5, 1, 2, 4, 8, 8]
    assert MODEL_API.jitter == 0.25
    assert [CHANNEL_RECONNECT.delay(n, no_jitter) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert CHANNEL_RECONNECT.jitter == 0.2
    assert [TELEGRAM_SEND.wait(n) for n in range(3)] == [0.5, 1.0, None]
    assert [CRASH_RESTART.delay(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert [MEMORY_MODEL_CALL.wait(n) for n in range(3)] == [1.0, 4.0, None]
    assert [PENDING_EXTRACTION.delay(n) for n in range(3)] == [60.0, 300.0, 300.0]
    assert [PENDING_EXTRACTION.allows(n) for n in range(3)] == [True, True, False]


# -- RetryStreak --------------------------------------------------------------------------------


def test_a_streak_counts_its_retries_and_starts_over_after_a_reset() -> None:
    streak = RetryStreak(Backoff(base=1.0, maximum=4.0, jitter=0.5), rand=lambda: 1.0)
    assert [streak.next() for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]
    assert streak.retries == 4
    streak.reset()
    assert (streak.retries, streak.next()) == (0, 0.5)


# -- retrying -----------------------------------------------------------------------------------


async def test_retrying_answers_after_transient_failures_with_the_policy_waits() -> None:
    call = Script(Transient(), Transient())
    answer = await retrying(call, transient, Backoff(base=1.0, maximum=60.0, attempts=3), sleep=call.sleep)
    assert (answer, call.calls, call.slept) == ("done", 3, [1.0, 2.0])


async def test_retrying_raises_the_last_failure_when_the_tries_are_spent() -> None:
    last = Transient()
    call = Script(Transient(), Transient(), last, Transient())
    with pytest.raises(Transient) as raised:
        await retrying(call, transient, Backoff(base=1.0, maximum=60.0, attempts=3), sleep=call.sleep)
    assert raised.value is last
    assert (call.calls, call.slept) == (3, [1.0, 2.0])


async def test_retrying_never_retries_what_is_not_retryable() -> None:
    call = Script(Fatal())
    with pytest.raises(Fatal):
        await retrying(call, transient, Backoff(base=1.0, maximum=60.0, attempts=5), sleep=call.sleep)
    assert (call.calls, call.slept) == (1, [])


async def test_retrying_waits_as_the_server_asked() -> None:
    call = Script(Transient(retry_after=7.5), Transient())
    policy = Backoff(base=0.5, maximum=8.0, jitter=0.25, attempts=3)
    answer = await retrying(call, transient, policy, retry_after=told, sleep=call.sleep, rand=lambda: 0.0)
    assert (answer, call.slept) == ("done", [7.5, 1.0])


async def test_retrying_gives_up_at_once_on_a_retry_after_too_long() -> None:
    call = Script(Transient(retry_after=3600.0))
    policy = Backoff(base=0.5, maximum=8.0, attempts=3, longest_wait=60.0)
    with pytest.raises(Transient):
        await retrying(call, transient, policy, retry_after=told, sleep=call.sleep)
    assert (call.calls, call.slept) == (1, [])


async def test_retrying_with_one_attempt_is_a_plain_call() -> None:
    call = Script(Transient())
    with pytest.raises(Transient):
        await retrying(call, transient, replace(MEMORY_MODEL_CALL, attempts=1), sleep=call.sleep)
    assert (call.calls, call.slept) == (1, [])
