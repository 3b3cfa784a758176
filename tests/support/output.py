"""Streamed run output in tests: handlers that emit it, and a reader of server-sent events.

:func:`paced` is driven by the test through :data:`FEEDS` (in-process workers): it emits each
text the test puts in its feed (``input.feed``), and returns at ``None``. :func:`tokens`
runs in worker processes too: it emits ``input.tokens`` one every ``input.every_s`` seconds,
and on the attempts in ``input.hang_on_attempts`` stops after ``input.hang_after`` tokens
and hangs (until its worker is killed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec

from awooop.worker.context import RunContext

FEEDS: dict[str, asyncio.Queue[str | None]] = {}


def feed(name: str) -> asyncio.Queue[str | None]:
    return FEEDS.setdefault(name, asyncio.Queue())


async def paced(run: RunContext) -> dict[str, Any]:
    queue = feed(run.input["feed"])
    sent = 0
    while (text := await queue.get()) is not None:
        await run.emit_output(text)
        sent += 1
    return {"sent": sent, "attempt": run.attempt}


async def tokens(run: RunContext) -> dict[str, Any]:
    every = float(run.input.get("every_s", 0.05))
    for i, token in enumerate(run.input["tokens"]):
        if run.attempt in run.input.get("hang_on_attempts", []) and i == run.input["hang_after"]:
            await asyncio.sleep(3600)  # until the worker is killed
        await run.emit_output(token)
        await asyncio.sleep(every)
    return {"attempt": run.attempt}


class Event(msgspec.Struct, frozen=True):
    name: str
    data: Any
    id: int | None = None


class EventReader:
    """The server-sent events of one streaming response, one at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()

    async def next(self, timeout_s: float = 30.0) -> Event:
        return await asyncio.wait_for(self._next(), timeout_s)

    async def _next(self) -> Event:
        fields: dict[str, str] = {}
        async for line in self.lines:
            if line == "":
                if "event" in fields or "data" in fields:
                    break
                continue
            if line.startswith(":"):
                continue  # a comment (keep-alive)
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        else:
            raise EOFError("the stream ended")
        event_id = fields.get("id")
        return Event(
            name=fields.get("event", "message"),
            data=msgspec.json.decode(fields["data"]) if "data" in fields else None,
            id=None if event_id is None else int(event_id),
        )

    async def until_end(self, timeout_s: float = 60.0) -> list[Event]:
        """Every event up to and with ``end`` (or the stream's end)."""
        seen: list[Event] = []
        while True:
            try:
                event = await self.next(timeout_s)
            except EOFError:
                return seen
            seen.append(event)
            if event.name == "end":
                return seen


@asynccontextmanager
async def events(
    http: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[EventReader]:
    """A stream of ``url``'s events; leaving the block disconnects."""
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, (await response.aread())[:500]
        assert response.headers["content-type"].startswith("text/event-stream")
        yield EventReader(response)
