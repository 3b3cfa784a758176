"""The CLI for people: every command's --help says what it does and explains every option;
tables keep rows on one line (long text cut with an ellipsis, whole with --wide); a timeline
line shows its reason first; ``loops list`` tells the state now from the last error."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from awooop.cli import COMMANDS, build_parser, parser_for
from awooop.commands.doctor_flow import loop_problem
from awooop.commands.loops import listing, loop_state, render
from awooop.commands.output import ELLIPSIS, TEXT_LIMIT, clip, table
from awooop.commands.runs_render import detail_text, render_timeline
from awooop.core.loop_heartbeats import (
    LOOP_STALE_INTERVALS,
    MIN_WRITE_INTERVAL_S,
    HeartbeatRow,
    stale_after_s,
)
from awooop.projections.timeline import TimelineLine


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def test_a_command_alone_parses_as_it_does_among_all_of_them() -> None:
    """``awooop NAME ...`` imports awooop.commands.NAME only: that module must register NAME
    and nothing else, with the same options and help as in the full parser."""
    full = dict(commands(build_parser()))
    assert {path[0] for path in full} == set(COMMANDS)
    for name in COMMANDS:
        alone = dict(commands(parser_for([name, "--help"])))
        assert {path[0] for path in alone} == {name}, name
        for path, parser in alone.items():
            assert parser.format_help() == full[path].format_help(), path
    for argv in (["--help"], ["no-such-command"], []):
        assert {path[0] for path, _ in commands(parser_for(argv))} == set(COMMANDS), argv


def test_every_command_has_a_help_that_says_what_it_does_and_its_options() -> None:
    found = list(commands(build_parser()))
    assert len(found) > 30
    for path, parser in found:
        assert parser.description, f"awooop {' '.join(path)} --help says nothing"
        unexplained = [
            a.dest
            for a in parser._actions
            if not a.help and not isinstance(a, argparse._SubParsersAction)
        ]
        assert unexplained == [], (path, unexplained)
    helps = {path: parser.format_help() for path, parser in found}
    # The ones that used to say one line: what they run, how they stop, where metrics go.
    assert "SIGTERM" in helps[("relay",)] and "standby" in helps[("relay",)]
    assert "SIGTERM" in helps[("up",)] and "--workers" in helps[("up",)]
    assert "AWOOOP_METRICS_PORT" in helps[("loops", "run")]
    assert "--handler" in helps[("worker",)]
    assert "--wide" in helps[("runs", "show")] and "--wide" in helps[("loops", "list")]


def test_long_cells_are_cut_with_an_ellipsis_unless_wide() -> None:
    reason = "the lease of attempt 1 expired: worker w-1 neither renewed it " + "x" * 100
    rows = [("RunRequeued", reason)]
    narrow = table(("EVENT", "REASON"), rows)
    assert ELLIPSIS in narrow and reason not in narrow
    assert max(len(line) for line in narrow.splitlines()) <= len("RunRequeued") + 2 + TEXT_LIMIT
    assert reason in table(("EVENT", "REASON"), rows, wide=True)
    assert clip("a\nb", 10) == "a b"
    assert clip("abcdef", 4) == "abc" + ELLIPSIS
    assert table(("EVENT", "WORKER"), [("x", "w" * 100)]).endswith("w" * 100)  # not free text


def test_a_requeue_shows_its_reason_first() -> None:
    detail = {"attempt": 1, "last_renewal_at": "2026-01-01T00:00:00", "reason": "lease expired"}
    assert detail_text(detail).startswith("lease expired {")
    line = TimelineLine(
        version=3,
        at=datetime(2026, 1, 1, tzinfo=UTC),
        event_type="RunRequeued",
        attempt=1,
        worker_id="w-1",
        trace_id=None,
        actor=None,
        detail=detail,
    )
    assert "RunRequeued" in render_timeline([line]) and "lease expired" in render_timeline([line])


def beat(now: datetime, *, updated_s: float, failures: int, error: str | None) -> HeartbeatRow:
    return HeartbeatRow(
        "reaper",
        "__platform__",
        "platform",
        10,
        now - timedelta(seconds=30),
        now - timedelta(hours=2) if error else None,
        error,
        failures,
        "h",
        7,
        now - timedelta(seconds=updated_s),
        now,
    )


def test_a_fast_loop_is_not_stale_while_its_heartbeat_writes_are_throttled() -> None:
    """A loop every 0.2 s writes its row at most once a second (MIN_WRITE_INTERVAL_S): five
    cycles are 1 s, so the rule allows for the throttle (seen: ``loops list`` said stopped
    for a healthy relay loop between two writes)."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fast = dataclasses.replace(beat(now, updated_s=1.5, failures=0, error=None), interval_s=0.2)
    assert stale_after_s(0.2) == 0.2 * LOOP_STALE_INTERVALS + MIN_WRITE_INTERVAL_S
    assert loop_state(fast, now) == "ok"
    late = dataclasses.replace(fast, updated_at=now - timedelta(seconds=2.1))
    assert loop_state(late, now) == "stopped"
    detail, _fix = loop_problem(
        {"host": "h", "pid": 7, "interval_s": 0.2, "heartbeat_age": 1.5, "age": 9.0}
        | {"consecutive_failures": 3, "last_error": "OSError: x"}
    )
    assert detail.startswith("failing")  # the process still reports: failing, not stopped


def test_loops_list_separates_the_state_now_from_the_last_error() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    healthy = beat(now, updated_s=5, failures=0, error="OSError: an old one")
    assert loop_state(healthy, now) == "ok"
    assert loop_state(beat(now, updated_s=5, failures=3, error="OSError: x"), now) == "failing"
    assert loop_state(beat(now, updated_s=600, failures=0, error=None), now) == "stopped"
    [line] = listing([], [], [healthy], now)
    assert line.state == "ok" and line.last_error_at == "2h00m ago"
    text = render([line])
    header, row = text.splitlines()
    assert "STATE" in header and "LAST ERROR" in header
    assert " ok " in row and "(2h00m ago) OSError: an old one" in row
