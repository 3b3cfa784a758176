"""Real login roles for the tests that act as a producer service's database login.

Roles are server-wide: each test makes a unique name and drops the role afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awooop.core.pools import init_connection
from awooop.ingest import tenants


@dataclass
class Login:
    role: str
    url: str

    async def connect(self) -> Any:
        conn = await asyncpg.connect(self.url)
        await init_connection(conn)
        return conn


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:pw-{role}@{host}"))


async def create_login(owner_url: str, role: str, *attributes: str) -> None:
    conn = await asyncpg.connect(owner_url)
    try:
        login = "" if "NOLOGIN" in attributes else "LOGIN"
        await conn.execute(
            f"CREATE ROLE {role} {login} PASSWORD 'pw-{role}' {' '.join(attributes)}"
        )
    finally:
        await conn.close()


async def drop_login(owner_url: str, role: str) -> None:
    conn = await asyncpg.connect(owner_url)
    try:
        await conn.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await conn.close()


@asynccontextmanager
async def bound_login(owner_url: str, projects: list[str]) -> AsyncIterator[Login]:
    """A fresh login role bound to ``projects`` (``awooop tenants grant``), dropped afterwards."""
    role = f"awooop_t_{uuid.uuid4().hex[:12]}"
    await create_login(owner_url, role)
    try:
        owner = await asyncpg.connect(owner_url)
        try:
            await tenants.grant(owner, role, projects)
        finally:
            await owner.close()
        yield Login(role, as_role(owner_url, role))
    finally:
        await drop_login(owner_url, role)
