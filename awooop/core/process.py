"""Settings of a long-running runtime process (serve, worker, relay, projector, loops, up).

- The event loop is uvloop (:data:`EVENT_LOOP`, set as the command's ``loop_factory``): its
  I/O wake-ups are cheaper than asyncio's default loop, and every run crosses several
  processes (producer, Postgres, relay, Redis, worker), so each hop's wake-up shows in the
  ingest-to-start latency.
- :func:`settle_heap` after start-up: everything built so far lives as long as the process, so
  it is kept out of the cyclic collector's scans, and the young generation is collected less
  often (the default threshold of 700 ran a collection every few requests or runs, about 7 %
  of the HTTP server's CPU, and each is a pause on the event loop).
"""

from __future__ import annotations

import gc

import uvloop

EVENT_LOOP = uvloop.new_event_loop
GC_GEN0_THRESHOLD = 20_000


def settle_heap() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)
