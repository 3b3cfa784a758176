"""The log's partitions (awooop.eventlog.partitions): a platform loop that keeps them ahead of the
clock and, when ``AWOOOP_LOG_ARCHIVE_DIR`` is set, archives and drops the oldest one once it
ended more than ``AWOOOP_LOG_RETENTION_DAYS`` ago (awooop.eventlog.archive).

A refused archive (a live run, the relay or a projector behind) is logged and counted and tried
again at the next iteration; it never fails the loop. Without an archive directory nothing is
dropped and the log keeps every partition.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from awooop.core import metrics
from awooop.core.errors import ArchiveRefusedError
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.eventlog import partitions
from awooop.eventlog.archive import archive_due
from awooop.projections.lag import projector_lag
from awooop.services import Services

LOOP_NAME = "log_partitions"

log = get_logger(__name__)


def loops(services: Services) -> list[LoopSpec]:
    settings = services.settings

    async def body(ctx: LoopContext) -> None:
        async with services.db.platform_writes() as conn:
            now = await conn.fetchval(partitions.NOW)
            created = await partitions.ensure(conn, now, settings.log_partition_days)
            parts = await partitions.partitions(conn)
        if created:
            log.info("log_partitions_created", created=created)
        until = partitions.covered_until(parts)
        if until is not None:
            metrics.owned(metrics.LOG_PARTITION_AHEAD).set((until - now).total_seconds())
        if not settings.log_archive_dir:
            return
        try:
            result = await archive_due(
                settings.database_url,
                Path(settings.log_archive_dir),
                retention=timedelta(days=settings.log_retention_days),
                projector_lag=projector_lag,
            )
        except ArchiveRefusedError as exc:
            metrics.LOG_ARCHIVE_REFUSED.inc()
            log.warning("log_archive_refused", reason=exc.message)
            return
        if result is not None:
            metrics.LOG_PARTITIONS_ARCHIVED.inc()
            ctx.wakeup.set()  # the next partition may be due too

    return [
        LoopSpec(
            name=LOOP_NAME,
            category=LoopCategory.PLATFORM,
            interval_s=settings.log_partitions_interval_s,
            body=body,
            description="create the event log's partitions ahead; archive and drop old ones",
        )
    ]
