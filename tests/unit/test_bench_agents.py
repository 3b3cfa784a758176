"""The pure parts of the agents benchmark (ops/bench/agents_stats.py): the shapes, the ideal
wall time, the step overhead from the journal's calls (a wait's pair apart), the edges of a run
(of its last attempt when it waited), per-step figures, memory per run in flight, the targets
and the profile's split (ops/bench/agents_profile.py). The benchmark itself is a manual run."""

from __future__ import annotations

import math
from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def m() -> ModuleType:
    return load_script("ops/bench/agents_stats.py", "agents_stats")


def test_default_shapes_and_their_ideal_wall_time(m: ModuleType) -> None:
    shapes = m.plan(None, {})
    assert list(shapes) == ["a", "b"]
    assert shapes["a"].ideal_s == 6.0  # 2,000 x 3 x 1 s / 1,000
    assert shapes["b"].ideal_s == 12.0  # 10,000 x 3 x 2 s / 5,000
    assert shapes["b"].delay_ms == 2000
    assert m.plan("all", {"runs": None}) == shapes


def test_flags_change_the_shapes_measured(m: ModuleType) -> None:
    [custom] = m.plan(None, {"runs": 200, "concurrency": 100, "steps": 1, "call_s": 0.5}).values()
    assert (custom.runs, custom.concurrency, custom.steps, custom.delay_ms) == (200, 100, 1, 500)
    b = m.plan("b", {"workers": 4})["b"]
    assert (b.runs, b.workers, b.per_worker) == (10_000, 4, 1_250)


@pytest.mark.parametrize(
    ("shape", "flags"),
    [("c", {}), (None, {"runs": 0}), (None, {"call_s": -1.0}), ("a", {"workers": 3})],
)
def test_plan_refuses(m: ModuleType, shape: str | None, flags: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each refusal is a ValueError
        m.plan(shape, flags)


def test_step_overhead_is_the_time_between_answers_less_the_call(m: ModuleType) -> None:
    call = m.Call
    calls = [  # run r: answers at 1.010 and 2.070 (1 s calls); run q: one call only
        call("r", 1.040, 1.030),  # the second call, started 30 ms after the first answer
        call("r", 0.0, 1.010),
        call("q", 0.0, 1.002),
    ]
    gaps = m.step_overheads(calls, 1.0)
    assert [round(v, 6) for v in gaps["overhead"]] == [60.0]  # (2.070 - 1.010 - 1) s
    assert [round(v, 6) for v in gaps["between_calls"]] == [30.0]
    assert [round(v, 6) for v in gaps["in_gateway"]] == [30.0]
    assert sorted(round(v, 6) for v in gaps["gateway_extra"]) == [2.0, 10.0, 30.0]


def test_with_jitter_each_call_has_its_prompts_model_time(m: ModuleType) -> None:
    from awooop.llm.local import jitter_share

    model = [1.0 + 0.5 * jitter_share(m.step_prompt("r", i)) for i in range(2)]
    first = m.Call("r", 0.0, model[0] + 0.004)  # answered 4 ms after its model
    second = m.Call("r", first.answered + 0.030, model[1] + 0.002)  # called 30 ms later
    gaps = m.step_overheads([second, first], 1.0, None, 0.5)
    assert [round(v, 6) for v in gaps["overhead"]] == [32.0]
    assert [round(v, 6) for v in gaps["between_calls"]] == [30.0]
    assert [round(v, 6) for v in gaps["in_gateway"]] == [2.0]
    assert sorted(round(v, 6) for v in gaps["gateway_extra"]) == [2.0, 4.0]
    shape = m.plan(None, {"jitter_s": 0.5, "runs": 100, "concurrency": 10, "steps": 2})["custom"]
    assert (shape.jitter_ms, shape.mean_call_s) == (500, 1.25)
    assert shape.ideal_s == 100 * 2 * 1.25 / 10
    with pytest.raises(ValueError):  # noqa: PT011
        m.plan(None, {"jitter_s": -1.0})


def test_run_edges_and_repeats(m: ModuleType) -> None:
    calls = [m.Call("r", 10.1, 1.0), m.Call("r", 11.2, 1.0)]
    edges = m.run_edges({"r": 10.0}, {"r": 10.04}, calls, {"r": 12.25})
    assert [round(v, 6) for v in edges["to_first_call"]] == [100.0]
    assert [round(v, 6) for v in edges["claim_to_handler"]] == [40.0]
    assert [round(v, 6) for v in edges["handler_to_first_call"]] == [60.0]
    assert [round(v, 6) for v in edges["after_last_answer"]] == [50.0]
    twice = m.repeated({"a": 2, "b": 1}, {"b": 4, "c": 3}, {("c", "s0"): 2, ("b", "s0"): 1}, 3)
    assert twice == {
        "claimed_more_than_once": 1,
        "more_model_calls_than_steps": 1,
        "step_journaled_twice": 1,
        "any": 3,
    }


def test_a_run_that_waited_has_its_edges_from_its_last_attempt(m: ModuleType) -> None:
    # Claimed at 10, first call at 10.1, asleep from 11.15; claimed again at 14, its handler
    # started at 14.03 (the result's), replayed the first step and called again at 14.05.
    calls = [m.Call("r", 10.1, 1.0), m.Call("r", 14.05, 1.0)]
    edges = m.run_edges({"r": 10.0}, {"r": 14.03}, calls, {"r": 15.1}, {"r": 14.0})
    assert [round(v, 6) for v in edges["to_first_call"]] == [100.0]
    assert [round(v, 6) for v in edges["claim_to_handler"]] == [30.0]
    assert [round(v, 6) for v in edges["handler_to_first_call"]] == [20.0]
    gaps = m.step_overheads(calls, 1.0, {"r": [11.15]})
    assert gaps["overhead"] == gaps["between_calls"] == gaps["in_gateway"] == []
    assert [round(v, 6) for v in gaps["across_wait"]] == [2950.0]  # the wait included
    assert "across_wait" not in m.step_overheads(calls, 1.0)
    # Two claims are a waiting run's due: not executed twice; three are.
    assert m.repeated({"r": 2}, {"r": 2}, {}, 2, attempts=2)["any"] == 0
    assert m.repeated({"r": 3}, {"r": 2}, {}, 2, attempts=2)["claimed_more_than_once"] == 1


def test_per_step_figures(m: ModuleType) -> None:
    cpu = m.per_unit({"worker": 3.0, "relay": 0.5, "postgres_backends": 1.5, "redis": 9.0}, 1000, 2)
    assert cpu["per_run_ms"]["runtime"] == 5.0  # redis is not the runtime's
    with_timers = m.per_unit({"worker": 3.0, "timers": 1.0, "reviewer_backends": 4.0}, 1000, 2)
    assert with_timers["per_run_ms"]["runtime"] == 4.0  # the timers loop is; the reviewer not
    assert cpu["per_step_ms"]["worker"] == 1.5
    assert m.rss_per_in_flight_kb([1000, 2000], [9000, 1500], 100) == 80.0  # a shrink counts 0
    assert m.xacts_per_step(1300, 10.0, 30.0, 500) == {"gross": 2.6, "net": 2.0}


def test_spread_and_percentile(m: ModuleType) -> None:
    values = [float(v) for v in range(1, 101)]
    assert m.spread(values) == {"count": 100, "p50_ms": 51.0, "p99_ms": 100.0, "max_ms": 100.0}
    assert m.spread([])["p99_ms"] is None
    assert math.isnan(m.percentile([], 0.5))


def test_targets_are_judged_at_their_own_scale(m: ModuleType) -> None:
    summary = {
        "wall_to_ideal": 1.1,
        "runtime_cpu_ms_per_step": 0.7,
        "rss_kb_per_in_flight": 12.0,
        "step_overhead_p99_ms": 25.0,
    }
    at_1000 = m.targets(summary, 1000)
    assert at_1000["wall_to_ideal"]["met"] is None  # judged at 5,000 in flight
    assert at_1000["runtime_cpu_ms_per_step"]["met"] is False
    assert at_1000["rss_kb_per_in_flight"]["met"] is True
    assert at_1000["step_overhead_p99_ms"]["met"] is False
    assert m.targets(summary, 5000)["wall_to_ideal"]["met"] is True
    assert m.targets(summary, 100)["step_overhead_p99_ms"]["met"] is None


def test_postgres_roles_keep_the_benchmark_database_apart(m: ModuleType) -> None:
    assert m.postgres_role("postgres: postgres agents_1 127.0.0.1(5) idle", "agents_1") == (
        "postgres_backends"
    )
    assert m.postgres_role("postgres: postgres other 127.0.0.1(5) idle", "agents_1") == (
        "postgres_backends_other"
    )
    assert m.postgres_role("postgres: autovacuum worker agents_1", "agents_1") == "postgres_other"


@pytest.fixture(scope="module")
def profile() -> ModuleType:
    return load_script("ops/bench/agents_profile.py", "agents_profile")


def test_profile_split_scales_samples_to_the_measured_cpu(profile: ModuleType) -> None:
    loop = "<module> (awooop/cli.py:9);run (asyncio/runners.py:190)"
    step = f"{loop};RunContext.step (awooop/worker/context.py:170)"
    raw = "\n".join(
        [
            f"{step};Connection.execute (asyncpg/connection.py:318) 6",
            f"{step};Connection.execute (asyncpg/connection.py:320) 2",
            f"{loop};EpollSelector.select (selectors.py:464) 2",
            "not a sample line",
        ]
    )
    stacks = profile.parse_raw(raw)
    assert sum(stacks.values()) == 10
    split = profile.profile_split(stacks, 0.5)
    assert split["samples"] == 10
    assert split["by_runtime_module"][0] == {
        "where": "awooop/worker/context.py",
        "ms_per_step": 0.4,
        "share": 0.8,
    }
    assert split["by_runtime_module"][1]["where"] == "outside the runtime"  # the loop's own
    assert split["by_leaf"][0]["where"] == "asyncpg"
    assert split["top_self"][0]["where"] == "Connection.execute (asyncpg/connection.py)"
    assert profile.profile_split({}, 1.0) == {"samples": 0}
