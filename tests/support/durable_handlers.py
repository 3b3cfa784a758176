"""Run handlers for tests of the durable primitives: :func:`sleeper` (a durable sleep or a wait
for a signal between two steps) and :func:`family` (child runs); side effects are counted
as :mod:`tests.support.handlers` counts them."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import msgspec

from awooop.core.errors import ChildLimitError, ChildrenWaitTimeoutError, EventWaitTimeoutError
from awooop.worker.context import RunContext
from tests.support.handlers import effect


async def sleeper(run: RunContext) -> dict[str, Any]:
    """A step, a durable sleep of ``input["sleep_s"]`` seconds, a step; with ``event``: then a
    wait for that event (``timeout_s``), returning its payload or ``"timeout"``."""
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    before = await run.step("before", lambda: _effect_async(run, "before"))
    if options.get("sleep_s"):
        await run.sleep(timedelta(seconds=float(options["sleep_s"])))
    got: Any = None
    if options.get("event"):
        timeout = options.get("timeout_s")
        try:
            got = await run.wait_for_event(
                str(options["event"]),
                timeout=None if timeout is None else timedelta(seconds=float(timeout)),
                match=options.get("match"),
            )
        except EventWaitTimeoutError:
            got = "timeout"
    after = await run.step("after", lambda: _effect_async(run, "after"))
    return {"before": before, "after": after, "got": got}


async def _effect_async(run: RunContext, what: str) -> str:
    effect(run, what)
    return what


async def family(run: RunContext) -> dict[str, Any]:
    """Child runs. A parent (input ``children``: how many) starts that many children of contract
    ``contract`` ("child") with keys ``c0``, ``c1``... and input ``{"i": i}`` merged with
    ``child`` and ``per_child[str(i)]``, pausing ``start_pause_s`` between two starts, then
    waits for them (``count``, ``timeout_s``, ``cancel_with_parent``) and records the step
    ``after`` (effect ``parent:after``: once per resumed parent), with ``wait_again`` waits for
    them a second time; it returns the children's outcomes (and ``again``), ``{"timeout":
    code}`` after a timeout, or ``{"refused": code}`` when a start is refused. A child (no
    ``children``) raises with ``fail``, waits for event ``wait_event``, sleeps ``sleep_s``
    (asyncio: holding its slot) and returns ``{"i": i, "twice": 2 * i}`` (with ``"pad"``, that
    many characters, given ``pad``)."""
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    if "children" not in options:
        if options.get("fail"):
            raise ValueError("asked to fail")
        if options.get("wait_event"):
            await run.wait_for_event(str(options["wait_event"]))
        if options.get("sleep_s"):
            await asyncio.sleep(float(options["sleep_s"]))
        await run.step("child", lambda: _effect_async(run, "child"))
        i = int(options.get("i", 0))
        pad = {"pad": "x" * int(options["pad"])} if options.get("pad") else {}
        return {"i": i, "twice": 2 * i, **pad}
    per_child: dict[str, Any] = options.get("per_child") or {}
    handles = []
    for i in range(int(options["children"])):
        child = {"i": i, **(options.get("child") or {}), **(per_child.get(str(i)) or {})}
        try:
            handles.append(
                await run.start_child(
                    str(options.get("contract", "child")),
                    child,
                    key=f"c{i}",
                    cancel_with_parent=bool(options.get("cancel_with_parent", True)),
                )
            )
        except ChildLimitError as exc:
            return {"refused": exc.code, "started": len(handles)}
        if options.get("start_pause_s"):
            await asyncio.sleep(float(options["start_pause_s"]))
    timeout = options.get("timeout_s")
    try:
        results = await run.wait_for_children(
            handles,
            count=options.get("count"),
            timeout=None if timeout is None else timedelta(seconds=float(timeout)),
        )
    except ChildrenWaitTimeoutError as exc:
        return {"timeout": exc.code}
    await run.step("after", lambda: _effect_async(run, "parent:after"))
    done: dict[str, Any] = {"results": msgspec.to_builtins(results)}
    if options.get("wait_again"):  # the same children, finished by now
        done["again"] = msgspec.to_builtins(await run.wait_for_children(handles))
    return done
