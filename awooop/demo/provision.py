"""Where the demo gets PostgreSQL and Redis: local services, else Docker, else embedded.

1. the URLs in AWOOOP_DATABASE_URL / AWOOOP_REDIS_URL when they answer (a ``demo`` database
   on that server, created fresh);
2. the local services on their default ports (127.0.0.1:5432 and 127.0.0.1:6379);
3. testcontainers (postgres:16, redis:7) where a Docker engine answers;
4. embedded: private servers from the OS packages (Debian ``postgresql`` and ``redis-server``)
   in ``.awooop/embedded/`` of the project, on free loopback ports.

On a shared Redis the demo never flushes anything: its keys carry a fresh prefix.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from awooop.demo import servers

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
DEMO_DATABASE = "awooop_demo"


@dataclass
class Provisioned:
    database_url: str
    redis_url: str
    redis_prefix: str
    how: str


def _pg_answers(url: str) -> bool:
    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(url, timeout=3)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


def _docker_engine() -> bool:
    """A Docker engine answers, and testcontainers is there to start the containers (a dev
    dependency: an install from the wheel without it goes on to the embedded servers)."""
    docker = shutil.which("docker")
    if docker is None or importlib.util.find_spec("testcontainers") is None:
        return False
    result = subprocess.run([docker, "info"], capture_output=True, check=False, timeout=20)  # noqa: S603 - fixed arguments
    return result.returncode == 0


def _server_url(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/postgres"))


def _database_url(server_url: str) -> str:
    return urlunsplit(urlsplit(server_url)._replace(path="/" + DEMO_DATABASE))


async def recreate_database(server_url: str) -> None:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{DEMO_DATABASE}" WITH (FORCE)')
    finally:
        await conn.close()


RUNTIME_ROLE = "awooop_demo_runtime"
LOGIN_ROLE_SQL = """
SELECT format(
    CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)
         THEN 'ALTER ROLE %I LOGIN PASSWORD %L'
         ELSE 'CREATE ROLE %I LOGIN PASSWORD %L' END,
    $1::text, $2::text)
"""


async def login(owner_url: str, role: str, member_of: Sequence[str] = ()) -> str:
    """A login role (no superuser) with a fresh password, a member of ``member_of``; its
    database URL. Roles are cluster-wide: a later demo on the same server reuses the role with
    a new password."""
    password = secrets.token_urlsafe(18)
    conn = await asyncpg.connect(owner_url)
    try:
        await conn.execute(await conn.fetchval(LOGIN_ROLE_SQL, role, password))
        if member_of:
            await conn.execute(f"GRANT {', '.join(member_of)} TO {role}")
    finally:
        await conn.close()
    parts = urlsplit(owner_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


async def runtime_login(owner_url: str) -> str:
    """The runtime's login: a member of awooop_app and awooop_platform only (no superuser:
    docs/operations.md, Tenant isolation)."""
    return await login(owner_url, RUNTIME_ROLE, ("awooop_app", "awooop_platform"))


SERVICES = ("auto", "local", "docker", "embedded")


def provision(stack: ExitStack, project_dir: Path, services: str = "auto") -> Provisioned:
    """``services``: ``auto`` tries the order of the module docstring; ``local`` (configured or
    local services only), ``docker`` or ``embedded`` takes that one way or fails."""
    if services not in SERVICES:
        raise ValueError(f"services must be one of {', '.join(SERVICES)}")
    prefix = f"demo{int(time.time())}"
    env_pg, env_redis = os.environ.get("AWOOOP_DATABASE_URL"), os.environ.get("AWOOOP_REDIS_URL")
    candidates = [(env_pg, env_redis, "configured")] if env_pg and env_redis else []
    candidates.append((LOCAL_PG, LOCAL_REDIS, "local services"))
    for pg, rd, how in candidates if services in ("auto", "local") else []:
        assert pg is not None and rd is not None
        server = _server_url(pg)
        if _pg_answers(server) and servers.redis_answers(rd):
            return Provisioned(_database_url(server), rd, prefix, how)
    if services == "local":
        raise RuntimeError("no configured or local PostgreSQL and Redis answer")
    if services in ("auto", "docker") and _docker_engine():
        from testcontainers.postgres import PostgresContainer
        from testcontainers.redis import RedisContainer

        pg_container = stack.enter_context(PostgresContainer("postgres:16", driver=None))
        redis_container = stack.enter_context(RedisContainer("redis:7"))
        server = _server_url(str(pg_container.get_connection_url()))
        host = redis_container.get_container_host_ip()
        redis_url = f"redis://{host}:{redis_container.get_exposed_port(6379)}/0"
        return Provisioned(_database_url(server), redis_url, prefix, "docker (testcontainers)")
    if services == "docker":
        raise RuntimeError("no Docker engine answers, or testcontainers is not installed")
    base = project_dir / ".awooop" / "embedded"
    pg_server = servers.PostgresServer(base / "postgres")
    pg_server.start()
    stack.callback(pg_server.stop)
    redis_server = servers.RedisServer(base / "redis")
    redis_server.start()
    stack.callback(redis_server.stop)
    return Provisioned(
        _database_url(pg_server.url),
        redis_server.url,
        prefix,
        f"embedded (postgres :{pg_server.port}, redis :{redis_server.port})",
    )
