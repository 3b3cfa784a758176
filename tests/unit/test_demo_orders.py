"""The demo's orders phase (awooop/demo/orders_phase.py) where psycopg is not installed: it says
so and why, places nothing, and its check is reported skipped, not failed; a problem it found
fails the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from awooop.demo import orders_phase
from awooop.demo.orders_phase import INSTALL, OrdersPhase, expected_totals
from awooop.demo.provision import Provisioned
from awooop.demo.summary import Summary, report

NOWHERE = Provisioned("postgresql://nobody@127.0.0.1:1/none", "redis://127.0.0.1:1/0", "p", "-")
ORDERS_CHECK = "orders from a psycopg service"


async def test_without_psycopg_the_phase_says_so_and_its_check_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(orders_phase, "psycopg_missing", lambda: True)
    phase = OrdersPhase(NOWHERE, tmp_path)
    try:
        await phase.orders_phase()  # nothing to connect to: it must not try
    finally:
        await phase.http.aclose()
    out = capsys.readouterr().out
    assert "phase 6 skipped: psycopg is not installed: pip install 'awooop[psycopg]'" in out
    assert phase.summary.orders_skipped == INSTALL
    assert phase.summary.orders_problems is None
    report(phase.summary)
    lines = capsys.readouterr().out.splitlines()
    assert f"orders:             {INSTALL}" in lines
    [check] = [line for line in lines if ORDERS_CHECK in line]
    assert check.strip().startswith("[skipped]")


def passing(**orders: Any) -> Summary:
    """A summary whose every other check passes."""
    return Summary(
        states={"COMPLETED": 3},
        max_completions=1,
        journal_ok=True,
        stale_calls=0,
        approved="COMPLETED",
        expired="FAILED E-APPROVAL-002",
        triage_problems=[],
        verify_exit=0,
        doctor_exit=0,
        **orders,
    )


def test_a_skipped_orders_check_passes_the_summary_and_a_problem_fails_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert report(passing(orders="3 customers' totals", orders_problems=[]))
    assert report(passing(orders_skipped=INSTALL))
    problem = "orders: not one event per placement and cancellation"
    assert not report(passing(orders_problems=[problem]))
    out = capsys.readouterr().out
    assert f"  problem: {problem}" in out
    assert [line.split("]")[0].strip() for line in out.splitlines() if ORDERS_CHECK in line] == [
        "[ok",
        "[skipped",
        "[FAIL",
    ]


def test_the_expected_totals_leave_the_cancelled_order_out() -> None:
    assert expected_totals() == [("ann", 2, 2050), ("bob", 1, 4200), ("cy", 1, 999)]
