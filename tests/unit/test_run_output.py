"""Streamed run output, the pure parts: coalescing into rows, byte offsets and the limit on
character boundaries, where a reader resumes, what a follower is told, the events' encoding,
the stream caps, and the test kit's view of what a handler emitted."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.errors import (
    InvalidInputError,
    OutputStreamsExceededError,
    ServerOutputStreamsExceededError,
    UnstorableValueError,
)
from awooop.eventlog.state import RunStatus
from awooop.http.output_streams import StreamSlots, encoded
from awooop.runs import output_log
from awooop.runs.output_rules import (
    Abandoned,
    Chunk,
    Coalescer,
    End,
    Follow,
    Page,
    fit,
    resume_after,
    split_utf8,
    utf8_len,
)
from awooop.testing import HandlerKit
from awooop.worker.context import RunContext
from awooop.worker.output import checked

AT = datetime(2026, 1, 1, tzinfo=UTC)


def chunk(seq: int, attempt: int = 1, text: str = "x", *, truncated: bool = False) -> Chunk:
    return Chunk(seq=seq, attempt=attempt, offset=0, end=0, text=text, at=AT, truncated=truncated)


def page(
    status: str, attempt: int, *rows: Chunk, more: bool = False, before: Chunk | None = None
) -> Page:
    return Page(
        status=RunStatus(status), attempt=attempt, rows=list(rows), more=more, before=before
    )


# --- offsets and the limit -----------------------------------------------------------------------


def test_a_cut_never_splits_a_character() -> None:
    text = "aé€😀b"  # 1 + 2 + 3 + 4 + 1 bytes
    assert utf8_len(text) == 11
    assert split_utf8(text, 11) == (text, "")
    assert split_utf8(text, 3) == ("aé", "€😀b")
    assert split_utf8(text, 5) == ("aé", "€😀b")  # € does not fit whole: it stays behind
    assert split_utf8(text, 6) == ("aé€", "😀b")
    assert split_utf8(text, 0) == ("", text)
    for n in range(12):
        head, rest = split_utf8(text, n)
        assert head + rest == text and utf8_len(head) <= n


def test_the_limit_keeps_what_fits_and_says_the_rest_was_cut() -> None:
    assert fit("hello", 0, 10) == ("hello", False)
    assert fit("hello", 7, 10) == ("hel", True)
    assert fit("hello", 10, 10) == ("", True)
    assert fit("é€", 8, 10) == ("é", True)
    assert fit("", 10, 10) == ("", False)


# --- coalescing ------------------------------------------------------------------------------


def test_the_first_text_goes_at_once_then_at_most_every_interval() -> None:
    c = Coalescer(interval_s=0.1, flush_bytes=16)
    assert c.due_in(0.0) is None  # nothing waits
    c.add("a")
    assert c.due_in(0.0) == 0.0  # the attempt's first text: no delay to its first token
    assert c.take(0.0) == "a" and c.pending == [] and c.pending_bytes == 0
    for token in ("b", "c", "d"):
        c.add(token)
    assert c.due_in(0.05) == pytest.approx(0.05)  # coalesced until the interval passed
    assert c.due_in(0.05, urgent=True) == 0.0  # the attempt ends: now
    assert c.due_in(0.2) == 0.0
    assert c.take(0.2) == "bcd"  # three emits, one row
    c.add("")
    assert c.due_in(0.25) is None  # an empty emit is nothing


def test_enough_bytes_flush_before_the_interval_and_a_row_holds_at_most_flush_bytes() -> None:
    c = Coalescer(interval_s=10.0, flush_bytes=8)
    c.add("0")
    c.take(0.0)
    c.add("abcd")
    assert c.due_in(0.001) == pytest.approx(10.0 - 0.001)
    c.add("éé€")  # 4 + 2 + 2 + 3 = 11 bytes: past flush_bytes
    assert c.due_in(0.001) == 0.0
    rows = []
    while c.pending:
        rows.append(c.take(0.002))
    assert rows == ["abcdéé", "€"]  # cut on a character boundary, nothing lost, in order
    assert all(utf8_len(r) <= 8 for r in rows)
    c.add("x" * 20)
    c.clear()
    assert c.due_in(1.0) is None and c.pending_bytes == 0


def test_a_row_below_one_character_still_makes_progress() -> None:
    c = Coalescer(interval_s=0.1, flush_bytes=2)
    c.add("😀a")
    assert [c.take(0.0), c.take(0.0)] == ["😀", "a"]


# --- resuming --------------------------------------------------------------------------------


def test_last_event_id_wins_over_after_and_bad_positions_are_refused() -> None:
    assert resume_after(None, None) == 0
    assert resume_after("", "") == 0
    assert resume_after(None, "7") == 7
    assert resume_after("12", "7") == 12  # a reconnecting EventSource keeps its first URL
    assert resume_after(" 3 ", None) == 3
    assert resume_after("  ", "5") == 5
    assert resume_after(str(2**31 - 1), None) == 2**31 - 1
    for bad in ("-1", "1.5", "abc", "٣", str(2**31), "9" * 40, "0x10"):
        with pytest.raises(InvalidInputError) as refused:
            resume_after(bad, None)
        assert refused.value.code == "E-INPUT-001"
    with pytest.raises(InvalidInputError, match="after"):
        resume_after(None, "x")


# --- following -------------------------------------------------------------------------------


def test_a_follower_is_told_each_row_once_in_order_then_the_end() -> None:
    f = Follow()
    assert f.take(page("RUNNING", 1, chunk(1), chunk(2), more=True)) == [chunk(1), chunk(2)]
    # A read that overlaps what was told tells only what is new; the end waits for every row.
    assert f.take(page("COMPLETED", 1, chunk(2), chunk(3), more=True)) == [chunk(3)]
    assert not f.done
    assert f.take(page("COMPLETED", 1, chunk(4))) == [
        chunk(4),
        End(status="COMPLETED", attempt=1),
    ]
    assert f.done and f.position == 4


def test_an_abandoned_attempt_is_told_once_when_a_later_one_moves_past_it() -> None:
    f = Follow()
    f.take(page("RUNNING", 1, chunk(1, 1), chunk(2, 1)))
    assert f.take(page("PENDING", 1)) == []  # attempt 1 died: not known until a new claim
    # Attempt 2 took the run: attempt 1's output is abandoned before attempt 2 wrote any.
    assert f.take(page("RUNNING", 2)) == [Abandoned(attempt=1, by=2)]
    assert f.take(page("RUNNING", 2, chunk(3, 2))) == [chunk(3, 2)]  # not told twice
    # Attempt 3 wrote at once: told before its first row; the end names the last attempt.
    assert f.take(page("FAILED", 3, chunk(4, 3))) == [
        Abandoned(attempt=2, by=3),
        chunk(4, 3),
        End(status="FAILED", attempt=3),
    ]


def test_a_resumed_follower_knows_the_attempt_it_resumes_after() -> None:
    f = Follow(after=2)
    told = f.take(page("COMPLETED", 2, chunk(3, 2), before=chunk(2, 1)))
    assert told == [Abandoned(attempt=1, by=2), chunk(3, 2), End(status="COMPLETED", attempt=2)]
    # Waiting for approval is not the end; a cancelled run is.
    g = Follow()
    assert g.take(page("WAITING_APPROVAL", 1, chunk(1))) == [chunk(1)] and not g.done
    assert g.take(page("CANCELLED", 1)) == [End(status="CANCELLED", attempt=1)]


def test_the_events_each_have_their_id_and_one_line_of_json() -> None:
    row = Chunk(seq=5, attempt=2, offset=10, end=17, text="a\nb\n\nc", at=AT)
    text = encoded(row).decode()
    assert text.startswith("id: 5\nevent: output\ndata: ") and text.endswith("\n\n")
    data = msgspec.json.decode(text.split("data: ", 1)[1])
    assert data == {
        "seq": 5,
        "attempt": 2,
        "offset": 10,
        "end": 17,
        "text": "a\nb\n\nc",
        "at": "2026-01-01T00:00:00Z",
    }
    assert text.count("\n\n") == 1  # the newlines of the text are escaped in the JSON
    marker = encoded(Chunk(seq=6, attempt=2, offset=17, end=17, text="", at=AT, truncated=True))
    assert marker == b'id: 6\nevent: truncated\ndata: {"seq":6,"attempt":2,"offset":17}\n\n'
    assert (
        encoded(Abandoned(attempt=1, by=2)) == b'event: abandoned\ndata: {"attempt":1,"by":2}\n\n'
    )
    end = encoded(End(status="COMPLETED", attempt=2))
    assert end == b'event: end\ndata: {"status":"COMPLETED","attempt":2}\n\n'
    assert re.fullmatch(rb"(id: \d+\n)?event: \w+\ndata: [^\n]*\n\n", end)


def test_stream_caps_per_project_and_per_server() -> None:
    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    refused_before = sample("awooop_output_streams_refused_total")
    open_before = sample("awooop_output_streams")
    slots = StreamSlots(per_project=2, total=3)
    slots.take("a")
    slots.take("a")
    with pytest.raises(OutputStreamsExceededError) as refused:
        slots.take("a")
    assert (refused.value.code, refused.value.http_status) == ("E-OUTPUT-001", 429)
    slots.take("b")
    with pytest.raises(ServerOutputStreamsExceededError) as full:
        slots.take("c")
    assert (full.value.code, full.value.http_status, full.value.retry_after_s) == (
        "E-OUTPUT-002",
        429,
        5,
    )
    slots.give_back("a")
    slots.take("c")
    assert dict(slots.open) == {"a": 1, "b": 1, "c": 1}
    assert sample("awooop_output_streams_refused_total") - refused_before == 2
    assert sample("awooop_output_streams") - open_before == 3
    for project in ("a", "b", "c"):
        slots.give_back(project)
    assert sample("awooop_output_streams") == open_before and not slots.open


def test_the_notify_channel_is_the_one_the_append_statement_rings() -> None:
    assert f"pg_notify('{output_log.CHANNEL}'" in output_log.APPEND


def test_text_postgres_cannot_store_is_refused_at_the_emit() -> None:
    assert checked("ok ✓") == "ok ✓"
    for bad in ("a\x00b", "lone \ud800"):
        with pytest.raises(UnstorableValueError) as refused:
            checked(bad)
        assert refused.value.code == "E-DATA-001" and "output" in refused.value.message
    with pytest.raises(TypeError):
        checked(b"bytes")


# --- the test kit ---------------------------------------------------------------------------


async def streamed(run: RunContext) -> str:
    for token in ("Hel", "lo", ", ", "wor", "ld"):
        await run.emit_output(token)
    if run.attempt == 1 and run.input.get("crash"):
        raise ConnectionError("the model went away")  # fails attempt 1 (max_attempts 1: ends)
    return "done"


async def test_the_kit_shows_what_a_handler_emitted_by_attempt() -> None:
    result = await HandlerKit(streamed).run({})
    assert result.value == "done"
    assert result.output.text == "Hello, world" and result.output.of_attempt(1) == "Hello, world"
    assert not result.output.truncated

    async def twice(run: RunContext) -> str:
        await run.emit_output(f"attempt {run.attempt} ")
        if run.attempt == 1:
            await run.wait_for_approval("go")
        return "ok"

    kit = HandlerKit(twice)
    first = await kit.run({})
    assert first.output.text == "attempt 1 "
    kit.approve("go")
    second = await kit.resume()
    # The approved run runs the handler from the top: attempt 2 emits again.
    assert second.output.of_attempt(2) == "attempt 2 " and kit.output.text == "attempt 1 attempt 2 "


async def test_the_kit_cuts_output_at_the_limit_and_refuses_bad_text() -> None:
    small = await HandlerKit(streamed, output_max_bytes=7).run({})
    assert small.output.text == "Hello, " and small.output.truncated
    assert small.value == "done"  # truncation is no failure

    async def bad(run: RunContext) -> None:
        await run.emit_output("nul \x00")

    failed = await HandlerKit(bad).run({})
    assert failed.failure_code == "E-DATA-001" and failed.output.text == ""
