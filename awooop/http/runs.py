"""``GET /v1/projects/{project_id}/runs/{run_id}``: a run's current state, tenant-scoped.

The caller shows a bearer token of the project (any live token of it, for example the API
channel's), looked up and read in a tenant transaction of the project in the path: row-level
security hides every other project's rows, so another project's run is 404 E-RUN-003 exactly
like a run that does not exist. (The management routes and their scopes come later; this
route takes the project's ingest tokens so that an API client can follow its own runs.)
"""

from __future__ import annotations

import uuid

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.db import Connection
from awooop.errors import RunNotFoundError
from awooop.http.ingest import json_response, lowercase_headers
from awooop.ingest.auth import authenticate_bearer, bearer_token_id
from awooop.ingest.common import StoredCredential
from awooop.ingest.credentials import check_project_id
from awooop.runs import store
from awooop.runs.state import RunState
from awooop.services import Services

# --- SQL -------------------------------------------------------------------------------------

TOKEN_HASH = """
SELECT token_hash FROM awooop_api_tokens
WHERE token_id = $1 AND project_id = $2 AND revoked_at IS NULL
"""


def run_body(state: RunState) -> dict[str, object]:
    body: dict[str, object] = msgspec.to_builtins(state)
    return body


def routes(services: Services) -> list[BaseRoute]:
    async def get_run(request: Request) -> Response:
        project_id = check_project_id(request.path_params["project_id"])
        headers = lowercase_headers(request)
        try:
            run_id = uuid.UUID(request.path_params["run_id"])
        except ValueError:
            run_id = None

        async def read(conn: Connection) -> RunState | None:
            token_id = bearer_token_id(headers)
            token_hash = (
                None
                if token_id is None
                else (await conn.fetchval(TOKEN_HASH, token_id, project_id))
            )
            authenticate_bearer(headers, b"", StoredCredential(token_hash=token_hash))
            return None if run_id is None else await store.load(conn, run_id)

        state = await services.db.in_tenant(project_id, read)
        if state is None:
            raise RunNotFoundError(run_id=request.path_params["run_id"][:64])
        return json_response(run_body(state), 200)

    return [Route("/v1/projects/{project_id}/runs/{run_id}", get_run, methods=["GET"])]
