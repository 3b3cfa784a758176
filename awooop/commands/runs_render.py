"""``awooop runs``: what it prints (pure: tables and JSON views of runs, timelines, model
calls and bulk operations)."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from awooop.commands.output import table, to_json, when
from awooop.eventlog.state import RunState
from awooop.projections import failures, model_calls, timeline
from awooop.runs import bulk, children, reads
from awooop.runs.blocked import BlockedOn
from awooop.schedules import rules


def state_view(state: RunState) -> dict[str, Any]:
    """The run's fields (empty input, steps and result left out), and for a run a schedule
    started, ``schedule``: its schedule and fire time."""
    view = {
        k: v
        for k, v in msgspec.to_builtins(state).items()
        if k not in ("input", "saga_steps", "result") or v
    }
    scheduled = rules.scheduled_by(state.provider_event_id)
    if scheduled is not None:
        view["schedule"] = scheduled
    return view


def state_json(state: RunState) -> str:
    return to_json(state_view(state))


def render_state(state: RunState) -> str:
    view = state_view(state)
    return table(
        ("FIELD", "VALUE"),
        [
            (k, "-" if v is None else v if isinstance(v, str) else to_json(v))
            for k, v in view.items()
        ],
    )


def render_family(family: children.Family) -> str:
    """Pure: a run's parent (if it is a child run) and its children, with their states."""
    lines = []
    if family.parent_run_id is not None:
        lines.append(f"parent: {family.parent_run_id} ({family.parent_status or 'not found'})")
    if family.children_total:
        shown = len(family.children)
        more = f", the oldest {shown} shown" if shown < family.children_total else ""
        lines.append(
            f"children: {family.children_total} ({family.children_finished} finished{more})"
        )
        rows = [
            (str(c.run_id), c.key, c.contract_id or "-", c.status, c.failure_code or "-")
            for c in family.children
        ]
        lines.append(table(("RUN_ID", "KEY", "CONTRACT", "STATUS", "CODE"), rows))
    return "\n".join(lines)


def detail_text(detail: dict[str, Any]) -> str:
    """Pure: an event's detail for the timeline, its ``reason`` first (a requeue, a failure,
    a cancel: why, before the rest)."""
    reason = detail.get("reason")
    rest = {k: v for k, v in detail.items() if k != "reason"}
    parts = [str(reason)] if reason else []
    if rest:
        parts.append(to_json(rest))
    return " ".join(parts)


def render_timeline(lines: list[timeline.TimelineLine], *, wide: bool = False) -> str:
    header = ("VERSION", "AT", "EVENT", "ATTEMPT", "WORKER", "TRACE_ID", "ACTOR", "DETAIL")
    rows = [
        (
            str(ln.version),
            when(ln.at),
            ln.event_type,
            str(ln.attempt),
            ln.worker_id or "-",
            ln.trace_id or "-",
            ln.actor or "-",
            detail_text(ln.detail) if ln.detail else "",
        )
        for ln in lines
    ]
    return table(header, rows, wide=wide)


def render_attempts(lines: list[timeline.AttemptLine], *, wide: bool = False) -> str:
    """Pure: a run's attempts, each with the worker and the handler version that ran it."""
    rows = [
        (str(a.attempt), when(a.claimed_at), a.worker_id or "-", a.handler_version or "-")
        for a in lines
    ]
    return table(("ATTEMPT", "CLAIMED", "WORKER", "HANDLER_VERSION"), rows, wide=wide)


def hash_cell(body_hash: str | None, *, wide: bool) -> str:
    if body_hash is None:
        return "-"
    return body_hash if wide else model_calls.short_hash(body_hash)


def render_model_calls(calls: list[model_calls.ModelCallLine], *, wide: bool = False) -> str:
    """Pure: a run's model calls as a table (revision ``default``: the default policy; the
    body hash cut to 12 hex digits unless ``wide``)."""
    header = (
        "VERSION",
        "STARTED",
        "ATTEMPT",
        "MODEL",
        "CONTRACT",
        "REVISION",
        "BODY_HASH",
        "DURATION_MS",
        "OUTCOME",
        "TOKENS_IN",
        "TOKENS_OUT",
        "TRACE_ID",
        "REASON",
    )
    rows = [
        (
            str(c.version),
            when(c.started_at),
            str(c.attempt),
            c.model or "-",
            f"{c.contract_family}/{c.contract_id}",
            "default" if c.revision_id is None else str(c.revision_id),
            hash_cell(c.body_hash, wide=wide),
            f"{c.duration_ms:.1f}",
            outcome_cell(c),
            "-" if c.input_tokens is None else str(c.input_tokens),
            "-" if c.output_tokens is None else str(c.output_tokens),
            c.trace_id or "-",
            c.reason,
        )
        for c in calls
    ]
    return table(header, rows, wide=wide)


def outcome_cell(c: model_calls.ModelCallLine) -> str:
    """Pure: a call's outcome, with its try when it was tried again or is a retry."""
    if c.try_number == 1 and c.next_try_in_s is None:
        return c.outcome
    then = "" if c.next_try_in_s is None else f", next in {c.next_try_in_s:.2f} s"
    return f"{c.outcome} (try {c.try_number}{then})"


def render_call_texts(calls: list[model_calls.ModelCallLine]) -> str:
    """Pure: each call's prompt and answer (as recorded: capped), under its version."""
    blocks = []
    for c in calls:
        if not (c.prompt or c.answer):
            continue
        blocks.append(
            f"call {c.version} prompt:\n{_indented(c.prompt)}\n"
            f"call {c.version} answer:\n{_indented(c.answer or '-')}"
        )
    return "\n".join(blocks)


def tokens_line(totals: model_calls.TokenTotals) -> str:
    """Pure: a run's token totals in words."""
    line = f"tokens: {totals.input_tokens} in, {totals.output_tokens} out"
    if totals.counted < totals.calls:
        line += f" ({totals.counted} of {totals.calls} calls reported counts)"
    return line


def render_failures(lines: list[failures.FailureLine]) -> str:
    """Pure: a run's failed attempts, oldest first, each with its step and traceback."""
    blocks = []
    for f in lines:
        who = f"attempt {f.attempt}" if f.attempt else "the platform"
        how = "was given back (retried)" if f.retried else "failed"
        where = f" in step {f.step}" if f.step else ""
        head = f"{who} {how} at {when(f.at)}{where}: {f.code or ''} {f.reason}".replace("  ", " ")
        blocks.append(head + (f"\n{_indented(f.traceback.rstrip())}" if f.traceback else ""))
    return "\n".join(blocks)


def _indented(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines()) or "  "


def render_runs(
    runs: list[reads.RunSummary],
    blocked: dict[uuid.UUID, BlockedOn | None] | None = None,
    *,
    wide: bool = False,
) -> str:
    header = (
        "RUN_ID",
        "PROJECT",
        "STATUS",
        "BLOCKED_ON",
        "ATTEMPTS",
        "WORKER",
        "FAILURE",
        "CREATED",
        "UPDATED",
    )
    found = blocked or {}
    rows = [
        (
            str(r.run_id),
            r.project_id,
            r.status,
            reason_of(found.get(r.run_id)),
            f"{r.attempt_count}/{r.max_attempts}",
            r.worker_id or "-",
            r.failure_code or "-",
            when(r.created_at),
            when(r.updated_at),
        )
        for r in runs
    ]
    return table(header, rows, wide=wide)


def reason_of(blocked: BlockedOn | None) -> str:
    return "-" if blocked is None else blocked.reason.value


def runs_json(
    runs: list[reads.RunSummary], blocked: dict[uuid.UUID, BlockedOn | None]
) -> list[dict[str, Any]]:
    """Pure: the rows of ``runs list --json``, each with its ``blocked_on`` object."""
    return [
        {**msgspec.to_builtins(r), "blocked_on": msgspec.to_builtins(blocked.get(r.run_id))}
        for r in runs
    ]


def render_operation(op: bulk.Operation) -> str:
    view = {k: v for k, v in msgspec.to_builtins(op).items() if k not in ("errors",)}
    rows = [
        (k, "-" if v is None else v if isinstance(v, str) else to_json(v)) for k, v in view.items()
    ]
    rows += [("refused run", f"{e['run_id']} {e['code']} {e['message']}") for e in op.errors]
    return table(("FIELD", "VALUE"), rows)


def progress_line(op: bulk.Operation) -> str:
    done = "retried" if op.kind == "retry" else "cancelled"
    return (
        f"batch {op.batches}: {op.scanned} of {op.expected} looked at, "
        f"{op.changed} {done}, {op.refused} refused"
    )
