"""The private servers that chaos tests restart really start, answer and restart."""

from __future__ import annotations

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
