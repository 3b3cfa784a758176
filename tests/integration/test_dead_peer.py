"""A Postgres peer that goes silent is found dead within a bound (awooop/core/pools.py).

The client runs on a second host (a network namespace, tests/support/netns.py); its link is
cut with no reset, as when the server's host dies or a firewall drops the flow. A statement in
flight, a pooled connection's next statement and an idle LISTEN connection each fail within the
user timeout instead of waiting for the kernel's retransmissions to give up (about 15 minutes).
The client scales the bounds down (user timeout 3 s, probes after 1 s idle) to keep this short.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from awooop.core.config import Settings
from awooop.core.db import Database
from tests.support.faultproxy import fault_proxy
from tests.support.netns import remote_host

ROOT = Path(__file__).resolve().parents[2]

CLIENT = """
import asyncio, json, sys, time
from awooop.core import pools

pools.KEEPALIVE_IDLE_S, pools.KEEPALIVE_INTERVAL_S, pools.KEEPALIVE_COUNT = 1, 1, 2
pools.TCP_USER_TIMEOUT_S = 3


async def timed(what, awaitable):
    started = time.monotonic()
    try:
        await asyncio.wait_for(awaitable, 120)
        outcome = "answered"
    except Exception as exc:
        outcome = type(exc).__name__
    return what, outcome, round(time.monotonic() - started, 2)


async def main(url):
    conn = await pools.connect(url)
    listener = await pools.connect(url)
    closed = asyncio.Event()
    listener.add_termination_listener(lambda _c: closed.set())
    await listener.add_listener("awooop_dead_peer_test", lambda *_a: None)
    pool = await pools.create_pool(url, pools.PLATFORM_ROLE, min_size=1, max_size=1)
    await pool.fetchval("SELECT 1")
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # the cut
    results = await asyncio.gather(
        timed("statement in flight", conn.fetchval("SELECT pg_sleep(0.1)")),
        timed("pooled connection", pool.fetchval("SELECT 1")),
        timed("idle listener", closed.wait()),
    )
    print(json.dumps([list(r) for r in results]), flush=True)


asyncio.run(main(sys.argv[1]))
"""


async def test_a_silent_peer_fails_statements_and_idle_listeners_within_the_user_timeout(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    with remote_host() as host, fault_proxy(settings.database_url, listen_host=host.near) as proxy:
        client = await asyncio.create_subprocess_exec(
            *host.command(sys.executable, str(script), proxy.url(settings.database_url)),
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert client.stdout is not None and client.stdin is not None
            ready = await asyncio.wait_for(client.stdout.readline(), 60)
            assert ready == b"ready\n", ready
            await asyncio.sleep(1.5)  # every connection idle past the probe delay
            host.cut()
            client.stdin.write(b"cut\n")
            out, err = await asyncio.wait_for(client.communicate(), 150)
        finally:
            if client.returncode is None:
                client.kill()
                await client.wait()
    assert client.returncode == 0, err.decode()
    results = {what: (outcome, seconds) for what, outcome, seconds in json.loads(out)}
    assert results["idle listener"][0] == "answered", results  # its termination listener fired
    for what, (outcome, seconds) in results.items():
        if what != "idle listener":
            assert outcome != "answered" and outcome != "TimeoutError", (what, results)
        # The user timeout (3 s) after the last acknowledged byte; room for a loaded machine.
        # Without the options each would wait for the kernel's retransmissions (minutes).
        assert seconds < 20, (what, results)
