"""``awooop runs signal PROJECT RUN_ID NAME --payload JSON --key K [--json]``: send a signal to
a run (docs/workers.md, Waiting for an event), delivered at once when the run waits for it
(:func:`awooop.runs.signals.send`, in one tenant transaction of the project). Prints the
signal; the same key again prints the first one with ``duplicate``. A refusal (a bad name, key
or payload, a finished run, too many kept signals, no such run in the project) exits 1 with
its code and writes nothing."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from awooop.commands.output import to_json
from awooop.commands.runs_parsing import cli_actor, parse_run_id
from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError
from awooop.ingest.credentials import check_project_id
from awooop.runs import signals


def register(actions: Any) -> None:
    sub: argparse.ArgumentParser = actions.add_parser(
        "signal", help="send a signal to a run (its wait_for_event gets the payload)"
    )
    sub.add_argument("project", metavar="PROJECT", help="the run's project")
    sub.add_argument("run_id", metavar="RUN_ID", help="the run")
    sub.add_argument("name", metavar="NAME", help="the event's name")
    sub.add_argument("--payload", default="null", help="the payload, JSON (default: null)")
    sub.add_argument("--key", required=True, help="idempotency key: the same key is one signal")
    sub.add_argument("--json", action="store_true", help="JSON instead of a line")
    sub.set_defaults(run=send)


async def send(settings: Settings, args: argparse.Namespace) -> int:
    project = check_project_id(args.project)
    run_id = parse_run_id(args.run_id)
    try:
        payload = msgspec.json.decode(args.payload.encode())
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"--payload is not JSON: {exc}") from None
    db = await Database.open(settings.database_url, max_size=1)
    try:
        sent = await db.in_tenant(
            project,
            lambda conn: signals.send(
                conn,
                run_id,
                args.name,
                payload,
                key=args.key,
                sent_by=cli_actor(),
                payload_max_bytes=settings.signal_payload_max_bytes,
                kept_max=settings.signals_per_run_max,
                metadata={"actor": cli_actor()},
            ),
        )
    finally:
        await db.close()
    if sent.delivered and not sent.duplicate:
        metrics.SIGNALS_DELIVERED.labels("send").inc()
    if args.json:
        print(to_json(msgspec.to_builtins(sent)))
    else:
        what = "delivered" if sent.delivered else "kept until a wait takes it"
        again = " (sent before with this key)" if sent.duplicate else ""
        print(f"signal {sent.signal_id} {sent.name} to run {sent.run_id}: {what}{again}")
    return 0
