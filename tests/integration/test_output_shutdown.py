"""A server that starts to stop ends its open output streams at once (their clients resume
elsewhere with ``Last-Event-ID``) instead of waiting its whole graceful-shutdown time for
readers who never leave."""

from __future__ import annotations

import asyncio
import time

import httpx
import msgspec

from awooop.commands.serve import listen_socket
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.http.app import create_app
from awooop.http.server import StoppingServer, server_config
from awooop.ingest import credentials
from awooop.runs import leases
from awooop.services import Services
from tests.support.output import events
from tests.support.runs import create_runs
from tests.support.waiting import eventually

P = "proj-out-stop"
GRACE_S = 300  # what an unfinished stream would hold the shutdown for


async def test_a_stopping_server_ends_its_output_streams_instead_of_waiting_for_them(
    settings: Settings, db: Database
) -> None:
    [run_id] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "w1", 60)) is not None
    _, token = await credentials.create_management_token(db, P, "read")
    quiet = msgspec.structs.replace(settings, output_poll_s=GRACE_S, output_stream_max_s=GRACE_S)
    services = await Services.open(quiet, db_pool_size=4)
    config = server_config(create_app(services), quiet, timeout_graceful_shutdown=GRACE_S)
    server = StoppingServer(config, services.stopping)
    sock = listen_socket("127.0.0.1", 0, reuse_port=False)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: bool(server.started), interval_s=0.02, what="the server started")
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        url = f"/v1/projects/{P}/runs/{run_id}/output"
        headers = {"authorization": f"Bearer {token}"}
        async with (
            httpx.AsyncClient(base_url=base, timeout=GRACE_S) as http,
            events(http, url, headers) as stream,
        ):
            reading = asyncio.create_task(stream.until_end(timeout_s=GRACE_S))
            await asyncio.sleep(0.5)  # the stream is open and waits for output
            assert not reading.done()
            asked = time.monotonic()
            server.should_exit = True
            seen = await asyncio.wait_for(reading, GRACE_S / 2)
            await asyncio.wait_for(serving, GRACE_S / 2)
            took = time.monotonic() - asked
        assert [e.name for e in seen] == []  # no output, no terminal event: the client resumes
        # Not the grace: the shutdown did not wait for the reader (it took a fraction of it).
        assert took < GRACE_S / 2, took
    finally:
        server.should_exit = True
        if not serving.done():
            serving.cancel()
        sock.close()
        await services.close()
