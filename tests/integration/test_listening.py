"""The runtime's one LISTEN loop (awooop/core/listening.py): notices on every channel, a new
connection after the old one is killed (and on_connected again: notices meanwhile are lost), a
server that never answers costs a bounded round, and a stop ends it."""

from __future__ import annotations

import asyncio
import socket
import time

import asyncpg

from awooop.core.listening import listen
from tests.support.waiting import eventually


async def test_notices_reach_each_channel_and_a_killed_connection_is_replaced(
    database_url: str,
) -> None:
    heard: list[tuple[str, object]] = []
    rounds: list[float] = []
    stop, connected = asyncio.Event(), asyncio.Event()

    def notified(_conn: object, _pid: int, channel: str, payload: object) -> None:
        heard.append((channel, payload))

    task = asyncio.create_task(
        listen(
            database_url,
            {"t_bell_a": notified, "t_bell_b": notified},
            stop,
            connected,
            name="test_bell",
            pause_s=0.1,
            on_connected=lambda: rounds.append(time.monotonic()),
        )
    )
    admin = await asyncpg.connect(database_url)
    try:
        await asyncio.wait_for(connected.wait(), 30)
        await admin.execute("SELECT pg_notify('t_bell_a', '1'), pg_notify('t_bell_b', '2')")
        await eventually(lambda: _true(len(heard) == 2), timeout_s=30, what="two notices")
        assert sorted(heard) == [("t_bell_a", "1"), ("t_bell_b", "2")]
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN%t_bell_b%'"
        )
        assert killed == 1
        await eventually(lambda: _true(len(rounds) == 2), timeout_s=30, what="a new connection")
        await asyncio.wait_for(connected.wait(), 30)
        await admin.execute("SELECT pg_notify('t_bell_a', '3')")
        await eventually(lambda: _true(len(heard) == 3), timeout_s=30, what="the third notice")
    finally:
        await admin.close()
        stop.set()
        await asyncio.wait_for(task, 30)
    assert not connected.is_set()


async def test_a_server_that_never_answers_costs_a_bounded_round_and_a_stop_ends_it() -> None:
    """A socket that accepts nothing: the connect times out (not hangs), the round is tried
    again after the pause, and a stop ends the loop."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        stop, connected = asyncio.Event(), asyncio.Event()
        started = time.monotonic()
        task = asyncio.create_task(
            listen(
                f"postgresql://postgres@127.0.0.1:{port}/postgres",
                {"t_never": lambda *_: None},
                stop,
                connected,
                name="test_silent",
                timeout_s=0.5,
                pause_s=0.1,
            )
        )
        await asyncio.sleep(1.5)  # a few rounds of 0.5 s timeouts
        assert not task.done() and not connected.is_set()
        stop.set()
        await asyncio.wait_for(task, 10)
    assert time.monotonic() - started < 10


async def _true(value: bool) -> bool:
    return value
