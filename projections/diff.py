"""Compare a live table with its rebuilt shadow, and repair one project's rows in place.

Rows are matched on the table's key. ``missing``: the log says the row exists, the live table
lacks it; ``extra``: the live table has a row the log does not explain; ``different``: both
have it and a column differs. Every column is compared exactly (``IS DISTINCT FROM``; jsonb
by value) except a spec's clock columns while its clock condition holds on the rebuilt row
(run_state's lease clock of a leased run): there the live value must be at or after the
rebuilt one, because heartbeats renew it without events (R-12).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from awooop.core.db import Connection
from awooop.projections.base import TableSpec

EXAMPLES_PER_KIND = 5

# --- SQL builders (identifiers: the constant column names of a TableSpec and our table names) -


def _join(spec: TableSpec) -> str:
    return " AND ".join(f"l.{k} = s.{k}" for k in spec.key)


def column_differs(spec: TableSpec, column: str) -> str:
    """SQL (aliases l, s) that is true when ``column`` differs."""
    if column in spec.clock_columns:
        return (
            f"(CASE WHEN {spec.clock_condition} "
            f"THEN NOT coalesce(l.{column} >= s.{column}, l.{column} IS NULL "
            f"AND s.{column} IS NULL) ELSE l.{column} IS DISTINCT FROM s.{column} END)"
        )
    return f"(l.{column} IS DISTINCT FROM s.{column})"


def row_differs(spec: TableSpec) -> str:
    compared = [c for c in spec.columns if c not in spec.key]
    plain = [c for c in compared if c not in spec.clock_columns]
    parts = []
    if plain:
        left = ", ".join(f"l.{c}" for c in plain)
        right = ", ".join(f"s.{c}" for c in plain)
        parts.append(f"(ROW({left}) IS DISTINCT FROM ROW({right}))")
    parts.extend(column_differs(spec, c) for c in spec.clock_columns)
    return " OR ".join(parts) if parts else "false"


def _scoped(table: str, spec: TableSpec) -> str:
    return f"(SELECT * FROM {table} WHERE $1::text IS NULL OR {spec.project_column} = $1)"  # noqa: S608 - constant identifiers


def diff_sql(spec: TableSpec, live: str, shadow: str) -> str:
    """Rows (kind, key, columns) of every difference; $1: the project or NULL."""
    key0 = spec.key[0]
    key_text = " || '/' || ".join(f"coalesce(l.{k}, s.{k})::text" for k in spec.key)
    compared = [c for c in spec.columns if c not in spec.key]
    columns = ", ".join(f"CASE WHEN {column_differs(spec, c)} THEN '{c}' END" for c in compared)
    return (
        f"SELECT CASE WHEN l.{key0} IS NULL THEN 'missing' WHEN s.{key0} IS NULL THEN 'extra' "  # noqa: S608 - constant identifiers
        f"ELSE 'different' END AS kind, {key_text} AS key, "
        f"array_remove(ARRAY[{columns}]::text[], NULL) AS columns "
        f"FROM {_scoped(live, spec)} l FULL JOIN {_scoped(shadow, spec)} s ON {_join(spec)} "
        f"WHERE l.{key0} IS NULL OR s.{key0} IS NULL OR {row_differs(spec)}"
    )


def summary_sql(spec: TableSpec, live: str, shadow: str) -> str:
    inner = diff_sql(spec, live, shadow)
    return (
        "SELECT kind, count(*) AS n, "  # noqa: S608 - built from constants
        f"(array_agg(key || CASE WHEN cardinality(columns) > 0 AND kind = 'different' "
        f"THEN ' (' || array_to_string(columns, ', ') || ')' ELSE '' END "
        f"ORDER BY key))[1:{EXAMPLES_PER_KIND}] AS examples "
        f"FROM ({inner}) d GROUP BY kind ORDER BY kind"
    )


def repair_sql(spec: TableSpec, live: str, shadow: str) -> list[str]:
    """Statements that make ``live`` equal ``shadow`` for one project ($1), touching only the
    rows that differ. The live lease clock is kept where it is legitimately ahead."""
    settable = [c for c in spec.columns if c not in spec.key]
    sets = []
    for c in settable:
        if c in spec.clock_columns:
            sets.append(
                f"{c} = CASE WHEN {spec.clock_condition} AND l.{c} >= s.{c} "
                f"THEN l.{c} ELSE s.{c} END"
            )
        else:
            sets.append(f"{c} = s.{c}")
    cols = ", ".join(spec.columns)
    return [
        f"UPDATE {live} l SET {', '.join(sets)} FROM {shadow} s "  # noqa: S608 - constant identifiers
        f"WHERE {_join(spec)} AND l.{spec.project_column} = $1 AND ({row_differs(spec)})",
        f"INSERT INTO {live} ({cols}) SELECT {cols} FROM {shadow} s "  # noqa: S608 - constant identifiers
        f"WHERE s.{spec.project_column} = $1 AND NOT EXISTS "
        f"(SELECT 1 FROM {live} l WHERE {_join(spec)})",
        f"DELETE FROM {live} l WHERE l.{spec.project_column} = $1 AND NOT EXISTS "  # noqa: S608 - constant identifiers
        f"(SELECT 1 FROM {shadow} s WHERE {_join(spec)})",
    ]


def carry_clock_sql(spec: TableSpec, live: str, shadow: str) -> str | None:
    """Copy the live clock columns into the shadow where they are legitimately ahead
    (the run is still in the same leased attempt), with the spec's carried columns: run
    inside the swap lock."""
    if not spec.clock_columns:
        return None
    sets = ", ".join(
        [f"{c} = greatest(s.{c}, l.{c})" for c in spec.clock_columns]
        + [f"{c} = l.{c}" for c in spec.carried_columns]
    )
    same = " AND ".join(
        f"l.{c} IS NOT DISTINCT FROM s.{c}"
        for c in ("status", "version", "worker_id", "attempt_count")
        if c in spec.columns
    )
    return (
        f"UPDATE {shadow} s SET {sets} FROM {live} l "  # noqa: S608 - constant identifiers
        f"WHERE {_join(spec)} AND {spec.clock_condition} AND {same or 'true'}"
    )


# --- results ---------------------------------------------------------------------------------


@dataclass
class TableDiff:
    table: str
    missing: int = 0
    extra: int = 0
    different: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.missing + self.extra + self.different

    def lines(self, label: str) -> list[str]:
        head = (
            f"{self.table}: {self.missing} missing, {self.extra} extra, {self.different} different"
        )
        lines = [head]
        for kind in ("missing", "extra", "different"):
            for example in self.examples.get(kind, []):
                lines.append(f"  {kind} {label}={example}")
        return lines


async def diff_table(
    conn: Connection, spec: TableSpec, live: str, shadow: str, project: str | None
) -> TableDiff:
    result = TableDiff(table=spec.name)
    for r in await conn.fetch(summary_sql(spec, live, shadow), project):
        setattr(result, r["kind"], r["n"])
        result.examples[r["kind"]] = list(r["examples"])
    return result


async def repair_project(
    conn: Connection, spec: TableSpec, live: str, shadow: str, project: str
) -> int:
    changed = 0
    for statement in repair_sql(spec, live, shadow):
        status = await conn.execute(statement, project)
        changed += int(status.split()[-1])
    return changed
