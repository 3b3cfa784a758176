"""Shadow tables for the replay tool: create one like a live table, and swap it in.

A shadow is created ``LIKE`` the live table (columns, defaults, CHECK constraints, storage,
comments, extended statistics) WITHOUT indexes, so the bulk COPY is fast; :func:`build_indexes`
then recreates every index of the live table under shadow names (primary key and unique
constraints included). Owner, grants (table and column), storage options, row-level security
and its policies are copied at creation, so the shadow never holds every project's rows open
to the roles it grants to; the replay writes it as ``awooop_platform`` and as the owner, which
must bypass RLS (a superuser or BYPASSRLS, as for migrations; :mod:`awooop.projections.replay`
checks).

:func:`swap` runs inside the caller's transaction, which holds ACCESS EXCLUSIVE locks on the
live tables. It renames live -> ``<name>__old`` and shadow -> live (indexes and their
constraints too, so every name other code uses stays the same), recreates the live table's
triggers, views that read it (CREATE OR REPLACE, rebinding them to the new table) and foreign
keys of other tables that reference it (NOT VALID; :func:`validate_foreign_keys` validates
them after commit without blocking writers), then drops the old table. A dependency it does
not know (materialized view, publication, rule, sequence owned by a column ...) makes DROP
refuse, the transaction rolls back and nothing has changed (E-REPLAY-002).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import SwapUnsupportedError

MAX_IDENTIFIER = 63

# --- SQL (catalog queries; identifiers below are quoted with quote_ident() by Postgres) -------

TABLE_INFO = """
SELECT c.oid, c.relkind::text AS relkind, c.relreplident::text AS relreplident,
       pg_get_userbyid(c.relowner) AS owner,
       c.reloptions, obj_description(c.oid, 'pg_class') AS comment,
       EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid)
           AS inherits,
       EXISTS (SELECT 1 FROM pg_publication_rel p WHERE p.prrelid = c.oid) AS published,
       c.relrowsecurity, c.relforcerowsecurity
FROM pg_class c WHERE c.oid = to_regclass($1)
"""

TABLE_GRANTS = """
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END
           AS grantee,
       a.privilege_type, a.is_grantable
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid = to_regclass($1) AND a.grantee <> c.relowner
"""

COLUMN_GRANTS = """
SELECT quote_ident(t.attname) AS column_name,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END
           AS grantee,
       a.privilege_type, a.is_grantable
FROM pg_attribute t, aclexplode(t.attacl) a
WHERE t.attrelid = to_regclass($1) AND t.attacl IS NOT NULL AND NOT t.attisdropped
"""

INDEXES = """
SELECT i.indexrelid::regclass::text AS qualified, ic.relname AS name, i.indisunique,
       pg_get_indexdef(i.indexrelid) AS def, con.contype::text AS contype,
       con.condeferrable, con.condeferred,
       pg_get_constraintdef(con.oid) AS condef
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
WHERE i.indrelid = to_regclass($1)
ORDER BY ic.relname
"""

OWN_FOREIGN_KEYS = """
SELECT quote_ident(conname) AS name, pg_get_constraintdef(oid) AS def,
       confrelid = conrelid AS self_reference
FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'f'
"""

REFERENCING_FOREIGN_KEYS = """
SELECT conrelid::regclass::text AS table_name, quote_ident(conname) AS name,
       pg_get_constraintdef(oid) AS def
FROM pg_constraint
WHERE confrelid = to_regclass($1) AND conrelid <> confrelid AND contype = 'f'
"""

# CREATE TABLE ... LIKE copies a CHECK constraint as validated: one the live table holds NOT
# VALID (a migration added it so, without a scan) is added to the shadow again as it is.
UNVALIDATED_CHECKS = """
SELECT quote_ident(conname) AS name, pg_get_constraintdef(oid) AS def
FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'c' AND NOT convalidated
"""

TRIGGERS = """
SELECT quote_ident(tgname) AS name, pg_get_triggerdef(oid) AS def, tgenabled::text AS tgenabled
FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal
"""

POLICIES = """
SELECT quote_ident(polname) AS name, polpermissive,
       CASE polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE'
                   WHEN 'd' THEN 'DELETE' ELSE 'ALL' END AS command,
       ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END
             FROM unnest(polroles) AS r) AS roles,
       pg_get_expr(polqual, polrelid) AS using_expr,
       pg_get_expr(polwithcheck, polrelid) AS check_expr
FROM pg_policy WHERE polrelid = to_regclass($1)
"""

DEPENDENT_VIEWS = """
SELECT DISTINCT v.oid::regclass::text AS name, v.relkind::text AS relkind,
       pg_get_viewdef(v.oid) AS def,
       v.reloptions
FROM pg_depend d
JOIN pg_rewrite r ON r.oid = d.objid
JOIN pg_class v ON v.oid = r.ev_class
WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = to_regclass($1)
  AND v.oid <> to_regclass($1)
"""

OWN_RULES = """
SELECT count(*) FROM pg_rewrite WHERE ev_class = to_regclass($1)
"""


def derived_name(name: str, suffix: str) -> str:
    """``name`` + ``suffix`` within Postgres' 63-byte identifier limit (hashed when long)."""
    if len(name) + len(suffix) <= MAX_IDENTIFIER:
        return name + suffix
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]  # noqa: S324 - a name, not security
    keep = MAX_IDENTIFIER - len(suffix) - len(digest) - 1
    return f"{name[:keep]}_{digest}{suffix}"


def shadow_name(name: str) -> str:
    return derived_name(name, "__shadow")


def old_name(name: str) -> str:
    return derived_name(name, "__old")


def q(identifier: str) -> str:
    """Quote an identifier (names here come from our specs or from the catalog)."""
    return '"' + identifier.replace('"', '""') + '"'


@dataclass
class IndexInfo:
    name: str
    shadow: str
    create_shadow: str  # CREATE INDEX on the shadow
    constraint_sql: str | None  # ALTER TABLE shadow ADD ... (primary key, unique, exclusion)


@dataclass
class SwapPlan:
    """What the swap must carry over, read from the catalog inside the lock."""

    live: str
    shadow: str
    indexes: list[IndexInfo] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    referencing: list[tuple[str, str, str]] = field(default_factory=list)  # table, name, def


async def drop_shadow(conn: Connection, live: str) -> None:
    await conn.execute(f"DROP TABLE IF EXISTS {q(shadow_name(live))}")


async def create_shadow(conn: Connection, live: str) -> str:
    """A fresh, empty shadow of ``live`` (a leftover one is dropped first)."""
    info = await conn.fetchrow(TABLE_INFO, live)
    if info is None:
        raise SwapUnsupportedError(f"table {live} does not exist; run awooop migrate")
    if info["relkind"] != "r" or info["inherits"]:
        raise SwapUnsupportedError(f"{live} is partitioned or inherited; replay cannot swap it")
    shadow = shadow_name(live)
    await conn.execute(f"DROP TABLE IF EXISTS {q(shadow)}")
    await conn.execute(
        f"CREATE TABLE {q(shadow)} (LIKE {q(live)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        "INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING COMMENTS "
        "INCLUDING STATISTICS)"
    )
    for check in await conn.fetch(UNVALIDATED_CHECKS, live):  # its def ends in NOT VALID
        await conn.execute(f"ALTER TABLE {q(shadow)} DROP CONSTRAINT {check['name']}")
        await conn.execute(f"ALTER TABLE {q(shadow)} ADD CONSTRAINT {check['name']} {check['def']}")
    if info["reloptions"]:
        await conn.execute(f"ALTER TABLE {q(shadow)} SET ({', '.join(info['reloptions'])})")
    if info["comment"] is not None:
        await conn.execute(f"COMMENT ON TABLE {q(shadow)} IS {_literal(info['comment'])}")
    current = await conn.fetchval("SELECT current_user")
    if info["owner"] != current:
        await conn.execute(f"ALTER TABLE {q(shadow)} OWNER TO {q(info['owner'])}")
    for g in await conn.fetch(TABLE_GRANTS, live):
        grant_option = " WITH GRANT OPTION" if g["is_grantable"] else ""
        await conn.execute(
            f"GRANT {g['privilege_type']} ON {q(shadow)} TO {g['grantee']}{grant_option}"
        )
    for g in await conn.fetch(COLUMN_GRANTS, live):
        grant_option = " WITH GRANT OPTION" if g["is_grantable"] else ""
        await conn.execute(
            f"GRANT {g['privilege_type']} ({g['column_name']}) ON {q(shadow)} "
            f"TO {g['grantee']}{grant_option}"
        )
    # Row-level security from the start: the shadow holds every project's rows and the roles
    # above may read it while it is rebuilt (the replay itself writes as awooop_platform,
    # which bypasses RLS).
    for policy in await conn.fetch(POLICIES, live):
        await conn.execute(_policy_sql(policy, shadow))
    if info["relrowsecurity"]:
        await conn.execute(f"ALTER TABLE {q(shadow)} ENABLE ROW LEVEL SECURITY")
    if info["relforcerowsecurity"]:
        await conn.execute(f"ALTER TABLE {q(shadow)} FORCE ROW LEVEL SECURITY")
    return shadow


def _policy_sql(p: Any, table: str) -> str:
    clause = f"CREATE POLICY {p['name']} ON {q(table)}"
    clause += " AS PERMISSIVE" if p["polpermissive"] else " AS RESTRICTIVE"
    clause += f" FOR {p['command']} TO {', '.join(p['roles'])}"
    if p["using_expr"] is not None:
        clause += f" USING ({p['using_expr']})"
    if p["check_expr"] is not None:
        clause += f" WITH CHECK ({p['check_expr']})"
    return clause


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


async def index_plan(conn: Connection, live: str) -> list[IndexInfo]:
    shadow = shadow_name(live)
    result = []
    for r in await conn.fetch(INDEXES, live):
        definition: str = r["def"]
        using = definition.index(" USING ")
        name = shadow_name(r["name"])
        create = (
            f"CREATE {'UNIQUE ' if r['indisunique'] else ''}INDEX {q(name)} ON {q(shadow)}"
            + definition[using:]
        )
        constraint = None
        if r["contype"] in ("p", "u"):
            kind = "PRIMARY KEY" if r["contype"] == "p" else "UNIQUE"
            deferrable = ""
            if r["condeferrable"]:
                deferrable = " DEFERRABLE INITIALLY " + (
                    "DEFERRED" if r["condeferred"] else "IMMEDIATE"
                )
            constraint = (
                f"ALTER TABLE {q(shadow)} ADD CONSTRAINT {q(name)} {kind} "
                f"USING INDEX {q(name)}{deferrable}"
            )
        elif r["contype"] == "x":
            create = ""
            constraint = f"ALTER TABLE {q(shadow)} ADD CONSTRAINT {q(name)} {r['condef']}"
        result.append(IndexInfo(r["name"], name, create, constraint))
    return result


async def build_indexes(conn: Connection, live: str) -> None:
    """Every index (and index-backed constraint) of ``live`` on its shadow, then ANALYZE."""
    shadow = shadow_name(live)
    for index in await index_plan(conn, live):
        if index.create_shadow:
            await conn.execute(index.create_shadow)
        if index.constraint_sql:
            await conn.execute(index.constraint_sql)
    for fk in await conn.fetch(OWN_FOREIGN_KEYS, live):
        if fk["self_reference"]:
            raise SwapUnsupportedError(f"{live} has a self-referencing foreign key {fk['name']}")
        await conn.execute(f"ALTER TABLE {q(shadow)} ADD CONSTRAINT {fk['name']} {fk['def']}")
    await conn.execute(f"ANALYZE {q(shadow)}")


async def swap_plan(conn: Connection, live: str) -> SwapPlan:
    """Read what the swap carries over (call inside the locking transaction)."""
    info = await conn.fetchrow(TABLE_INFO, live)
    if info is None:
        raise SwapUnsupportedError(f"table {live} does not exist")
    if info["published"]:
        raise SwapUnsupportedError(f"{live} is in a publication; replay cannot swap it")
    if info["relreplident"] != "d":
        raise SwapUnsupportedError(f"{live} has a non-default replica identity")
    plan = SwapPlan(live=live, shadow=shadow_name(live))
    plan.indexes = await index_plan(conn, live)
    for t in await conn.fetch(TRIGGERS, live):
        plan.triggers.append(t["def"])
        if t["tgenabled"] != "O":
            mode = {"D": "DISABLE", "R": "ENABLE REPLICA", "A": "ENABLE ALWAYS"}[t["tgenabled"]]
            plan.triggers.append(f"ALTER TABLE {q(live)} {mode} TRIGGER {t['name']}")
    for v in await conn.fetch(DEPENDENT_VIEWS, live):
        if v["relkind"] != "v":
            raise SwapUnsupportedError(
                f"{v['name']} (a materialized view) reads {live}; replay cannot swap it"
            )
        options = f" WITH ({', '.join(v['reloptions'])})" if v["reloptions"] else ""
        plan.views.append(f"CREATE OR REPLACE VIEW {v['name']}{options} AS {v['def']}")
    for fk in await conn.fetch(REFERENCING_FOREIGN_KEYS, live):
        plan.referencing.append((fk["table_name"], fk["name"], fk["def"]))
    return plan


async def swap(conn: Connection, plan: SwapPlan) -> None:
    """Put the shadow in the live table's place (inside the caller's locking transaction)."""
    live, shadow, old = q(plan.live), q(plan.shadow), q(old_name(plan.live))
    await conn.execute(f"ALTER TABLE {live} RENAME TO {old}")
    for index in plan.indexes:
        await conn.execute(f"ALTER INDEX {q(index.name)} RENAME TO {q(old_name(index.name))}")
    await conn.execute(f"ALTER TABLE {shadow} RENAME TO {live}")
    for index in plan.indexes:
        await conn.execute(f"ALTER INDEX {q(index.shadow)} RENAME TO {q(index.name)}")
    for statement in plan.triggers:
        await conn.execute(statement)
    for statement in plan.views:
        await conn.execute(statement)
    for table, name, definition in plan.referencing:
        await conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        await conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition} NOT VALID")
    if await conn.fetchval(OWN_RULES, old_name(plan.live)):
        raise SwapUnsupportedError(f"{plan.live} has rules; replay cannot swap it")
    try:
        await conn.execute(f"DROP TABLE {old}")
    except asyncpg.DependentObjectsStillExistError as exc:
        raise SwapUnsupportedError(
            f"{plan.live} has dependents the swap cannot carry over: {exc.detail or exc}"
        ) from exc


async def validate_foreign_keys(conn: Connection, plan: SwapPlan) -> None:
    """Validate the foreign keys recreated NOT VALID by :func:`swap` (after its commit)."""
    for table, name, _ in plan.referencing:
        await conn.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")
