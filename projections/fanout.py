"""The replay's bulk pass over several processes: the stream range split into parts, each
folded by a spawned worker (:func:`awooop.projections.bulk.run_worker`) in the snapshot the caller
exported, progress and results coming back over one queue."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awooop.core import errors
from awooop.core.db import Connection
from awooop.projections.base import Projection, TableNames
from awooop.projections.bulk import RangeTask, run_worker, split_range


@dataclass(frozen=True)
class WorkerJob:
    """What every worker needs: where to read and what to fold into which shadows."""

    url: str
    projection: Projection
    project: str | None
    low: str
    high: str
    shadows: TableNames
    workers: int
    batch_rows: int
    fetch_rows: int
    archive_table: str | None = None  # the restored archive, read before the live log
    histogram: tuple[str, ...] = ()  # the stream ids' histogram bounds: even parts


async def fold_in_workers(
    job: WorkerJob, exported: str, writer: Connection, advanced: Callable[[int], None]
) -> dict[str, int]:
    """Fold the stream range split over worker processes, all in the exported snapshot
    (the caller's transaction keeps it alive until they are done); ``writer`` copies the
    merged end-of-pass rows (the projection's ``merge_finish``) into the shadows."""
    context = multiprocessing.get_context("spawn")
    messages: Any = context.Queue()
    ranges = split_range(job.low, job.high, job.workers, job.histogram)
    shadows = {t.name: job.shadows[t.name] for t in job.projection.tables}
    processes = [
        context.Process(
            target=run_worker,
            args=(
                RangeTask(
                    url=job.url,
                    projection_name=job.projection.name,
                    project=job.project,
                    low=low,
                    high=high,
                    snapshot_id=exported,
                    shadows=shadows,
                    batch_rows=job.batch_rows,
                    fetch_rows=job.fetch_rows,
                    archive_table=job.archive_table,
                ),
                messages,
                index,
            ),
            daemon=True,
        )
        for index, (low, high) in enumerate(ranges)
    ]
    rows: dict[str, int] = {}
    finishes: list[dict[str, list[tuple[Any, ...]]]] = []
    loop = asyncio.get_running_loop()
    try:
        for process in processes:
            process.start()
        done: set[int] = set()
        while len(done) < len(processes):
            try:
                message = await loop.run_in_executor(None, messages.get, True, 0.2)
            except queue.Empty:
                for index, process in enumerate(processes):
                    if index not in done and process.exitcode not in (None, 0):
                        raise RuntimeError(
                            f"bulk worker {index} died ({process.exitcode})"
                        ) from None
                continue
            if message[0] == "progress":
                advanced(message[1])
            elif message[0] == "done":
                _, index, _events, worker_rows, finish = message
                done.add(index)
                for table, n in worker_rows.items():
                    rows[table] = rows.get(table, 0) + n
                finishes.append(finish)
            else:
                _, index, name, text = message
                error = getattr(errors, name, None)
                if isinstance(error, type) and issubclass(error, errors.AwoooPError):
                    raise error(text)
                raise RuntimeError(f"bulk worker {index}: {name}: {text}")
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join()
    merged = job.projection.merge_finish(finishes)
    for table, table_rows in merged.items():
        if table_rows:
            await writer.copy_records_to_table(
                job.shadows[table],
                records=table_rows,
                columns=next(t.columns for t in job.projection.tables if t.name == table),
            )
            rows[table] = rows.get(table, 0) + len(table_rows)
    return rows
