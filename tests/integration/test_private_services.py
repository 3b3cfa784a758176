"""The private servers that chaos tests restart really start, answer and restart."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from awooop.demo.servers import PostgresServer, RedisServer, free_cluster_port, free_port
from tests.support import services


def test_private_postgres_starts_answers_and_restarts() -> None:
    with services.private_postgres() as pg:
        assert services.pg_answers(pg.url)
        pg.restart()
        assert services.pg_answers(pg.url)
    assert not services.pg_answers(pg.url)


def test_private_redis_starts_answers_and_restarts() -> None:
    with services.private_redis() as rd:
        assert services.redis_answers(rd.url)
        rd.restart()
        assert services.redis_answers(rd.url)
    assert not services.redis_answers(rd.url)


def test_private_redis_cluster_serves_keys_of_every_master() -> None:
    import redis.cluster

    with services.private_redis_cluster() as cluster:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        try:
            for i in range(30):
                client.set(f"k{{{i}}}", i)
            owners = {client.get_node_from_key(f"k{{{i}}}").port for i in range(30)}
            assert owners == {n.port for n in cluster.nodes}
            assert int(client.get("k{7}")) == 7
        finally:
            client.close()


def test_a_port_taken_before_the_first_start_moves_the_server(tmp_path: Path) -> None:
    """Another process can take the port chosen for a private server before it binds it (the
    CI run that saw 'redis-server on port 37190 did not start'): the first start moves to a
    fresh port; a restart keeps its port and says so when the port is gone."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        server = RedisServer(tmp_path / "redis")
        server.port = taken
        server.start()
        try:
            assert server.port != taken
            assert services.redis_answers(server.url)
            server.stop()
            server.port = taken
            with pytest.raises(RuntimeError, match=f"port {taken} did not start"):
                server.start()
        finally:
            server.stop()


def test_a_postgres_port_taken_before_the_first_start_moves_the_server() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        directory = Path(tempfile.mkdtemp(prefix="awooop-pg-"))
        server = PostgresServer(directory)
        server.port = taken
        try:
            server.start()
            assert server.port != taken
            assert services.pg_answers(server.url)
        finally:
            if server.running():
                server.stop("immediate")
            shutil.rmtree(directory, ignore_errors=True)


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(free_port() < low for _ in range(20))
    assert all(free_cluster_port() + 10000 < low for _ in range(20))
