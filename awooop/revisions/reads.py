"""Reading revisions, the active one, and the contracts of a project (inside the caller's
tenant transaction: row-level security hides other projects' revisions, R-43)."""

from __future__ import annotations

import uuid
from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import NoActiveRevisionError, RevisionNotFoundError
from awooop.revisions.records import ContractSummary, Revision

# --- SQL -----------------------------------------------------------------------------------

SELECT_POINTER = """
SELECT active_revision_id, updated_at FROM awooop_active_revisions
WHERE project_id = $1 AND contract_family = $2 AND contract_id = $3
"""

# One top-level field of a contract's active body ($4), and the revision (no row: none active).
SELECT_ACTIVE_FIELD = """
SELECT r.revision_id, r.body -> $4::text AS field
FROM awooop_active_revisions a
JOIN awooop_contract_revisions r ON r.revision_id = a.active_revision_id
WHERE a.project_id = $1 AND a.contract_family = $2 AND a.contract_id = $3
"""

SELECT_REVISION = """
SELECT r.revision_id, r.project_id, r.contract_family, r.contract_id, r.body, r.body_hash,
       r.created_at, a.active_revision_id IS NOT NULL AS active
FROM awooop_contract_revisions r
LEFT JOIN awooop_active_revisions a ON a.active_revision_id = r.revision_id
WHERE r.revision_id = $1
"""

LIST_REVISIONS = """
SELECT r.revision_id, r.project_id, r.contract_family, r.contract_id, r.body_hash,
       r.created_at, a.active_revision_id IS NOT NULL AS active
FROM awooop_contract_revisions r
LEFT JOIN awooop_active_revisions a ON a.active_revision_id = r.revision_id
WHERE r.project_id = $1
  AND ($2::text IS NULL OR r.contract_family = $2)
  AND ($3::text IS NULL OR r.contract_id = $3)
ORDER BY r.contract_family, r.contract_id, r.created_at, r.revision_id
"""

LIST_CONTRACTS = """
SELECT r.contract_family, r.contract_id, count(*) AS revisions,
       max(r.created_at) AS last_created_at, a.active_revision_id, a.updated_at AS activated_at
FROM awooop_contract_revisions r
LEFT JOIN awooop_active_revisions a
    ON a.project_id = r.project_id
   AND a.contract_family = r.contract_family
   AND a.contract_id = r.contract_id
WHERE r.project_id = $1
GROUP BY r.contract_family, r.contract_id, a.active_revision_id, a.updated_at
ORDER BY r.contract_family, r.contract_id
"""


async def get_revision(conn: Connection, revision_id: uuid.UUID) -> Revision:
    row = await conn.fetchrow(SELECT_REVISION, revision_id)
    if row is None:
        raise RevisionNotFoundError(revision_id=revision_id)
    return Revision(**dict(row.items()))


async def get_active(conn: Connection, project_id: str, family: str, contract_id: str) -> Revision:
    pointer = await conn.fetchrow(SELECT_POINTER, project_id, family, contract_id)
    if pointer is None:
        raise NoActiveRevisionError(project_id=project_id, contract=f"{family}/{contract_id}")
    return await get_revision(conn, pointer["active_revision_id"])


async def active_field(
    conn: Connection, project_id: str, family: str, contract_id: str, field: str
) -> tuple[uuid.UUID | None, Any]:
    """(the active revision, its body's ``field``); (None, None) when none is active."""
    row = await conn.fetchrow(SELECT_ACTIVE_FIELD, project_id, family, contract_id, field)
    return (None, None) if row is None else (row["revision_id"], row["field"])


async def list_revisions(
    conn: Connection, project_id: str, family: str | None = None, contract_id: str | None = None
) -> list[Revision]:
    rows = await conn.fetch(LIST_REVISIONS, project_id, family, contract_id)
    return [Revision(**dict(r.items())) for r in rows]


async def list_contracts(conn: Connection, project_id: str) -> list[ContractSummary]:
    rows = await conn.fetch(LIST_CONTRACTS, project_id)
    return [ContractSummary(**dict(r.items())) for r in rows]
