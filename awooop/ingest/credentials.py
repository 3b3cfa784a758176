"""Channel secrets, per-channel dedupe TTLs and options, and bearer tokens in Postgres
(R-05, R-04). The options (:class:`awooop.ingest.common.ChannelOptions`, docs/ingest.md) are
``gitea_key`` (gitea), ``max_event_age_s`` and ``max_redelivery_age_s`` (line).

Reads run in a tenant transaction of the project (row-level security applies). Writes run on
the platform role: since migration 0090 no tenant role may insert, update or delete a secret
or a token row, whatever it sets (``awooop_app`` only reads them, to verify deliveries;
producer roles see neither table), so these management operations are the only way a
credential is written, and an ``admin`` token (a row of ``__platform__``) needs the platform
role. Every statement names its project explicitly. Secrets and tokens are never logged; a
token is returned once by :func:`create_token` and only its hash is kept (see
:mod:`awooop.ingest.auth`).
"""

from __future__ import annotations

import re
from datetime import datetime

import msgspec

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError, UnknownChannelError
from awooop.ingest import ADAPTERS
from awooop.ingest.auth import new_token
from awooop.ingest.common import GITEA_KEYS, AuthKind

PROJECT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
CONTRACT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what setWebhook's secret_token allows
MAX_SECRET_LENGTH = 1024
INGEST_SCOPE = "ingest"
MANAGE_SCOPE = "manage"  # the management routes of the token's own project
ADMIN_SCOPE = "admin"  # the management routes of every project; a token of PLATFORM_PROJECT
READ_SCOPE = "read"  # the console's pages and the GET management routes of its project, no change
SCOPES = (INGEST_SCOPE, READ_SCOPE, MANAGE_SCOPE, ADMIN_SCOPE)
MANAGEMENT_SCOPES = (READ_SCOPE, MANAGE_SCOPE, ADMIN_SCOPE)
OPTION_CHANNELS = {  # each option and the channel it applies to
    "gitea_key": "gitea",
    "max_event_age_s": "line",
    "max_redelivery_age_s": "line",
}
MAX_AGE_S = 2**31 - 1  # the integer column

# --- SQL -------------------------------------------------------------------------------------

UPSERT_SECRET = """
INSERT INTO awooop_channels (project_id, channel_type, secret) VALUES ($1, $2, $3)
ON CONFLICT (project_id, channel_type) DO UPDATE SET secret = EXCLUDED.secret, updated_at = now()
"""
UPSERT_TTL = """
INSERT INTO awooop_channels (project_id, channel_type, dedupe_ttl_s) VALUES ($1, $2, $3)
ON CONFLICT (project_id, channel_type)
DO UPDATE SET dedupe_ttl_s = EXCLUDED.dedupe_ttl_s, updated_at = now()
"""
# One statement per option (the column name cannot be a parameter).
UPSERT_OPTION = {
    "gitea_key": """
INSERT INTO awooop_channels (project_id, channel_type, gitea_key) VALUES ($1, $2, $3)
ON CONFLICT (project_id, channel_type)
DO UPDATE SET gitea_key = EXCLUDED.gitea_key, updated_at = now()
""",
    "max_event_age_s": """
INSERT INTO awooop_channels (project_id, channel_type, max_event_age_s) VALUES ($1, $2, $3)
ON CONFLICT (project_id, channel_type)
DO UPDATE SET max_event_age_s = EXCLUDED.max_event_age_s, updated_at = now()
""",
    "max_redelivery_age_s": """
INSERT INTO awooop_channels (project_id, channel_type, max_redelivery_age_s) VALUES ($1, $2, $3)
ON CONFLICT (project_id, channel_type)
DO UPDATE SET max_redelivery_age_s = EXCLUDED.max_redelivery_age_s, updated_at = now()
""",
}
LIST_CHANNELS = """
SELECT channel_type, secret IS NOT NULL AS has_secret, dedupe_ttl_s, gitea_key, max_event_age_s,
       max_redelivery_age_s, updated_at
FROM awooop_channels WHERE project_id = $1 ORDER BY channel_type
"""
INSERT_TOKEN = """
INSERT INTO awooop_api_tokens (token_id, project_id, scope, channel_type, token_hash)
VALUES ($1, $2, $3, $4, $5)
"""
LIST_TOKENS = """
SELECT token_id, scope, channel_type, created_at, revoked_at
FROM awooop_api_tokens WHERE project_id = $1 ORDER BY created_at
"""
REVOKE_TOKEN = """
UPDATE awooop_api_tokens SET revoked_at = now()
WHERE project_id = $1 AND token_id = $2 AND revoked_at IS NULL
"""

# --- validation (pure) -----------------------------------------------------------------------


def check_project_id(project_id: str) -> str:
    if not PROJECT_ID.fullmatch(project_id):
        raise InvalidInputError(
            "project id must be 1-64 characters of letters, digits and _ . : - "
            "(starting with a letter or digit)",
            project_id=project_id[:80],
        )
    return project_id


def check_token_project(project_id: str, scope: str) -> str:
    """A project that may hold a token of ``scope``: admin tokens belong to the platform
    project, every other token to an ordinary project."""
    if scope == ADMIN_SCOPE:
        if project_id != PLATFORM_PROJECT:
            raise InvalidInputError(
                f"an admin token belongs to the platform project: "
                f"awooop tokens create {PLATFORM_PROJECT} --scope admin"
            )
        return project_id
    if project_id == PLATFORM_PROJECT:
        raise InvalidInputError(f"project {PLATFORM_PROJECT} holds admin tokens only")
    return check_project_id(project_id)


def check_listed_project(project_id: str) -> str:
    """A project whose tokens may be listed or revoked (the platform project included)."""
    return project_id if project_id == PLATFORM_PROJECT else check_project_id(project_id)


def check_contract_id(contract_id: str) -> str:
    if not CONTRACT_ID.fullmatch(contract_id):
        raise InvalidInputError(
            "contract id must be 1-128 characters of letters, digits and _ . : -"
        )
    return contract_id


def check_channel(channel_type: str, auth: AuthKind | None = None) -> str:
    adapter = ADAPTERS.get(channel_type)
    if adapter is None:
        raise UnknownChannelError(channel_type=channel_type[:40])
    if auth is not None and adapter.auth is not auth:
        kinds = sorted(c for c, a in ADAPTERS.items() if a.auth is auth)
        how = (
            "a bearer token (awooop tokens create)"
            if adapter.auth is AuthKind.BEARER
            else "a secret (awooop channels set-secret)"
        )
        raise InvalidInputError(
            f"channel {channel_type} authenticates with {how}; "
            f"this command takes one of {', '.join(kinds)}"
        )
    return channel_type


def check_secret(channel_type: str, secret: str) -> str:
    if not secret or len(secret) > MAX_SECRET_LENGTH or not secret.isprintable():
        raise InvalidInputError(f"the secret must be 1-{MAX_SECRET_LENGTH} printable characters")
    if channel_type == "telegram" and not TELEGRAM_SECRET.fullmatch(secret):
        raise InvalidInputError(
            "a Telegram secret token is 1-256 characters of A-Z, a-z, 0-9, _ and -"
        )
    return secret


def check_option(channel_type: str, name: str, value: str) -> str | int | None:
    """The stored value of option ``name`` of ``channel_type`` given as text (``default``:
    None, the column cleared back to the default)."""
    check_channel(channel_type)
    applies_to = OPTION_CHANNELS.get(name)
    if applies_to is None:
        raise InvalidInputError(f"unknown option; options: {', '.join(OPTION_CHANNELS)}")
    if applies_to != channel_type:
        raise InvalidInputError(f"option {name} applies to the {applies_to} channel only")
    if value == "default":
        return None
    if name == "gitea_key":
        if value not in GITEA_KEYS:
            raise InvalidInputError(f"gitea_key must be one of {', '.join(GITEA_KEYS)} or default")
        return value
    whole = value.isascii() and value.isdigit() and len(value) <= len(str(MAX_AGE_S))
    if not whole or not 1 <= int(value) <= MAX_AGE_S:
        raise InvalidInputError(f"{name} must be a whole number of seconds (1-{MAX_AGE_S})")
    return int(value)


# --- operations ------------------------------------------------------------------------------


class ChannelInfo(msgspec.Struct, frozen=True):
    channel_type: str
    has_secret: bool
    dedupe_ttl_s: int | None
    gitea_key: str | None
    max_event_age_s: int | None
    max_redelivery_age_s: int | None
    updated_at: datetime


class TokenInfo(msgspec.Struct, frozen=True):
    token_id: str
    scope: str
    channel_type: str | None
    created_at: datetime
    revoked_at: datetime | None


async def set_secret(db: Database, project_id: str, channel_type: str, secret: str) -> None:
    check_project_id(project_id)
    check_channel(channel_type, AuthKind.SECRET)
    check_secret(channel_type, secret)
    async with db.platform_writes() as conn:
        await conn.execute(UPSERT_SECRET, project_id, channel_type, secret)


async def set_dedupe_ttl(
    db: Database, project_id: str, channel_type: str, ttl_s: int | None
) -> None:
    """Set (or with None, clear back to AWOOOP_DEDUPE_TTL_S) the channel's dedupe TTL."""
    check_project_id(project_id)
    check_channel(channel_type)
    if ttl_s is not None and ttl_s < 1:
        raise InvalidInputError("the dedupe TTL must be at least 1 second")
    async with db.platform_writes() as conn:
        await conn.execute(UPSERT_TTL, project_id, channel_type, ttl_s)


async def set_option(
    db: Database, project_id: str, channel_type: str, name: str, value: str
) -> str | int | None:
    """Set (or with ``default``, clear) a channel option; returns the stored value."""
    check_project_id(project_id)
    stored = check_option(channel_type, name, value)
    async with db.platform_writes() as conn:  # channel rows are written on the platform role only
        await conn.execute(UPSERT_OPTION[name], project_id, channel_type, stored)
    return stored


async def list_channels(db: Database, project_id: str) -> list[ChannelInfo]:
    check_project_id(project_id)
    async with db.tenant(project_id) as conn:
        rows = await conn.fetch(LIST_CHANNELS, project_id)
    return [ChannelInfo(**dict(r.items())) for r in rows]


async def create_token(db: Database, project_id: str, channel_type: str) -> tuple[str, str]:
    """A new ingest token for the project's channel: (token_id, token). Shown once."""
    check_token_project(project_id, INGEST_SCOPE)
    check_channel(channel_type, AuthKind.BEARER)
    token_id, token, token_hash = new_token()
    async with db.platform_writes() as conn:
        await conn.execute(
            INSERT_TOKEN, token_id, project_id, INGEST_SCOPE, channel_type, token_hash
        )
    return token_id, token


async def create_management_token(db: Database, project_id: str, scope: str) -> tuple[str, str]:
    """A new management token (``manage`` for the project, ``admin`` for the platform
    project): (token_id, token). Shown once."""
    if scope not in MANAGEMENT_SCOPES:
        raise InvalidInputError(f"scope must be one of {', '.join(MANAGEMENT_SCOPES)}")
    check_token_project(project_id, scope)
    token_id, token, token_hash = new_token()
    async with db.platform_writes() as conn:
        await conn.execute(INSERT_TOKEN, token_id, project_id, scope, None, token_hash)
    return token_id, token


async def list_tokens(db: Database, project_id: str) -> list[TokenInfo]:
    check_listed_project(project_id)
    async with db.tenant(project_id) as conn:
        rows = await conn.fetch(LIST_TOKENS, project_id)
    return [TokenInfo(**dict(r.items())) for r in rows]


async def revoke_token(db: Database, project_id: str, token_id: str) -> bool:
    check_listed_project(project_id)
    async with db.platform_writes() as conn:
        status = await conn.execute(REVOKE_TOKEN, project_id, token_id)
    return bool(status == "UPDATE 1")
