"""The pure parts of the cost benchmark (ops/bench/cost_measure.py): /proc parsing, the CPU
split per process role, and the first hop's breakdown. The benchmark itself is a manual run
(``make bench``), not a test."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def m() -> ModuleType:
    return load_script("ops/bench/cost_measure.py", "cost_measure")


def test_parse_stat_splits_after_the_last_parenthesis_of_the_command_name(m: ModuleType) -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    text = "4242 (python (x) y) S 17 4242 4242 0 -1 4194560 900 0 0 0 123 45 0 0 20 0 1 0\n"
    assert m.parse_stat(text) == (17, 168)


def test_parse_stat_reads_this_process(m: ModuleType) -> None:
    with open("/proc/self/stat") as f:
        ppid, ticks = m.parse_stat(f.read())
    assert ppid == os.getppid()
    assert ticks >= 0


def test_postgres_titles_split_client_backends_from_the_rest(m: ModuleType) -> None:
    backend = "postgres: postgres cost_ab12 127.0.0.1(53122) idle"
    assert m.postgres_role(backend) == "postgres_backends"
    assert m.postgres_role("postgres: app db [local] SELECT") == "postgres_backends"
    for title in (
        "postgres: checkpointer",
        "postgres: walwriter",
        "postgres: autovacuum worker cost_ab12",
        "postgres: logical replication launcher",
        "/usr/lib/postgresql/15/bin/postgres -D /tmp/x/data -p 5433",
    ):
        assert m.postgres_role(title) == "postgres_other", title


def test_cpu_by_role_counts_started_and_exited_processes(m: ModuleType) -> None:
    proc = m.Proc
    postmaster = 100
    before = {
        1: proc(0, 1000, "python -m awooop.cli worker"),
        100: proc(1, 50, "postgres -D data"),
        101: proc(100, 200, "postgres: postgres cost 127.0.0.1(1) idle"),
        102: proc(100, 10, "postgres: walwriter"),
        103: proc(100, 70, "postgres: autovacuum worker cost"),  # exits in between
        999: proc(1, 5, "someone else's process"),
    }
    after = {
        1: proc(0, 1300, "python -m awooop.cli worker"),
        100: proc(1, 52, "postgres -D data"),
        101: proc(100, 260, "postgres: postgres cost 127.0.0.1(1) idle"),
        102: proc(100, 14, "postgres: walwriter"),
        104: proc(100, 40, "postgres: postgres cost 127.0.0.1(2) idle"),  # new connection
        999: proc(1, 500, "someone else's process"),
    }
    roles = m.roles_of({**before, **after}, {1: "worker", 104: "bench"}, postmaster)
    assert 999 not in roles
    split = m.cpu_by_role(before, after, roles, 100)
    assert split.seconds == pytest.approx(
        {"worker": 3.0, "postgres_backends": 0.6, "postgres_other": 0.06, "bench": 0.4}
    )
    assert split.exited == {"postgres_other": 1}


def run(**offsets_ms: float | None) -> dict[str, float | None]:
    """One run's points, ``offsets_ms`` after a commit at t = 1000 s."""
    offsets = {"committed": 0.0, **offsets_ms}
    return {name: None if ms is None else 1000.0 + ms / 1000 for name, ms in offsets.items()}


def test_hop_breakdown_gives_each_hop_and_shares_that_add_up(m: ModuleType) -> None:
    runs = [
        run(xadd=1.0, delivered=1.5, claim_started=2.0, claim_committed=3.0, handler_started=4.0),
        run(xadd=3.0, delivered=3.5, claim_started=4.0, claim_committed=5.0, handler_started=8.0),
        run(xadd=1.0, delivered=None, claim_started=2.0, claim_committed=3.0, handler_started=4.0),
    ]
    out = m.hop_breakdown(runs)
    assert (out["runs"], out["of"]) == (2, 3)  # the run without a delivery time is left out
    hops = out["hops"]
    assert list(hops) == list(m.HOPS)
    assert hops["relay"]["mean_ms"] == pytest.approx(2.0)
    assert hops["xadd_to_xreadgroup"]["mean_ms"] == pytest.approx(0.5)
    assert hops["handler_start"]["mean_ms"] == pytest.approx(2.0)
    assert hops["handler_start"]["p99_ms"] == pytest.approx(3.0)
    assert out["total"]["mean_ms"] == pytest.approx(6.0)
    assert sum(h["share"] for h in hops.values()) == pytest.approx(1.0, abs=0.01)
    assert hops["relay"]["share"] == pytest.approx(2.0 / 6.0, abs=0.001)


def test_hop_breakdown_of_no_complete_run_says_so(m: ModuleType) -> None:
    assert m.hop_breakdown([run(xadd=None)]) == {"runs": 0, "of": 1}
