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
