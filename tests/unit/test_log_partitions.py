"""Pure decisions of the partitioned log: which partition is due, the doctor's verdict, the
snapshot fold's gap check, and an archive file that is cut short."""

from __future__ import annotations

import gzip
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from awooop.commands.doctor_flow import partition_check
from awooop.commands.doctor_results import FAIL, OK, WARN
from awooop.core.errors import ArchiveFileError
from awooop.core.events import encode_event, run_stream_id
from awooop.eventlog import archive, archive_files
from awooop.eventlog.partitions import Partition, covered_until, due_for_archive
from awooop.eventlog.state import RunStatus, apply, encode_state
from tests.support.factories import created, event_for

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
WEEK = timedelta(days=7)


def weeks(first: datetime, count: int) -> list[Partition]:
    return [
        Partition(
            f"awooop_events_p{(first + i * WEEK):%Y%m%d}", first + i * WEEK, first + (i + 1) * WEEK
        )
        for i in range(count)
    ]


def test_only_the_oldest_partition_is_due_and_only_after_the_retention() -> None:
    parts = weeks(datetime(2026, 10, 27, tzinfo=UTC), 8)  # 10-27 .. 12-22
    due = due_for_archive(list(reversed(parts)), NOW, timedelta(days=28))
    assert due == parts[0]  # ended 11-03, 28 days before 12-01
    assert due_for_archive(parts[1:], NOW, timedelta(days=28)) is None  # 11-10 + 28 > now
    assert due_for_archive([], NOW, WEEK) is None
    assert covered_until(parts) == datetime(2026, 12, 22, tzinfo=UTC)


def test_the_doctor_fails_before_writes_would_be_refused_and_warns_of_a_late_archive() -> None:
    retention = timedelta(days=28)
    ahead = weeks(datetime(2026, 11, 24, tzinfo=UTC), 4)  # until 12-22
    assert partition_check(ahead, NOW, retention, archiving=True).status == OK
    short = weeks(datetime(2026, 11, 24, tzinfo=UTC), 2)  # until 12-08: 6.5 days
    assert partition_check(short, NOW, retention, archiving=True).status == WARN
    ending = weeks(datetime(2026, 11, 24, tzinfo=UTC), 1)  # until 12-01 00:00: already past
    check = partition_check(ending, NOW, retention, archiving=True)
    assert check.status == FAIL and "refused" in check.detail
    assert partition_check([], NOW, retention, archiving=False).status == FAIL
    late = weeks(datetime(2026, 10, 20, tzinfo=UTC), 9)  # the first ended 10-27: 35 days ago
    check = partition_check(late, NOW, retention, archiving=True)
    assert check.status == WARN and late[0].name in check.detail
    assert partition_check(late, NOW, retention, archiving=False).status == OK


def test_the_snapshot_fold_continues_a_run_and_names_a_gap() -> None:
    start = created()
    claimed = event_for("RunClaimed", apply(None, start), at=start.at)
    fold = archive.start_fold(run_stream_id(start.run_id), start.project_id, None)
    fold.add(1, 10, encode_event(start).decode())
    fold.add(2, 11, encode_event(claimed).decode())
    assert fold.problem is None and fold.state is not None
    assert fold.state.status == RunStatus.RUNNING and (fold.version, fold.position) == (2, 11)

    resumed = archive.start_fold(
        fold.stream_id, start.project_id, (2, encode_state(fold.state).decode())
    )
    assert resumed.state == fold.state
    resumed.add(4, 20, encode_event(claimed).decode())
    assert resumed.problem is not None and "version 4 where 3 was due" in resumed.problem

    other = archive.start_fold("domain/p/orders", "p", None)
    other.add(1, 5, '{"type": "Anything"}')
    assert other.problem is None and other.state is None and other.version == 1


def write_archive(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(gzip.compress(b"".join(lines)))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n")


def test_an_archive_without_its_trailer_or_with_another_count_is_refused(tmp_path: Path) -> None:
    header = (
        msgspec.json.encode(archive_files.Header(archive_files.FORMAT, "p", NOW, NOW + WEEK))
        + b"\n"
    )
    event = (
        b'{"position":1,"tx_id":9,"event_id":"6f1c2a52-0d2c-4d0e-9a51-2b4c0a6b9e11",'
        b'"stream_id":"s","version":1,"project_id":"p","event_type":"X","data":{},'
        b'"metadata":{},"recorded_at":"2026-12-01T12:00:00Z"}\n'
    )
    good = tmp_path / "good.jsonl.gz"
    write_archive(good, [header, event, b'{"end":true,"events":1}\n'])
    (read,) = archive_files.read_archive(good)
    assert read.stream_id == "s" and bytes(read.data) == b"{}"

    cut = tmp_path / "cut.jsonl.gz"
    write_archive(cut, [header, event])
    with pytest.raises(ArchiveFileError, match="truncated"):
        archive_files.read_archive(cut)
    miscounted = tmp_path / "miscounted.jsonl.gz"
    write_archive(miscounted, [header, event, b'{"end":true,"events":2}\n'])
    with pytest.raises(ArchiveFileError, match="truncated"):
        archive_files.read_archive(miscounted)
    with pytest.raises(ArchiveFileError, match="catalogue"):
        archive_files.read_archive(good, expected_sha256="0" * 64)


def test_the_doctor_fails_a_dedupe_window_before_ingest_would_be_refused() -> None:
    from awooop.commands.doctor_flow import dedupe_window_check
    from awooop.eventlog.dedupe_windows import window_of

    def windows_from(first: str, count: int) -> list[Any]:
        start = window_of(f"awooop_channel_event_dedupe_p{first}").range_from
        return [
            window_of(f"awooop_channel_event_dedupe_p{start + i * WEEK:%Y%m%d}")
            for i in range(count)
        ]

    assert dedupe_window_check(windows_from("20261130", 3), NOW).status == OK  # until 12-21
    assert dedupe_window_check(windows_from("20261130", 2), NOW).status == WARN  # until 12-14
    # Until 12-07: ingest claims the next window, so it fails from 11-30 on, i.e. now.
    check = dedupe_window_check(windows_from("20261130", 1), NOW)
    assert check.status == FAIL and "2026-11-30" in check.detail
    assert dedupe_window_check([], NOW).status == FAIL
