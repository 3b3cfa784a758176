"""Settings of a long-running runtime process (serve, worker, relay, projector, loops, up).

- The event loop is uvloop (:data:`EVENT_LOOP`, set as the command's ``loop_factory``): its
  I/O wake-ups are cheaper than asyncio's default loop, and every run crosses several
  processes (producer, Postgres, relay, Redis, worker), so each hop's wake-up shows in the
  ingest-to-start latency.
- :func:`settle_heap` after start-up: everything built so far lives as long as the process, so
  it is kept out of the cyclic collector's scans, and the young generation is collected less
  often (the default threshold of 700 ran a collection every few requests or runs, about 7 %
  of the HTTP server's CPU, and each is a pause on the event loop).
- :func:`cli_command` starts a child ``awooop`` process (``serve --workers``, the demo's
  components) on the code this process runs: ``python -m`` puts the working folder first on the
  import path, so an installed runtime started in a project folder with a ``streams`` or
  ``projections`` package of its own would import that one; ``-P`` leaves the folder out, unless
  this process imported awooop from that very folder (a source tree run without an install).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import uvloop

EVENT_LOOP = uvloop.new_event_loop
GC_GEN0_THRESHOLD = 20_000


def settle_heap() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)


def cli_command(python: str = sys.executable) -> list[str]:
    """The command line of a child ``awooop`` process, before its arguments; it runs in this
    process's working folder."""
    source = Path(__file__).resolve().parents[2]  # the folder awooop/ is imported from
    here = source == Path.cwd().resolve()
    return [python, *([] if here else ["-P"]), "-m", "awooop.cli"]
