"""A service's projection (:mod:`awooop.projections.custom`) as the runtime runs and replays it:
the same :class:`awooop.projections.base.Projection` the built-in ones are, so that one
projector runner (:mod:`awooop.projections.runner`), one consumer-group loop and one replay tool
serve both.

What the adapter adds to the service's ``apply``:

- the checkpoint: a row per followed stream in ``awooop_projection_checkpoints`` (the version
  of the stream's last event applied), written in the transaction of the view rows;
- a lock on the view before the checkpoint is read (ROW EXCLUSIVE: the projector waits while the
  replay's swap holds the table, then reads the checkpoint the swap wrote);
- events of undeclared types passed over (the checkpoint moves past them);
- for the replay: the bulk pass applies the events with ``apply`` into the shadow (one stream
  after another, a batch per transaction), the tail likewise, and the swap (or a project's
  repair) rewrites the projection's checkpoints to what the rebuilt view holds, in the same
  locked transaction (:meth:`Registered.checkpoints_rebuilt`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import ProjectionRegistrationError, ProjectionTenancyError
from awooop.projections.base import (
    BulkOutput,
    DomainData,
    LogEvent,
    TableNames,
    TableSpec,
    concat_parts,
    lagging_sql,
)
from awooop.projections.custom import Projection as ServiceProjection
from awooop.projections.custom import Record
from awooop.projections.schema import q
from awooop.projections.sources import check

# --- SQL ------------------------------------------------------------------------------------

LOAD_CHECKPOINTS = """
SELECT stream_id, version FROM awooop_projection_checkpoints
WHERE projection = $1 AND stream_id = ANY($2::text[])
"""
SAVE_CHECKPOINTS = """
INSERT INTO awooop_projection_checkpoints AS c (projection, stream_id, project_id, version)
SELECT $1, s, p, v FROM unnest($2::text[], $3::text[], $4::bigint[]) AS x(s, p, v)
ON CONFLICT (projection, stream_id) DO UPDATE SET version = EXCLUDED.version, updated_at = now()
WHERE c.version < EXCLUDED.version
"""
DELETE_CHECKPOINTS = """
DELETE FROM awooop_projection_checkpoints
WHERE projection = $1 AND ($2::text IS NULL OR project_id = $2)
"""
# What a service's table must be (docs/consumers.md): a table with a project_id column and the
# tenant isolation of every table that has one (awooop_enforce_tenant_isolation: row-level
# security forced, the policy on the tenant setting, 0040, and the restrictive one on the
# producer login's projects, 0090).
TABLE_CHECK = """
SELECT c.relkind::text AS relkind, c.relrowsecurity, c.relforcerowsecurity,
       (SELECT count(*) = 2 FROM pg_policy p WHERE p.polrelid = c.oid
        AND p.polname IN ('tenant_isolation', 'tenant_binding')) AS isolated,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum) AS columns
FROM pg_class c WHERE c.oid = to_regclass($1)
"""


class Registered:
    """The adapter; :func:`registered` makes one per service projection."""

    name: ClassVar[str]
    description: ClassVar[str]
    inline = False
    skips_undeclared = True

    def __init__(self, service: ServiceProjection, source: str) -> None:
        self.service = service
        self.source = source
        self.event_types = frozenset(service.event_types)
        self.stream_prefix = service.streams
        self.table = service.table
        self.tables: tuple[TableSpec, ...] = (
            (TableSpec(name=service.table, key=service.key, columns=service.key),)
            if service.table
            else ()
        )
        # The replay's view of the rebuilt streams: stream -> (project, last version applied).
        self._rebuilt: dict[str, tuple[str, int]] = {}

    def _live(self, names: TableNames) -> bool:
        return self.table is None or names[self.table] == self.table

    # --- the checks at start ------------------------------------------------------------------

    async def check_tables(self, conn: Connection) -> None:
        """Refuse a table that is missing (E-PROJECTION-003) or not isolated per tenant
        (E-PROJECTION-004); learn its columns (the replay compares them)."""
        if self.table is None:
            return
        row = await conn.fetchrow(TABLE_CHECK, self.table)
        where = f"projection {self.name} ({self.source}): table {self.table}"
        if row is None or row["relkind"] not in ("r", "p"):
            raise ProjectionRegistrationError(
                f"{where} does not exist: the service's migration creates it"
            )
        columns = tuple(row["columns"])
        if "project_id" not in columns:
            raise ProjectionTenancyError(f"{where} has no project_id column")
        if not (row["relrowsecurity"] and row["relforcerowsecurity"] and row["isolated"]):
            raise ProjectionTenancyError(
                f"{where} has no tenant isolation: run SELECT "
                f"awooop_enforce_tenant_isolation('{self.table}') in the migration that creates it"
            )
        missing = [c for c in self.service.key if c not in columns]
        if missing:
            raise ProjectionRegistrationError(f"{where} has no column {', '.join(missing)}")
        self.tables = (TableSpec(name=self.table, key=self.service.key, columns=columns),)

    # --- the runner's side --------------------------------------------------------------------

    async def load_versions(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, int]:
        if not self._live(names):
            return {}  # the replay's tail: every event it hands over is new to the shadow
        if self.table is not None:
            await conn.execute(f"LOCK TABLE {q(self.table)} IN ROW EXCLUSIVE MODE")
        rows = await conn.fetch(LOAD_CHECKPOINTS, self.name, list(stream_ids))
        return {r["stream_id"]: r["version"] for r in rows}

    async def apply(
        self, conn: Connection, names: TableNames, events: Mapping[str, Sequence[LogEvent]]
    ) -> None:
        if not any(events.values()):
            return
        await self._apply(conn, names, [e for stream in events.values() for e in stream])
        last = {s: stream[-1] for s, stream in events.items() if stream}
        if not self._live(names):
            self._remember(last.values())
            return
        await conn.execute(
            SAVE_CHECKPOINTS,
            self.name,
            list(last),
            [e.project_id for e in last.values()],
            [e.version for e in last.values()],
        )

    async def _apply(self, conn: Connection, names: TableNames, events: Sequence[LogEvent]) -> None:
        records = [record(e) for e in events if e.event_type in self.event_types]
        if records:
            table = names[self.table] if self.table is not None else ""
            await self.service.apply(conn, table, records)

    def lagging_sql(self, names: TableNames) -> str:
        # The name is a registered projection's (sources.NAME: lower-case letters, digits, _).
        return lagging_sql(
            "LEFT JOIN awooop_projection_checkpoints v "
            f"ON v.projection = '{self.name}' AND v.stream_id = s.stream_id"
        )

    # --- the replay's side --------------------------------------------------------------------

    def bulk_stream(self, events: Sequence[LogEvent], out: BulkOutput) -> None:
        """Keep the stream's events for :meth:`bulk_write` (``apply`` needs the database)."""
        if not events:
            return
        if self.table is None:
            raise ProjectionRegistrationError(f"projection {self.name} has no table to rebuild")
        self._remember([events[-1]])
        for event in events:
            out.add(self.table, (event,))

    async def bulk_write(
        self, conn: Connection, names: TableNames, rows: Sequence[tuple[Any, ...]]
    ) -> int:
        """Apply a batch of the bulk pass (whole streams, in order) to the shadow."""
        async with conn.transaction():
            await self._apply(conn, names, [r[0] for r in rows])
        return len(rows)

    def bulk_finish(self, out: BulkOutput) -> None:
        return None

    def merge_finish(
        self, parts: Sequence[dict[str, list[tuple[Any, ...]]]]
    ) -> dict[str, list[tuple[Any, ...]]]:
        return concat_parts(parts)

    def _remember(self, last: Any) -> None:
        for e in last:
            known = self._rebuilt.get(e.stream_id)
            if known is None or known[1] < e.version:
                self._rebuilt[e.stream_id] = (e.project_id, e.version)

    async def checkpoints_rebuilt(self, conn: Connection, project: str | None) -> None:
        """In the swap's (or repair's) locked transaction, after every committed event was
        applied to the shadow: the checkpoints become what the rebuilt view holds."""
        await conn.execute(DELETE_CHECKPOINTS, self.name, project)
        rows = [(s, p, v) for s, (p, v) in self._rebuilt.items() if project in (None, p)]
        await conn.execute(
            SAVE_CHECKPOINTS,
            self.name,
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
        )


_to_builtins: Any = msgspec.to_builtins


def record(event: LogEvent) -> Record:
    body = event.event
    if isinstance(body, DomainData):
        data, runtime = body.data, None
    else:
        data, runtime = _to_builtins(body), body
    return Record(
        stream_id=event.stream_id,
        version=event.version,
        project_id=event.project_id,
        position=event.position,
        event_type=event.event_type,
        data=data,
        event=runtime,
        traceparent=event.traceparent,
    )


def registered(service: ServiceProjection, source: str) -> Registered:
    """The adapter of ``service`` (a class of its own, whose class variables name it), once
    its declaration passed the checks (E-PROJECTION-003): its name goes into SQL as a
    literal, its table as an identifier."""
    check(service, source)
    kind = type(
        f"Registered_{service.name}",
        (Registered,),
        {"name": service.name, "description": service.description or f"{service.name} ({source})"},
    )
    adapter: Registered = kind(service, source)
    return adapter
