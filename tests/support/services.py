"""Where the tests find Postgres and Redis, and private servers for chaos tests.

Order: the URL in AWOOOP_TEST_DATABASE_URL / AWOOOP_TEST_REDIS_URL, else the local service on
its default port, else a testcontainers container where a Docker engine answers. When none
can be had the run fails (never skips) and says what to start.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import asyncpg

from awooop.demo.servers import (
    PostgresServer,
    RedisCluster,
    RedisServer,
    free_port,
    redis_answers,
)

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
START_HINT = (
    "start them with:\n"
    "  pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n"
    '  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" '
    "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
)


def pg_answers(url: str) -> bool:
    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(url, timeout=3)
        except Exception:
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    result = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    return result.returncode == 0


@contextmanager
def private_redis() -> Iterator[RedisServer]:
    """A private redis-server for tests that flush, stop or restart Redis."""
    directory = Path(tempfile.mkdtemp(prefix="awooop-redis-"))
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def private_postgres(max_connections: int = 300) -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster for tests that stop, restart or fill Postgres."""
    directory = Path(tempfile.mkdtemp(prefix="awooop-pg-"))
    server = PostgresServer(directory, max_connections=max_connections)
    server.start()
    try:
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):  # already stopped by the test
            server.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def private_redis_cluster(masters: int = 3) -> Iterator[RedisCluster]:
    """A private Redis Cluster of ``masters`` masters on free loopback ports."""
    directory = Path(tempfile.mkdtemp(prefix="awooop-cluster-"))
    cluster = RedisCluster(directory, masters)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def resolve(
    what: str,
    env: str,
    local: str,
    answers: Callable[[str], bool],
    container: Callable[[list[Any]], str],
    stack: list[Any],
) -> str:
    """The URL in ``env`` (which must answer), else ``local`` when it answers, else a container
    (started onto ``stack``) when Docker answers; RuntimeError saying what to do otherwise."""
    url = os.environ.get(env)
    if url:
        if not answers(url):
            raise RuntimeError(f"{env}={url} does not answer")
        return url
    if answers(local):
        return local
    if docker_engine_answers():
        return container(stack)
    raise RuntimeError(f"no {what} for the tests: set {env} or " + START_HINT)


def postgres_container(stack: list[Any]) -> str:
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer("postgres:16", driver=None)
    container.start()
    stack.append(container)
    return str(container.get_connection_url())


def redis_container(stack: list[Any]) -> str:
    from testcontainers.redis import RedisContainer

    container = RedisContainer("redis:7")
    container.start()
    stack.append(container)
    return f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0"


def resolve_postgres(stack: list[Any]) -> str:
    return resolve(
        "PostgreSQL", "AWOOOP_TEST_DATABASE_URL", LOCAL_PG, pg_answers, postgres_container, stack
    )


def resolve_redis(stack: list[Any]) -> str:
    return resolve(
        "Redis", "AWOOOP_TEST_REDIS_URL", LOCAL_REDIS, redis_answers, redis_container, stack
    )


def main() -> int:
    """``python -m tests.support.services``: say whether the test services answer."""
    import sys

    stack: list[Any] = []
    try:
        pg, rd = resolve_postgres(stack), resolve_redis(stack)
    except RuntimeError as exc:
        print(f"services: {exc}", file=sys.stderr)
        return 1
    finally:
        for container in stack:
            container.stop()
    print(f"services: postgres {pg.rsplit('@', 1)[-1]} and redis {rd.rsplit('@', 1)[-1]} answer")
    return 0


__all__ = ["free_port", "private_postgres", "private_redis", "private_redis_cluster"]


if __name__ == "__main__":
    raise SystemExit(main())
