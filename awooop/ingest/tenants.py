"""Tenant bindings: which projects a producer service's database login may touch (R-43).

A producer service logs in as a role of its own. :func:`grant` makes that login a member of
``awooop_producer`` (the table privileges the producer library needs, and nothing of
credentials or the platform) and binds it to projects in ``awooop_tenant_grants``; the
restrictive policy ``tenant_binding`` on every tenant table then limits the login to those
projects, whatever it sets (migrations/0090_tenant_bindings.sql says why it is keyed on
``session_user``). :func:`revoke` unbinds projects, and takes ``awooop_producer`` back once
the login has none left; :func:`list_bindings` shows them.

These run on a connection of the login itself, without SET ROLE: granting a role and writing
the grants table need the tables' owner (the role that runs ``awooop migrate``); any other
login is refused with E-TENANT-001 and nothing is written.

A login is refused a binding when it could leave the policy (:func:`refusal`): it cannot log in
(the binding follows the login, not group roles), it is a superuser or has BYPASSRLS, it may
create roles (CREATEROLE could grant itself a runtime role), or it is a member of the runtime's
own roles ``awooop_app`` / ``awooop_platform`` (SET ROLE would leave the binding behind).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import asyncpg
import msgspec

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError, TenantAdminError
from awooop.ingest.credentials import check_project_id

PRODUCER_ROLE = "awooop_producer"

# --- SQL -------------------------------------------------------------------------------------

ROLE_INFO = """
SELECT r.rolname, quote_ident(r.rolname) AS quoted, r.rolcanlogin, r.rolsuper, r.rolbypassrls,
       r.rolcreaterole,
       pg_has_role(r.oid, 'awooop_app', 'MEMBER') AS app,
       pg_has_role(r.oid, 'awooop_platform', 'MEMBER') AS platform
FROM pg_roles r WHERE r.rolname = $1
"""
INSERT_GRANTS = """
INSERT INTO awooop_tenant_grants (role_name, project)
SELECT $1, p FROM unnest($2::text[]) AS p
ON CONFLICT (role_name, project) DO NOTHING
"""
DELETE_GRANTS = """
DELETE FROM awooop_tenant_grants WHERE role_name = $1 AND project = ANY($2::text[])
"""
REMAINING = "SELECT count(*) FROM awooop_tenant_grants WHERE role_name = $1"
LIST_BINDINGS = """
SELECT g.role_name, array_agg(g.project ORDER BY g.project) AS projects,
       r.oid IS NOT NULL AS role_exists,
       coalesce(pg_has_role(r.oid, 'awooop_producer', 'MEMBER'), false) AS producer
FROM awooop_tenant_grants g
LEFT JOIN pg_roles r ON r.rolname = g.role_name
GROUP BY g.role_name, r.oid
ORDER BY g.role_name
"""


class Binding(msgspec.Struct, frozen=True):
    role_name: str
    projects: list[str]
    role_exists: bool
    producer: bool  # still a member of awooop_producer


class RoleInfo(msgspec.Struct, frozen=True, kw_only=True):
    rolname: str
    quoted: str
    rolcanlogin: bool
    rolsuper: bool
    rolbypassrls: bool
    rolcreaterole: bool
    app: bool
    platform: bool


# --- pure ------------------------------------------------------------------------------------


def check_projects(projects: Sequence[str]) -> list[str]:
    """Ordinary project ids (never the platform project), each once, in the order given."""
    if not projects:
        raise InvalidInputError("name at least one project")
    for project in projects:
        if project == PLATFORM_PROJECT:
            raise InvalidInputError(
                f"{PLATFORM_PROJECT} is the platform's: no producer login may be bound to it"
            )
        check_project_id(project)
    return list(dict.fromkeys(projects))


def refusal(role: RoleInfo) -> str | None:
    """Why ``role`` may not be bound to projects (None: it may)."""
    if not role.rolcanlogin:
        return (
            f"role {role.rolname} cannot log in: bind the login role the service connects as "
            "(bindings follow the login, not group roles)"
        )
    for held, what in (
        (role.rolsuper, "is a superuser"),
        (role.rolbypassrls, "has BYPASSRLS"),
        (role.rolcreaterole, "has CREATEROLE (it could grant itself a runtime role)"),
        (role.app, "is a member of awooop_app, the runtime's own role"),
        (role.platform, "is a member of awooop_platform, the runtime's own role"),
    ):
        if held:
            return (
                f"role {role.rolname} {what}: it could leave the binding; give the service a "
                "login of its own with none of that"
            )
    return None


# --- I/O -------------------------------------------------------------------------------------


async def grant(conn: Connection, role_name: str, projects: Sequence[str]) -> list[str]:
    """Bind ``role_name`` to ``projects`` (and make it a member of awooop_producer); returns
    the projects that were not bound before."""
    wanted = check_projects(projects)
    with _owner_only():
        async with conn.transaction():
            row = await conn.fetchrow(ROLE_INFO, role_name)
            if row is None:
                raise InvalidInputError(f"no role {role_name!r} (CREATE ROLE ... LOGIN first)")
            role = RoleInfo(**dict(row.items()))
            reason = refusal(role)
            if reason is not None:
                raise InvalidInputError(reason)
            # quote_ident from the catalog: the role exists, DDL takes no parameters.
            await conn.execute(f"GRANT {PRODUCER_ROLE} TO {role.quoted}")
            before = set(await _bound(conn, role_name))
            await conn.execute(INSERT_GRANTS, role_name, wanted)
    return [p for p in wanted if p not in before]


async def revoke(conn: Connection, role_name: str, projects: Sequence[str]) -> int:
    """Unbind ``projects`` from ``role_name``; with none left, the role also leaves
    awooop_producer. Returns how many bindings were removed."""
    wanted = check_projects(projects)
    with _owner_only():
        async with conn.transaction():
            status = await conn.execute(DELETE_GRANTS, role_name, wanted)
            removed = int(status.split()[-1])
            if not await conn.fetchval(REMAINING, role_name):
                row = await conn.fetchrow(ROLE_INFO, role_name)
                if row is not None:
                    await conn.execute(f"REVOKE {PRODUCER_ROLE} FROM {row['quoted']}")
    return removed


async def list_bindings(conn: Connection) -> list[Binding]:
    with _owner_only():
        rows = await conn.fetch(LIST_BINDINGS)
    return [Binding(**dict(r.items())) for r in rows]


async def _bound(conn: Connection, role_name: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT project FROM awooop_tenant_grants WHERE role_name = $1", role_name
    )
    return [str(r["project"]) for r in rows]


@contextlib.contextmanager
def _owner_only() -> Iterator[None]:
    """Turn Postgres' refusal of a login without the owner's rights into E-TENANT-001."""
    try:
        yield
    except asyncpg.InsufficientPrivilegeError as exc:
        raise TenantAdminError(
            f"this login may not bind logins to projects ({exc}): run awooop tenants as "
            "the tables' owner (the role that runs awooop migrate)"
        ) from exc
