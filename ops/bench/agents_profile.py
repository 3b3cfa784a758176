"""Where an agents benchmark worker's CPU goes, from py-spy's raw output (``agents.py
--profile``): the samples by place, scaled to the CPU the worker measured. Pure; unit-tested in
tests/unit/test_bench_agents.py."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
RUNTIME_PACKAGES = ("awooop/", "streams/", "projections/")
# The process's entry point: every sample of the main thread is below it (the event loop).
ENTRY = ("awooop/cli.py",)


def parse_raw(text: str) -> Counter[tuple[str, ...]]:
    """py-spy's ``--format raw`` (collapsed stacks: ``frame;frame;... COUNT``, outermost
    first, a frame ``function (file:line)``) as samples per stack of ``function (file)``
    frames (line numbers dropped, so one function is one frame)."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for frame in stack.split(";"):
            match = _FRAME.match(frame)
            frames.append(f"{match['function']} ({match['file']})" if match else frame)
        stacks[tuple(frames)] += int(count)
    return stacks


def file_of(frame: str) -> str:
    match = _FRAME.match(frame)
    return match["file"] if match else ""


def area_of(path: str) -> str:
    """A file's place: the runtime's module (``awooop/worker/context.py``), else the top
    package or stdlib module of a library (``asyncpg``, ``asyncio``, ``opentelemetry``)."""
    for package in RUNTIME_PACKAGES:
        at = path.find(package)
        if at == 0 or (at > 0 and path[at - 1] == "/"):
            return path[at:]
    name = path.rsplit("site-packages/", 1)[-1]
    top = name.split("/", 1)[0]
    return top.removesuffix(".py") or "?"


def profile_split(
    stacks: Mapping[tuple[str, ...], int], cpu_ms_per_step: float, top: int = 15
) -> dict[str, Any]:
    """The samples of ``stacks`` as the worker's CPU ms per step (their share of
    ``cpu_ms_per_step``, the CPU measured from /proc):

    - ``by_runtime_module`` and ``by_runtime_function``: the innermost frame of the runtime's
      own code (awooop, streams, projections; not the entry point ``awooop/cli.py``) in each
      sample, with what it called below (``outside the runtime``: the event loop's own work,
      libraries' callbacks and threads);
    - ``by_leaf``: the place of the frame that was running (asyncpg, asyncio, a module of the
      runtime, ...);
    - ``top_self``: the functions that were running; ``top_inclusive``: the runtime's
      functions with everything below them."""
    total = sum(stacks.values())
    if not total:
        return {"samples": 0}
    scale = cpu_ms_per_step / total
    module: Counter[str] = Counter()
    function: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        places = [area_of(file_of(f)) for f in stack]
        mine = [
            i for i, p in enumerate(places) if p.startswith(RUNTIME_PACKAGES) and p not in ENTRY
        ]
        module[places[mine[-1]] if mine else "outside the runtime"] += count
        function[stack[mine[-1]] if mine else "outside the runtime"] += count
        leaf[places[-1] if places else "?"] += count
        own[stack[-1] if stack else "?"] += count
        for frame in set(stack[i] for i in mine):
            inclusive[frame] += count

    def table(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [
            {"where": k, "ms_per_step": round(v * scale, 4), "share": round(v / total, 3)}
            for k, v in counter.most_common(n)
        ]

    return {
        "samples": total,
        "by_runtime_module": table(module, top),
        "by_runtime_function": table(function, top),
        "by_leaf": table(leaf, top),
        "top_self": table(own, top),
        "top_inclusive": table(inclusive, top),
    }
