"""Dedupe expiry (R-04): a platform loop that keeps the dedupe table's windows ahead of the
clock and drops a window's partition once every row in it has expired
(:mod:`awooop.eventlog.dedupe_windows`, migrations/0112_partitioned_dedupe.sql).

Each iteration, in one short platform transaction, creates the missing windows up to two weeks
ahead (``awooop_ensure_dedupe_partitions``) and reads the windows and the longest TTL; then,
as the tables' owner, it detaches (``CONCURRENTLY``: ingest goes on) and drops the dead
windows. The cost is a few catalogue reads plus one scan per window that may be dead, however
many rows the table holds: no row is deleted one by one.

The same loop keeps the model-call flow tables bounded: each iteration then deletes, in
batches, the reservations of calls finished and the waits ended longer than
``AWOOOP_LLM_FLOW_RETENTION_S`` ago (:mod:`awooop.llm.flow_retention`), the runs' streamed
output written longer than ``AWOOOP_OUTPUT_RETENTION_S`` ago
(:func:`awooop.runs.output_log.expire_once`), and the signals of runs that
finished longer than ``AWOOOP_SIGNAL_RETENTION_S`` ago (:mod:`awooop.runs.signal_retention`).

Correctness never depends on this loop: the ingest statement already treats a row past
``expires_at`` as absent. The loop only keeps the table bounded, and ingest needs the windows
it creates (a row with no window is refused: ``awooop_dedupe_windows_ahead_seconds`` and the
doctor show how far ahead they reach).
"""

from __future__ import annotations

from awooop.core import metrics
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.eventlog import dedupe_windows as windows
from awooop.llm import flow_retention
from awooop.runs import output_log, signal_retention
from awooop.services import Services

LOOP_NAME = "dedupe_expiry"

log = get_logger(__name__)


def loops(services: Services) -> list[LoopSpec]:
    settings = services.settings

    async def body(ctx: LoopContext) -> None:
        async with services.db.platform_writes() as conn:
            now = await conn.fetchval(windows.NOW)
            created = await windows.ensure(conn, now)
            parts = await windows.windows(conn)
            longest = await windows.longest_ttl(conn, settings.dedupe_ttl_s)
        if created:
            log.info("dedupe_windows_created", created=created)
        until = windows.covered_until(parts)
        if until is not None:
            metrics.owned(metrics.DEDUPE_WINDOWS_AHEAD).set((until - now).total_seconds())
        if windows.candidates(parts, now, longest):
            dropped = await windows.drop_dead(settings.database_url, now, longest, parts)
            if dropped:
                metrics.DEDUPE_EXPIRED.inc(dropped)
        await flow_retention.expire_once(services.db, settings.llm_flow_retention_s)
        await output_log.expire_once(services.db, settings.output_retention_s)
        await signal_retention.expire_once(services.db, settings.signal_retention_s)

    return [
        LoopSpec(
            name=LOOP_NAME,
            category=LoopCategory.PLATFORM,
            interval_s=settings.dedupe_expiry_interval_s,
            body=body,
            description="create the dedupe table's windows ahead; drop expired ones (R-04); "
            "delete finished model-call reservations and waits, run output, and finished "
            "runs' signals, past their retention",
        )
    ]
