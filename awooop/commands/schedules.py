"""``awooop schedules``: a project's cron schedules, each starting a run of a contract.

    awooop schedules create PROJECT --cron "0 3 * * *" --timezone Europe/Madrid --contract C
                            --input JSON [--catch-up latest|all|skip] [--catch-up-window 1h]
                            [--overlap skip|allow|cancel_previous] [--jitter 30s] [--json]
    awooop schedules list [--project P] [--json] [--wide]
    awooop schedules update PROJECT SCHEDULE_ID [--cron ...] [--timezone ...] [--contract ...]
                            [--input JSON] [--catch-up ...] [--catch-up-window ...]
                            [--overlap ...] [--jitter ...] [--json]
    awooop schedules show|pause|resume|delete PROJECT SCHEDULE_ID [--json]

``create`` checks everything before it writes (a bad cron E-SCHEDULE-001, an unknown time
zone E-SCHEDULE-002, a bad policy or duration E-SCHEDULE-003, a bad contract or input
E-INPUT-001, a project at its bound E-SCHEDULE-005) and prints the new schedule's id and its
next fire time. The ``schedules`` loop (``awooop loops run``, ``awooop up``) starts one run per
fire time through intake, with the key ``schedule:{id}:{fire time}``. ``show`` prints the
schedule and its next five fire times in its time zone; ``pause`` stops its fires, ``resume``
starts them again from the next fire time after now (nothing of the paused time is caught
up); ``update`` changes what it is given and keeps the rest (its id, counters and pause too;
checked like ``create``; when it fires at other times, from its first fire time after now);
``delete`` drops it (its runs stay). Who acted is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import msgspec

from awooop.commands.output import add_wide, answer, table, to_json, when
from awooop.commands.projects_db import in_platform, in_project, project_or_all
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.ingest.credentials import check_project_id
from awooop.schedules import cron, rules, store

UPCOMING = 5


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "schedules", help="cron schedules: a run of a contract at every fire time"
    )
    sub = parser.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")

    create = sub.add_parser("create", help="a new schedule of a project")
    create.add_argument("project", metavar="PROJECT", help="the project")
    create.add_argument("--cron", required=True, help='five fields, e.g. "30 2 * * *"')
    create.add_argument("--timezone", required=True, help="an IANA time zone, e.g. Europe/Madrid")
    create.add_argument("--contract", required=True, help="the runs' agent contract")
    create.add_argument("--input", required=True, help="the runs' input, as JSON")
    create.add_argument(
        "--catch-up",
        default=rules.CatchUp.LATEST.value,
        help="after an outage: latest (default), all (within the window), skip",
    )
    create.add_argument(
        "--catch-up-window", default="1h", help="how far back a catch-up reaches (default 1h)"
    )
    create.add_argument(
        "--overlap",
        default=rules.Overlap.SKIP.value,
        help="while the previous run is unfinished: skip (default), allow, cancel_previous",
    )
    create.add_argument("--jitter", default="0", help="a delay per fire time in [0, J), e.g. 30s")
    create.add_argument("--json", action="store_true", help="the schedule as JSON")
    create.set_defaults(run=create_schedule)

    change = sub.add_parser("update", help="change a schedule in place")
    change.add_argument("project", metavar="PROJECT", help="the project")
    change.add_argument("schedule_id", metavar="SCHEDULE_ID", help="the schedule's id")
    for flag, what in (
        ("--cron", "five fields"),
        ("--timezone", "an IANA time zone"),
        ("--contract", "the runs' agent contract"),
        ("--input", "the runs' input, as JSON"),
        ("--catch-up", "latest, all or skip"),
        ("--catch-up-window", "how far back a catch-up reaches"),
        ("--overlap", "skip, allow or cancel_previous"),
        ("--jitter", "a delay per fire time in [0, J)"),
    ):
        change.add_argument(flag, default=None, help=what)
    change.add_argument("--json", action="store_true", help="the schedule as JSON")
    change.set_defaults(run=update_schedule)

    listing = sub.add_parser("list", help="the schedules, by project")
    listing.add_argument("--project", default=None, help="only this project's")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(listing)
    listing.set_defaults(run=list_schedules)

    for name, what, run in (
        ("show", "a schedule and its next fire times", show_schedule),
        ("pause", "a schedule fires nothing until resumed", pause_schedule),
        ("resume", "a paused schedule fires again from its next fire time", resume_schedule),
        ("delete", "drop a schedule (its runs stay)", delete_schedule),
    ):
        one = sub.add_parser(name, help=what)
        one.add_argument("project", metavar="PROJECT", help="the project")
        one.add_argument("schedule_id", metavar="SCHEDULE_ID", help="the schedule's id")
        one.add_argument("--json", action="store_true", help="the schedule as JSON")
        one.set_defaults(run=run)


def _input(text: str) -> Any:
    try:
        return msgspec.json.decode(text.encode())
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"--input is not JSON: {exc}") from None


def describe(s: store.Schedule) -> str:
    state = "paused" if s.paused else f"next {cron.local_text(s.next_fire_at, s.timezone)}"
    return f"schedule {s.schedule_id} of {s.project_id}: {s.cron} ({s.timezone}), {state}"


async def create_schedule(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    definition = rules.define(  # before connecting: nothing is written on bad input
        cron_text=args.cron,
        timezone=args.timezone,
        contract_id=args.contract,
        input=_input(args.input),
        catch_up=args.catch_up,
        catch_up_window=args.catch_up_window,
        overlap=args.overlap,
        jitter=args.jitter,
        min_interval_s=settings.schedule_min_interval_s,
    )
    made = await in_project(
        settings,
        project_id,
        lambda conn: store.create(
            conn,
            project_id,
            definition,
            actor=cli_actor(),
            now=datetime.now(UTC),
            limit=settings.schedules_per_project,
        ),
    )
    return answer(args, store.view(made), describe(made))


async def update_schedule(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    schedule_id = store.parse_schedule_id(args.schedule_id)
    changes: dict[str, object] = {
        name: getattr(args, name) for name in store.CHANGEABLE if getattr(args, name) is not None
    }
    if "input" in changes:
        changes["input"] = _input(str(changes["input"]))
    changed = await in_project(
        settings,
        project_id,
        lambda conn: store.update(
            conn,
            project_id,
            schedule_id,
            changes,
            actor=cli_actor(),
            now=datetime.now(UTC),
            min_interval_s=settings.schedule_min_interval_s,
        ),
    )
    return answer(args, store.view(changed, UPCOMING), describe(changed))


async def list_schedules(settings: Settings, args: argparse.Namespace) -> int:
    project_id = project_or_all(args.project)
    found = await in_platform(settings, lambda conn: store.listing(conn, project_id))
    if args.json:
        print(to_json([store.view(s) for s in found]))
        return 0
    header = ["PROJECT", "SCHEDULE", "CRON", "TIMEZONE", "CONTRACT", "CATCH_UP", "OVERLAP"]
    header += ["JITTER", "NEXT_FIRE", "STATE", "LAST", "FIRES", "SKIPPED"]
    rows = [
        [
            s.project_id,
            str(s.schedule_id),
            s.cron,
            s.timezone,
            s.contract_id,
            f"{s.catch_up}/{s.catch_up_window_s}s",
            s.overlap,
            f"{s.jitter_s}s",
            cron.local_text(s.next_fire_at, s.timezone),
            "paused" if s.paused else "active",
            s.last_outcome or "-",
            str(s.fires),
            str(s.skipped),
        ]
        for s in found
    ]
    print(table(header, rows, wide=args.wide))
    return 0


async def show_schedule(settings: Settings, args: argparse.Namespace) -> int:
    project_id, schedule_id = (
        check_project_id(args.project),
        store.parse_schedule_id(args.schedule_id),
    )
    found = await in_project(settings, project_id, lambda c: store.get(c, project_id, schedule_id))
    view = store.view(found, UPCOMING)
    if args.json:
        print(to_json(view))
        return 0
    rows = [
        [k, "-" if v is None else v if isinstance(v, str) else to_json(v)]
        for k, v in view.items()
        if k != "upcoming"
    ]
    rows += [["upcoming", t] for t in view["upcoming"]]
    rows += [["last_fire", when(found.last_fire_at)]]
    print(table(["FIELD", "VALUE"], rows))
    return 0


async def pause_schedule(settings: Settings, args: argparse.Namespace) -> int:
    project_id, schedule_id = (
        check_project_id(args.project),
        store.parse_schedule_id(args.schedule_id),
    )
    paused = await in_project(
        settings, project_id, lambda c: store.pause(c, project_id, schedule_id, actor=cli_actor())
    )
    return answer(args, store.view(paused), describe(paused))


async def resume_schedule(settings: Settings, args: argparse.Namespace) -> int:
    project_id, schedule_id = (
        check_project_id(args.project),
        store.parse_schedule_id(args.schedule_id),
    )
    resumed = await in_project(
        settings,
        project_id,
        lambda c: store.resume(
            c, project_id, schedule_id, actor=cli_actor(), now=datetime.now(UTC)
        ),
    )
    return answer(args, store.view(resumed), describe(resumed))


async def delete_schedule(settings: Settings, args: argparse.Namespace) -> int:
    project_id, schedule_id = (
        check_project_id(args.project),
        store.parse_schedule_id(args.schedule_id),
    )
    gone = await in_project(
        settings, project_id, lambda c: store.delete(c, project_id, schedule_id, actor=cli_actor())
    )
    return answer(args, store.view(gone), f"schedule {gone.schedule_id} of {project_id}: deleted")
