"""Handlers of the worker benchmark (loaded by ``awooop worker --handler worker_handlers:...``
with ``ops/bench`` on ``PYTHONPATH``)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from functools import partial

from agents_stats import step_prompt

from awooop.worker.context import RunContext


async def noop(run: RunContext) -> None:
    """Nothing: the runtime's own cost per run."""


async def stamp(run: RunContext) -> float:
    """The wall-clock time the handler started (ingest-to-start latency)."""
    return time.time()


async def hang_first_attempt(run: RunContext) -> str:
    """Attempt 1 hangs (to be killed); later attempts finish at once (recovery time)."""
    if run.attempt == 1:
        await asyncio.sleep(3600)
    return "recovered"


async def model_calls(run: RunContext) -> int:
    """``calls`` model calls (the input's, default 10) one after another: the rate-limit
    benchmark's demand."""
    calls = int(run.input.get("calls", 10)) if isinstance(run.input, dict) else 10
    for _ in range(calls):
        await run.llm("a b c", max_tokens=5)
    return calls


async def agent_steps(run: RunContext) -> dict[str, float]:
    """An agent's run: ``steps`` (the input's, default 1) journaled steps, each one model call
    (the agents benchmark: the worker's ``AWOOOP_LLM_URL`` is ``local:?delay_ms=D``). Its
    result: the steps and the wall-clock time the handler started."""
    started = time.time()
    steps = int(run.input.get("steps", 1)) if isinstance(run.input, dict) else 1
    for i in range(steps):
        await run.step(f"s{i}", partial(_think, run, i))
    return {"steps": steps, "started": started}


async def _think(run: RunContext, i: int) -> str:
    return (await run.llm(step_prompt(run.run_id, i), max_tokens=5)).text


async def agent_llm_steps(run: RunContext) -> dict[str, float]:
    """:func:`agent_steps` with each step written as ``run.llm_step`` (the call and its step in
    one write): the agents benchmark's default (``--api llm_step``)."""
    started = time.time()
    steps = int(run.input.get("steps", 1)) if isinstance(run.input, dict) else 1
    for i in range(steps):
        await run.llm_step(f"s{i}", step_prompt(run.run_id, i), max_tokens=5)
    return {"steps": steps, "started": started}


async def sleep_once(run: RunContext) -> None:
    """One durable sleep of the input's ``sleep_s`` seconds (none when 0 or absent): the sleeps
    benchmark's runs, with and without the sleep."""
    seconds = float(run.input.get("sleep_s", 0)) if isinstance(run.input, dict) else 0.0
    if seconds > 0:
        await run.sleep(timedelta(seconds=seconds))


async def agent_sleeps(run: RunContext) -> dict[str, float]:
    """An agent that sleeps (the agents benchmark's ``--agent sleep``): one step, a durable
    ``run.sleep`` of the input's ``sleep_s`` seconds (default 2), then the other ``steps``
    (the input's, default 1). Each step as the input's ``api`` says (:func:`_agent_step`)."""
    started = time.time()
    options = run.input if isinstance(run.input, dict) else {}
    steps = int(options.get("steps", 1))
    await _agent_step(run, 0, options)
    await run.sleep(timedelta(seconds=float(options.get("sleep_s", 2.0))))
    for i in range(1, steps):
        await _agent_step(run, i, options)
    return {"steps": steps, "started": started}


async def agent_approvals(run: RunContext) -> dict[str, float]:
    """An agent that asks a person (the agents benchmark's ``--agent approval``, whose reviewer
    approves): one step, ``run.wait_for_approval``, then the other ``steps`` (the input's,
    default 1). Each step as the input's ``api`` says (:func:`_agent_step`)."""
    started = time.time()
    options = run.input if isinstance(run.input, dict) else {}
    steps = int(options.get("steps", 1))
    await _agent_step(run, 0, options)
    # Approved, else the run fails (a rejection's default) and never gets here.
    await run.wait_for_approval("go-on", reason="the agent's first answer, to go on")
    for i in range(1, steps):
        await _agent_step(run, i, options)
    return {"steps": steps, "started": started}


async def _agent_step(run: RunContext, i: int, options: dict[str, object]) -> None:
    """Step ``s<i>``: ``run.llm_step`` (``api`` ``llm_step``, the default) or a ``run.step``
    making one ``run.llm`` call (``api`` ``step``), as :func:`agent_llm_steps` and
    :func:`agent_steps` write theirs."""
    if options.get("api") == "step":
        await run.step(f"s{i}", partial(_think, run, i))
    else:
        await run.llm_step(f"s{i}", step_prompt(run.run_id, i), max_tokens=5)
