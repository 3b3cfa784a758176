"""When the relay's loop is woken (awooop.streams.relay_wakeup.Wakeup): dispatch notices at once
after a quiet spell, one read per window while they come faster; others linger."""

from __future__ import annotations

import asyncio

from awooop.streams.relay_wakeup import DISPATCH_PAYLOAD, EVENTS_PAYLOAD, NOTICES_TABLE, Wakeup
from tests.support.waiting import eventually

WINDOW_S = 0.3


def wakeup(*, window_s: float = WINDOW_S, linger_s: float = 5.0) -> tuple[Wakeup, list[int]]:
    notices: list[int] = []
    w = Wakeup(
        linger_s=linger_s,
        poll_interval_s=1.0,
        on_notices=lambda: notices.append(1),
        dispatch_window_s=window_s,
    )
    w.event = asyncio.Event()
    return w, notices


def notify(w: Wakeup, payload: str) -> None:
    w.on_notify(None, 0, "awooop_relay", payload)


def consume(w: Wakeup) -> None:
    """What the relay loop does when woken: clear the event and start a read."""
    assert w.event is not None
    w.event.clear()
    w.read_started()


async def test_a_dispatch_notice_after_a_quiet_spell_wakes_the_relay_at_once() -> None:
    w, _ = wakeup()
    notify(w, DISPATCH_PAYLOAD)
    assert w.event is not None and w.event.is_set()


def quick_until_held(w: Wakeup, most: int = 20) -> int:
    """Dispatch notices back to back, each read at once, until one is held: how many were read."""
    assert w.event is not None
    for read in range(most):
        notify(w, DISPATCH_PAYLOAD)
        if not w.event.is_set():
            return read
        consume(w)
    raise AssertionError(f"{most} notices back to back and no window opened")


async def test_commits_that_caught_up_with_each_other_are_still_read_at_once() -> None:
    w, _ = wakeup()
    # After a quiet spell the first few back to back (a paced producer catching up) go at once.
    assert quick_until_held(w) >= 4


async def test_dispatch_notices_faster_than_the_window_share_one_read_a_window_later() -> None:
    w, _ = wakeup()
    assert w.event is not None
    quick_until_held(w)  # a steady stream: this notice waits for the window
    notify(w, DISPATCH_PAYLOAD)
    assert not w.event.is_set()  # a timer, not a busy read
    started = asyncio.get_running_loop().time()
    await eventually(w.event.is_set, what="the window's read", timeout_s=30, interval_s=0.01)
    assert asyncio.get_running_loop().time() - started >= WINDOW_S * 0.9


async def test_one_long_gap_in_a_steady_stream_does_not_stop_the_batching() -> None:
    w, _ = wakeup()
    assert w.event is not None
    quick_until_held(w)
    consume(w)
    for _ in range(3):  # the stream goes on, a window at a time
        notify(w, DISPATCH_PAYLOAD)
        consume(w)
    await asyncio.sleep(WINDOW_S * 1.5)  # one late commit
    notify(w, DISPATCH_PAYLOAD)
    assert w.event.is_set()  # itself read at once
    consume(w)
    notify(w, DISPATCH_PAYLOAD)
    assert not w.event.is_set()  # and the stream after it is still batched


async def test_a_read_that_starts_meanwhile_takes_the_waiting_notices() -> None:
    w, _ = wakeup()
    assert w.event is not None
    quick_until_held(w)
    w.event.set()  # woken for another reason (a re-check, the poll)
    consume(w)  # this read sees the held commit: the window's timer is cancelled
    await asyncio.sleep(WINDOW_S * 2)
    assert not w.event.is_set()


async def test_a_zero_window_wakes_the_relay_for_every_dispatch_notice() -> None:
    w, _ = wakeup(window_s=0.0)
    assert w.event is not None
    for _ in range(3):
        notify(w, DISPATCH_PAYLOAD)
        assert w.event.is_set()
        consume(w)


async def test_other_events_linger_and_contract_notices_go_at_once() -> None:
    w, notices = wakeup(linger_s=WINDOW_S)
    assert w.event is not None
    notify(w, EVENTS_PAYLOAD)
    assert not w.event.is_set()
    await eventually(w.event.is_set, what="the linger's end", timeout_s=30, interval_s=0.01)
    consume(w)
    notify(w, NOTICES_TABLE)
    assert w.event.is_set() and notices == [1]


async def test_a_quiet_spell_longer_than_the_window_resets_it() -> None:
    w, _ = wakeup(window_s=0.05)
    assert w.event is not None
    notify(w, DISPATCH_PAYLOAD)
    consume(w)
    await asyncio.sleep(0.1)
    notify(w, DISPATCH_PAYLOAD)
    assert w.event.is_set()
