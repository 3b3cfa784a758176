"""``awooop runs``: list runs, and operate on one run from the command line.

    awooop runs list    [--project P] [--status S] [--since 2h|ISO] [--search TEXT] [--limit N]
                        [--json]
    awooop runs show    [PROJECT] RUN_ID [--json]
    awooop runs cancel  [PROJECT] RUN_ID [--actor NAME] [--reason TEXT] [--json]
    awooop runs approve [PROJECT] RUN_ID (--token TOKEN | --by NAME) [--actor NAME]
                        [--reason TEXT] [--payload-file FILE.json] [--json]
    awooop runs reject  [PROJECT] RUN_ID (--token TOKEN | --by NAME) [--actor NAME]
                        [--reason TEXT] [--payload-file FILE.json] [--json]
    awooop runs retry   [PROJECT] RUN_ID [--attempts N] [--actor NAME] [--json]
    awooop runs retry   --filter KEY=VALUE ... [--dry-run] [--attempts N] [--actor NAME] [--json]
    awooop runs cancel  --filter KEY=VALUE ... [--dry-run] [--reason TEXT] [--actor NAME] [--json]
    awooop runs operation OPERATION_ID [--resume] [--json]
    awooop runs output  [PROJECT] RUN_ID [--follow] [--after SEQ] [--json]

Output is an aligned table (``list``, with each run's ``blocked_on`` reason; ``show`` starts
with the ``blocked_on`` line, what the run waits for and the next safe action
(:mod:`awooop.runs.blocked`; a running run's names the step it is in), then adds its attempts
(each with its worker and the handler version that ran it), its failures
(each failed or retried attempt's step and traceback), the run's timeline: every event with
its attempt, worker, trace id and actor, and its model calls: each ``run.llm`` call with its
attempt, model, contract, the policy revision and body hash that served it, duration, outcome,
tokens and trace id, then its prompt and answer, and the run's token totals), or JSON with
``--json``: ``list`` one array (each row with its ``blocked_on`` object), ``show`` one object
``{"state": ..., "blocked_on": ..., "timeline": [...], "model_calls": [...], "tokens": ...,
"failures": [...], "attempts": [...]}``, the
actions the run's new state. Without PROJECT
the run's project is looked up. Refusals print ``error E-XXX: message`` and exit 1 (for
example E-APPROVAL-003 for a token used twice, E-RUN-001 for cancelling a finished run,
E-INPUT-001 for a bad ``--since``). The approval token may also come from
``AWOOOP_APPROVAL_TOKEN`` (keeps it out of process listings). ``--by NAME`` decides without the
token, as whoever holds the database's credentials may: for the person NAME (recorded as the
decision's ``by``), closing the run's open request as the token would. ``--reason`` and
``--payload-file`` (the handler's draft as the reviewer edited it, JSON) reach the handler
(``run.wait_for_approval``); bad JSON is E-INPUT-001, a payload over
AWOOOP_STEP_RESULT_MAX_BYTES E-DATA-002, and nothing is written.

Every change records who made it: the event's metadata carries ``actor`` = ``cli:<OS user>``
(``--actor`` names the person in the event itself, default the same).

``--since`` (as ``since`` in ``--filter`` and the console) keeps runs created since then.
``--search`` (as ``search`` in ``--filter`` and the console, :mod:`awooop.runs.search`) keeps
runs whose id or idempotency key starts with TEXT or whose input, result or failure reason
contains it (at least 3 characters; newest created first).

With ``--filter`` (the console list's filters: project, status, channel, blocked_on, since, q,
search, exclude_codes; repeat the option, all must match) ``retry`` and ``cancel`` act on every
matching run as one operation (:mod:`awooop.runs.bulk`): the preview first (how many runs, per
project and per failure code; ``exclude_codes=E-A,E-B`` leaves those codes out), then,
unless ``--dry-run``, the operation is recorded and run in batches here, one progress line per
batch on stderr; each event's metadata also carries ``operation_id``. ``runs operation`` shows
an operation, and ``--resume`` continues one whose process stopped (no run is changed twice;
the ``bulk_operations`` loop does the same by itself once the operation has had no batch for
30 s).
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.commands import runs_output, runs_signal
from awooop.commands.output import add_wide
from awooop.commands.runs_actions import list_runs, run, show_operation
from awooop.commands.runs_parsing import TOKEN_ENV
from awooop.runs import reads
from awooop.runs.listing import FILTER_KEYS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "runs", help="list runs; show, cancel, approve, reject, retry; their output"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="runs, most recently changed first")
    listing.add_argument("--project", default=None, help="only this project")
    listing.add_argument("--status", default=None, help="only runs in this state (FAILED, ...)")
    listing.add_argument(
        "--since",
        default=None,
        help=f"created since (as in --filter and the console): {reads.SINCE_HELP}",
    )
    listing.add_argument(
        "--search",
        default=None,
        metavar="TEXT",
        help="runs whose id or key starts with TEXT, or whose input, result or error contains it",
    )
    listing.add_argument("--limit", type=int, default=reads.DEFAULT_LIMIT, help="at most N rows")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(listing)
    listing.set_defaults(run=list_runs)

    def add(name: str, help_text: str, *, by_filter: bool = False) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        sub.add_argument(
            "ids",
            nargs="*" if by_filter else "+",
            metavar="[PROJECT] RUN_ID",
            help="the run (its project is looked up when not given)",
        )
        sub.add_argument("--json", action="store_true", help="JSON instead of a table")
        add_wide(sub)
        sub.set_defaults(run=run)
        return sub

    add("show", "the run's state, its timeline of events and its model calls")
    cancel = add(
        "cancel", "cancel a run that has not finished (or every match of --filter)", by_filter=True
    )
    approve = add("approve", "approve a run waiting for approval (its token, or --by a person)")
    reject = add("reject", "reject a run waiting for approval (its token, or --by a person)")
    retry = add(
        "retry", "send a FAILED run (or every match of --filter) back to PENDING", by_filter=True
    )
    for sub in (cancel, approve, reject, retry):
        sub.add_argument("--actor", default=None, help="who acts (default: cli:<OS user>)")
    for sub in (cancel, approve, reject):
        sub.add_argument("--reason", default="", help="why (recorded in the event)")
    for sub in (approve, reject):
        sub.add_argument(
            "--payload-file", default=None, help="the edited payload, JSON (reaches the handler)"
        )
        sub.add_argument("--token", default=None, help=f"the approval token (or ${TOKEN_ENV})")
        sub.add_argument(
            "--by", default=None, help="decide without the token, for this person (their name)"
        )
    retry.add_argument("--attempts", type=int, default=None, help="extra attempts (default: 3)")
    for sub in (cancel, retry):
        sub.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"every run matching ({', '.join(FILTER_KEYS)}; repeat: all must match)",
        )
        sub.add_argument("--dry-run", action="store_true", help="only the preview: how many runs")
    runs_signal.register(actions)
    operation = actions.add_parser("operation", help="a bulk operation's progress; --resume it")
    operation.add_argument("operation_id", help="the operation's id")
    operation.add_argument("--resume", action="store_true", help="run its remaining batches")
    operation.add_argument("--json", action="store_true", help="JSON instead of a table")
    operation.set_defaults(run=show_operation)
    runs_output.register(actions)  # the run's streamed output (awooop.commands.runs_output)
