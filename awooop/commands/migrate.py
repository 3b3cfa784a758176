"""``awooop migrate``: create the database if missing and apply pending migrations, phase by
phase (awooop/core/migration_phases.py).

- ``awooop migrate`` applies every pending file, but holds back a contract step (and the files
  after it) while a live process runs a release it would stop: it then exits 1 with
  E-MIGRATE-004 naming them, after applying the expand steps before it;
- ``--phase expand`` applies the pending files up to the first contract step, the step before
  the processes are rolled;
- ``--check`` writes nothing: it prints each pending file with its phase and the live
  processes a contract step would stop, and exits 1 (E-MIGRATE-004) when there are any.
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.core.config import Settings
from awooop.core.errors import MigrationPhaseError
from awooop.core.migrate import migrate_in_phases, plan_pending
from awooop.core.migration_phases import LiveProcess, Phase, Plan, Step


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply database migrations (expand, then contract)",
        description="Apply pending migrations in order. A contract migration is held back "
        "while a live process runs a release it would stop.",
    )
    parser.add_argument(
        "--phase",
        choices=("expand", "all"),
        default="all",
        help="expand: stop before the first contract migration (before rolling processes); "
        "all (default): apply both phases",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing: list pending migrations with their phase, and the live processes "
        "a contract migration would stop (exit 1 if any)",
    )
    parser.set_defaults(run=run)


def describe(step: Step) -> str:
    if step.phase is Phase.CONTRACT:
        return f"{step.name}  contract (schema floor -> {step.floor})"
    return f"{step.name}  expand"


def describe_process(process: LiveProcess) -> str:
    return f"{process.kind} {process.host} pid {process.pid} (release {process.release})"


def stopped_message(chosen: Plan) -> str:
    first = chosen.held[0]
    names = "; ".join(describe_process(p) for p in chosen.stopped_by_held)
    return (
        f"{first.name} is a contract migration: it would stop {len(chosen.stopped_by_held)} "
        f"live process(es) of an older release: {names}. Replace them with this release's, "
        "then run `awooop migrate` again"
    )


def report(chosen: Plan, verb: str) -> list[str]:
    lines = [f"{verb} {len(chosen.apply)} migration(s)"]
    lines += [f"  {describe(step)}" for step in chosen.apply]
    if chosen.held:
        lines.append(f"held back {len(chosen.held)} migration(s)")
        lines += [f"  {describe(step)}" for step in chosen.held]
    return lines


async def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.check:
        chosen = await plan_pending(settings.database_url)
        print("\n".join(report(chosen, "would apply")))
        print(
            "processes of releases before 0121_process_registry.sql do not register: "
            "the check cannot see them"
        )
        if chosen.breaks_fleet:
            raise MigrationPhaseError(stopped_message(chosen))
        return 0
    outcome = await migrate_in_phases(settings.database_url, expand_only=args.phase == "expand")
    chosen = outcome.plan
    print("\n".join(report(chosen, "applied")))
    if chosen.breaks_fleet:
        raise MigrationPhaseError(stopped_message(chosen))
    return 0
