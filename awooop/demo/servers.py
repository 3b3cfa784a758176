"""Private PostgreSQL and Redis servers on free loopback ports, in a folder of our own.

Used three ways: chaos tests (a server they may kill, flush or restart without disturbing
anyone), the demo's embedded default (``make demo`` where no local services and no Docker
engine exist), and the Redis Cluster tests (three masters in cluster mode). The binaries come
from the OS packages (Debian's ``postgresql`` and ``redis-server``); PostgreSQL runs as the
``postgres`` OS user when we are root, because initdb refuses to run as root.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range: outgoing connections take their local
    ports from it at any moment, so a listening port chosen there can be gone by the time the
    server binds it."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port below the ephemeral range (see :func:`_ephemeral_low`)."""
    return _free_port(offsets=(0,))


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, both below the ephemeral
    range."""
    return _free_port(offsets=(0, 10000))


def _free_port(offsets: tuple[int, ...]) -> int:
    high = min(_ephemeral_low(), 65536) - 1 - max(offsets)
    for _ in range(200):
        port = random.randint(10000, max(high, 10001))
        if all(_port_free(port + offset) for offset in offsets):
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=3).ping())
    except (redis.RedisError, OSError):
        return False


class RedisServer:
    """One redis-server without persistence (``cluster`` adds cluster mode)."""

    def __init__(self, directory: Path, port: int | None = None, cluster: bool = False) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (Debian package redis-server)")
        self.chosen = port is None  # ours to change while the server never started
        self.port = port or (free_cluster_port() if cluster else free_port())
        self.dir = directory
        self.cluster = cluster
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server; while it has never started on a port we chose, another process
        that took the port in the meantime makes it start again on a fresh one."""
        for _ in range(5):
            if self._started():
                self.chosen = False
                return
            if not self.chosen:
                break
            self.port = free_cluster_port() if self.cluster else free_port()
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def _started(self) -> bool:
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [
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
        ]
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{self.port}.conf",
                "--cluster-node-timeout",
                "2000",
            ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while self._pid_answering() != self.process.pid:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                return False
            time.sleep(0.05)
        return True

    def _pid_answering(self) -> int | None:
        """The process id of the server answering on our port (another test's server may)."""
        try:
            with redis.Redis.from_url(self.url, socket_timeout=3) as client:
                return int(client.info("server")["process_id"])
        except (redis.RedisError, OSError):
            return None

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


class RedisCluster:
    """Three masters in cluster mode (no replicas), slots spread evenly by redis-cli."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.nodes = [RedisServer(directory / f"node{i}", cluster=True) for i in range(masters)]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()

    def wait_ok(self, timeout: float = 30) -> None:
        self.wait_state("ok", timeout)

    def wait_state(self, state: str, timeout: float = 30) -> None:
        """Wait until every running node reports ``cluster_state:<state>`` (ok or fail)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for node in self.nodes:
                if node.process is None:
                    continue  # stopped on purpose
                try:
                    with redis.Redis(port=node.port, socket_timeout=2) as client:
                        info = client.cluster("info")
                    states.append(
                        f"cluster_state:{state}".encode() in info
                        if isinstance(info, bytes)
                        else info.get("cluster_state") == state
                    )
                except (redis.RedisError, OSError):
                    states.append(False)
            if states and all(states):
                return
            time.sleep(0.1)
        raise RuntimeError(f"redis cluster did not reach cluster_state:{state}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def slot_owners(self) -> dict[int, int]:
        """Slot -> index in :attr:`nodes` of the master serving it (from CLUSTER SLOTS)."""
        by_port = {node.port: i for i, node in enumerate(self.nodes)}
        client = redis.Redis(port=self.nodes[0].port, socket_timeout=5)
        try:
            ranges = client.cluster("SLOTS")
        finally:
            client.close()
        owners: dict[int, int] = {}
        for low, high, master, *_replicas in ranges:
            index = by_port[int(master[1])]
            owners.update(dict.fromkeys(range(int(low), int(high) + 1), index))
        return owners

    def keyslot(self, key: str) -> int:
        """The slot of ``key``, as the cluster computes it (CLUSTER KEYSLOT)."""
        client = redis.Redis(port=self.nodes[0].port, socket_timeout=5)
        try:
            return int(client.cluster("KEYSLOT", key))
        finally:
            client.close()

    def owner_of(self, key: str) -> int:
        """The index in :attr:`nodes` of the master that holds ``key``."""
        return self.slot_owners()[self.keyslot(key)]

    def stop_node(self, index: int) -> None:
        """Kill one master (SIGKILL): its slots go unserved (the cluster state turns to fail
        after the node timeout, 2 s here)."""
        self.nodes[index].stop()

    def start_node(self, index: int) -> None:
        """Start a stopped master again on the same port and folder: it keeps its cluster
        identity and slots (nodes.conf) but, without persistence, none of its data. Returns
        once the cluster is ok again."""
        self.nodes[index].start()
        self.wait_ok()


def postgres_bindir() -> Path:
    """The server binaries of the newest PostgreSQL installed from the OS packages."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if not found:
        raise RuntimeError(
            "no PostgreSQL server binaries under /usr/lib/postgresql (Debian package postgresql)"
        )
    return found[-1].parent


class PostgresServer:
    """A PostgreSQL cluster in ``directory`` (initialised on first start) on a loopback port."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        max_connections: int = 300,
        options: str = "",
    ) -> None:
        """``options``: more server options (``-c name=value ...``), after the defaults, so
        that they win (the cost benchmark turns fsync back on and loads pg_stat_statements)."""
        self.chosen = port is None  # ours to change while the server never started
        self.port = port or free_port()
        self.max_connections = max_connections
        self.options = options
        self.dir = directory
        self.data = directory / "data"
        self.bindir = postgres_bindir()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if os.geteuid() == 0:
            self._reachable_by_postgres()
        self.dir.mkdir(parents=True, exist_ok=True)
        if (self.data / "PG_VERSION").exists():
            return
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

    def _reachable_by_postgres(self) -> None:
        """As root the server runs as the ``postgres`` user, which cannot enter a folder under a
        private home (``/root`` is 0700, so is pytest's tmp root). Then the cluster lives in a
        fresh folder under the system's temporary directory and ``directory`` becomes a symlink
        to it, so the project folder still leads to it; a link left dangling by a reboot is
        replaced."""
        if self.dir.is_symlink():
            if self.dir.exists():
                self.dir = self.dir.resolve()
                self.data = self.dir / "data"
                return
            self.dir.unlink()
        parent = self.dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        probe = ["runuser", "-u", "postgres", "--", "test", "-x", str(parent)]
        if subprocess.run(probe, capture_output=True, check=False, timeout=30).returncode == 0:
            return
        target = Path(tempfile.mkdtemp(prefix="awooop-pg-"))
        if self.dir.exists():
            self.dir.rmdir()  # only ever an empty folder here: a cluster would have been reachable
        self.dir.symlink_to(target, target_is_directory=True)
        self.dir, self.data = target, target / "data"

    def start(self) -> None:
        """Start the server; while it has never started on a port we chose, another process
        that took the port in the meantime makes it start again on a fresh one."""
        self.init()
        for _ in range(4):
            try:
                self._start()
            except subprocess.CalledProcessError:
                if not self.chosen or "could not bind" not in self._log_tail():
                    raise
                self.port = free_port()
            else:
                self.chosen = False
                return
        self._start()

    def _log_tail(self) -> str:
        try:
            return (self.dir / "log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def _start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.dir} -c fsync=off "
            f"-c max_connections={self.max_connections} {self.options}"
        ).strip()
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

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def restart(self) -> None:
        self.stop("immediate")
        self.start()
