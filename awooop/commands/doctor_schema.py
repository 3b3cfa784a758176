"""Doctor checks of the database's set-up: migrations, roles and row-level security, the
login role."""

from __future__ import annotations

from awooop.commands.doctor_results import FAIL, OK, WARN, Check
from awooop.core.processes import live_processes
from awooop.core.schema_check import read_schema_state, release_files, release_name
from awooop.services import Services

# --- SQL -----------------------------------------------------------------------------------
RUNTIME_ROLES = ("awooop_app", "awooop_platform", "awooop_producer")
ROLES = "SELECT rolname FROM pg_roles WHERE rolname = ANY($1::text[])"
LOGIN_ROLE = """
SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = session_user
"""
TENANT_TABLES = """
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r'
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
              AND a.attname = 'project_id' AND NOT a.attisdropped)
ORDER BY 1
"""


async def migrations(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        state = await read_schema_state(conn)
    files = release_files()
    if state.unreleased:
        return [
            Check(
                "migrations",
                FAIL,
                f"applied versions this release does not ship: {', '.join(state.unreleased)}",
                "check that this release's migrations/ folder is the released one (reinstall "
                "it); a database migrated by another build: docs/operations.md, Upgrading",
            )
        ]
    if state.too_old:
        return [
            Check(
                "migrations",
                FAIL,
                f"schema floor {state.floor} is above this release ({state.release})",
                "run the processes and doctor of the release that migrated "
                "(docs/operations.md, Upgrading)",
            )
        ]
    if state.missing:
        return [
            Check(
                "migrations",
                FAIL,
                f"not applied: {', '.join(state.missing)}",
                "run this release's `awooop migrate` (its processes refuse to start until then)",
            )
        ]
    if state.newer:
        return [
            Check(
                "migrations",
                WARN,
                f"{len(files)} applied; also applied by a newer release: {', '.join(state.newer)}",
                "finish rolling every process to the release that migrated "
                "(docs/operations.md, Upgrading)",
            )
        ]
    return [Check("migrations", OK, f"{len(files)} applied, each a released version")]


async def fleet(services: Services) -> list[Check]:
    """The live processes by release (awooop_processes): more than one release is a rolling
    upgrade in progress, or one left half done."""
    async with services.db.platform() as conn:
        live = await live_processes(conn)
    releases: dict[str, int] = {}
    for process in live:
        releases[process.release] = releases.get(process.release, 0) + 1
    summary = ", ".join(f"{count} on {release}" for release, count in sorted(releases.items()))
    if len(releases) > 1 or (releases and release_name() not in releases):
        return [
            Check(
                "fleet",
                WARN,
                f"live processes of {len(releases)} release(s): {summary}",
                "finish rolling every process to one release before the contract phase "
                "(`awooop migrate --check`; docs/operations.md, Upgrading)",
            )
        ]
    return [Check("fleet", OK, f"{len(live)} live process(es)" + (f": {summary}" if live else ""))]


async def tenancy(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        roles = {r["rolname"] for r in await conn.fetch(ROLES, list(RUNTIME_ROLES))}
        tables = await conn.fetch(TENANT_TABLES)
    loose = [t["relname"] for t in tables if not (t["relrowsecurity"] and t["relforcerowsecurity"])]
    if len(roles) < len(RUNTIME_ROLES) or loose:
        return [
            Check(
                "tenancy",
                FAIL,
                f"roles {sorted(roles)}; tables without forced RLS: {loose or 'none'}",
                "run `awooop migrate`; new tables need awooop_enforce_tenant_isolation()",
            )
        ]
    return [Check("tenancy", OK, f"roles present, RLS forced on {len(tables)} tables")]


async def login_role(services: Services) -> list[Check]:
    """Isolation holds through SET ROLE on every connection; a login role that is a superuser
    or bypasses RLS could leave it (RESET ROLE), so production should not log in as one."""
    async with services.db.platform() as conn:
        row = await conn.fetchrow(LOGIN_ROLE)
    assert row is not None  # session_user is a role
    name = row["rolname"]
    powers = [
        p
        for p, held in (("superuser", row["rolsuper"]), ("BYPASSRLS", row["rolbypassrls"]))
        if held
    ]
    if powers:
        return [
            Check(
                "login role",
                WARN,
                f"{name} is {' and '.join(powers)}: RESET ROLE would leave tenant isolation",
                "log in as a role that is only a member of awooop_app and awooop_platform "
                "(docs/operations.md, Tenant isolation)",
            )
        ]
    return [Check("login role", OK, f"{name}: no superuser, no BYPASSRLS")]
