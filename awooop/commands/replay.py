"""``awooop replay PROJECTION [--project P] [--verify] [--swap]``: rebuild a projection from the
Postgres event log (see :mod:`awooop.projections.replay`).

- ``--verify`` (the default): rebuild into a shadow table and report rows missing, extra and
  different (a few examples each); exit 0 only when there is no difference.
- ``--swap``: rebuild, report, then swap the rebuilt table in atomically while writers keep
  running (with ``--project``: repair that project's rows in place). Exit 0 when the swap is
  done, unless ``--verify`` was given too and there was a difference (then 1, after the repair).
- ``--tail N`` (run_state only): verify just the runs the last N events touched, in one
  snapshot, at a cost that depends on N and not on the size of the log; exit 1 on a difference.
- ``--projection MODULE:OBJECT``: register a service's projection (as ``AWOOOP_PROJECTIONS``
  and the ``awooop.projections`` entry points do) so that PROJECTION may name it; its
  rebuild applies its events with its own ``apply`` into the shadow, in one process.
- ``--from-archive DIR``: read the events of archived (dropped) partitions from their files in
  DIR (each checked against its checksum and the catalogue) before the live log, so the
  projection is rebuilt from the beginning. Without it, runs whose first events are archived
  start from their snapshots; other projections then refuse with E-REPLAY-005.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.projections import registry
from awooop.projections.replay import default_workers, replay
from awooop.projections.sources import parse_sources
from awooop.projections.tail_verify import verify_tail


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="rebuild a projection from the event log: verify it or swap it in",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "projection",
        metavar="PROJECTION",
        help="one of: " + ", ".join(registry.BUILT_IN) + ", or a service's registered projection",
    )
    parser.add_argument(
        "--projection",
        dest="sources",
        action="append",
        default=[],
        metavar="MODULE:OBJECT",
        help="register a service's projection (repeatable; see docs/consumers.md)",
    )
    parser.add_argument("--project", metavar="P", help="only this project's rows")
    parser.add_argument("--verify", action="store_true", help="report differences (default)")
    parser.add_argument("--swap", action="store_true", help="swap the rebuilt table in")
    parser.add_argument(
        "--tail",
        type=int,
        default=None,
        metavar="N",
        help="run_state only: verify the runs the last N events touched",
    )
    parser.add_argument(
        "--from-archive",
        metavar="DIR",
        type=Path,
        default=None,
        help="read the archived partitions' files in DIR before the live log",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="bulk pass worker processes (default: half the CPUs, at least 1)",
    )
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    registry.use_sources([*parse_sources(settings.projections), *args.sources])
    projection = registry.get(args.projection)
    if args.workers is not None and args.workers < 1:
        raise InvalidInputError("--workers must be at least 1")
    verify = args.verify or not args.swap
    if args.tail is not None:
        return await tail(settings, args)
    report = await replay(
        settings.database_url,
        projection,
        project=args.project,
        verify=True,
        swap=args.swap,
        progress_stream=sys.stderr,
        workers=args.workers or default_workers(),
        archive_dir=args.from_archive,
    )
    for line in report.lines():
        print(line)
    return 1 if verify and report.differences else 0


async def tail(settings: Settings, args: argparse.Namespace) -> int:
    if args.projection != "run_state":
        raise InvalidInputError("--tail verifies run_state only")
    if args.swap or args.project or args.from_archive is not None:
        raise InvalidInputError("--tail only verifies: no --swap, --project or --from-archive")
    if args.tail < 1:
        raise InvalidInputError("--tail must be at least 1")
    report = await verify_tail(settings.database_url, args.tail)
    for line in report.lines():
        print(line)
    return 1 if report.diff.total else 0
