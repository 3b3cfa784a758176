"""Where the tests find Postgres and Redis, and private servers for chaos tests.

Order: the URL in AWOOOP_TEST_DATABASE_URL / AWOOOP_TEST_REDIS_URL, else the local service on
its default port, else a testcontainers container where a Docker engine answers. When none
can be had the run fails (never skips) and says what to start.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import asyncpg
import redis

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


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=3).ping())
    except Exception:
        return False


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    result = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    return result.returncode == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A private redis-server on a free loopback port, for tests that flush or stop Redis."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="awooop-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not redis_answers(self.url):
            if time.monotonic() > deadline:
                raise RuntimeError("private redis-server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def private_redis() -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not installed; install Debian's redis-server")
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


def postgres_bindir() -> Path:
    """The server binaries of the newest PostgreSQL installed from Debian's packages."""
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
    return versions[-1].parent


class PostgresServer:
    """A private PostgreSQL cluster on a free loopback port, for tests that restart Postgres.

    The server runs as the ``postgres`` OS user when the tests run as root (initdb refuses root).
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="awooop-pg-"))
        self.data = self.dir / "data"
        self.bindir = postgres_bindir()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories="
            f"{self.dir} -c fsync=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop("immediate")
        self.start()


@contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.init()
    server.start()
    try:
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):  # already stopped by the test
            server.stop("immediate")
        shutil.rmtree(server.dir, ignore_errors=True)


def resolve_postgres(stack: list[Any]) -> str:
    url = os.environ.get("AWOOOP_TEST_DATABASE_URL")
    if url:
        if not pg_answers(url):
            raise RuntimeError(f"AWOOOP_TEST_DATABASE_URL={url} does not answer")
        return url
    if pg_answers(LOCAL_PG):
        return LOCAL_PG
    if docker_engine_answers():
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16", driver=None)
        container.start()
        stack.append(container)
        return str(container.get_connection_url())
    raise RuntimeError("no PostgreSQL for the tests: set AWOOOP_TEST_DATABASE_URL or " + START_HINT)


def resolve_redis(stack: list[Any]) -> str:
    url = os.environ.get("AWOOOP_TEST_REDIS_URL")
    if url:
        if not redis_answers(url):
            raise RuntimeError(f"AWOOOP_TEST_REDIS_URL={url} does not answer")
        return url
    if redis_answers(LOCAL_REDIS):
        return LOCAL_REDIS
    if docker_engine_answers():
        from testcontainers.redis import RedisContainer

        container = RedisContainer("redis:7")
        container.start()
        stack.append(container)
        host = container.get_container_host_ip()
        return f"redis://{host}:{container.get_exposed_port(6379)}/0"
    raise RuntimeError("no Redis for the tests: set AWOOOP_TEST_REDIS_URL or " + START_HINT)


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


if __name__ == "__main__":
    raise SystemExit(main())
