"""The run console under ``/ui``: server-rendered pages over the management tokens.

| route | what |
|---|---|
| ``GET /ui/login``, ``POST /ui/login`` | log in with a token (scope read, manage or admin) |
| ``POST /ui/logout`` | end the session |
| ``GET /ui/runs`` | runs, filters in the URL (project, status, channel, blocked_on, since, q) |
| ``GET /ui/runs/{project_id}/{run_id}`` | one run: blocked_on, state, waterfall, timeline, steps |
| ``POST /ui/runs/{project_id}/{run_id}/{action}`` | retry, cancel, approve, reject, redrive |
| ``GET /ui/bulk/{kind}``, ``POST /ui/bulk/{kind}`` | preview, then start a bulk retry or cancel |
| ``GET /ui/operations`` | the bulk operations, newest first, with their progress |
| ``GET /ui/operations/{id}``, ``POST .../resume`` | a bulk operation's progress; resume it |
| ``GET /ui/static/console-live.js`` | the live pages' script (:mod:`awooop.http.console_live`) |
| ``GET /ui/static/console-output.js`` | the run page's output script (console_output.py) |
| ``GET /ui/runs/{project_id}/{run_id}/output`` | the run's output stream (awooop.http.output) |
| ``GET /ui/dead-letters`` | open dead letters (project, channel, code, since), each to redrive |
| ``GET /ui/pauses``, ``POST /ui/pauses/{action}`` | pauses; pause or resume (console_pauses.py) |
| ``GET /ui/projects/{project}/flow``, ``POST .../{action}`` | flow control (console_flow.py) |

Who sees what is the management API's rule (:func:`awooop.http.auth.authorize_stored`): a
``read`` or ``manage`` token its own project, an ``admin`` token every project; a ``read``
session sees no action button and its POSTs are refused (403 E-AUTH-004). Reads run in a
tenant transaction of the project (row-level security: another project's run is 404 like a
missing one) or, for an admin's list across projects, on the platform role. Every POST checks
the session's CSRF token first (:mod:`awooop.http.console_session`), then the scope, then
acts through the same functions as the CLI (:mod:`awooop.runs.control`,
:mod:`awooop.runs.approvals`, :mod:`awooop.runs.deadletters`), recording the token as
``actor`` in the event's metadata (with ``via: console``) and the person's name, when the form
gives one, in the event itself. Approve and reject need no approval token: the session's token
decides (the event's ``actor``) for the person the form must name (its ``by``), closing the
run's open request as the token would (:func:`awooop.runs.approvals.decide_as`).

A run page draws a waterfall of where the run's time went (:mod:`awooop.http.console_waterfall`)
and its timeline by attempt, filterable by event type (:mod:`awooop.http.console_timeline`);
the list and run pages keep themselves up to date (:mod:`awooop.http.console_live`).

A run page also lists the run's model calls (each ``run.llm`` call: attempt, model, contract,
the policy revision and body hash that served it, duration, outcome, trace), folded from the
same read of the run's stream as its timeline (:mod:`awooop.projections.model_calls`).

The console is one class, :class:`Console`, whose handlers are its methods, gathered from one
module per part: the login (:mod:`awooop.http.console_login`), the run pages
(:mod:`awooop.http.console_pages`), the run actions (:mod:`awooop.http.console_actions`) and
the bulk operations (:mod:`awooop.http.console_bulk`) and the lists of dead letters and
operations (:mod:`awooop.http.console_lists`), the pauses (:mod:`awooop.http.console_pauses`)
and a project's flow control (:mod:`awooop.http.console_flow`), over what they share
(:mod:`awooop.http.console_access`: the session, where reads run; the HTML in
:mod:`awooop.http.console_render`, Jinja2 templates escaped by default).
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from awooop.http import console_live as live
from awooop.http import console_output
from awooop.http.console_actions import RunActions
from awooop.http.console_bulk import BulkOperations
from awooop.http.console_flow import FlowPages
from awooop.http.console_lists import ListPages
from awooop.http.console_login import LoginRoutes
from awooop.http.console_pages import RunPages
from awooop.http.console_pauses import PausePages
from awooop.services import Services


class Console(LoginRoutes, RunPages, RunActions, BulkOperations, ListPages, PausePages, FlowPages):
    """The console over ``services``: each route a method of one of its parts."""

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ui", self.index, methods=["GET"]),
            Route("/ui/login", self.login_page, methods=["GET"]),
            Route("/ui/login", self.login, methods=["POST"]),
            Route("/ui/logout", self.logout, methods=["POST"]),
            Route("/ui/runs", self.runs_page, methods=["GET"]),
            Route("/ui/runs/{project_id}/{run_id}", self.run_page, methods=["GET"]),
            Route("/ui/runs/{project_id}/{run_id}/{action}", self.act, methods=["POST"]),
            Route("/ui/bulk/{kind}", self.bulk_preview, methods=["GET"]),
            Route("/ui/bulk/{kind}", self.bulk_confirm, methods=["POST"]),
            Route("/ui/dead-letters", self.dead_letters_page, methods=["GET"]),
            Route("/ui/operations", self.operations_page, methods=["GET"]),
            Route("/ui/operations/{operation_id}", self.operation_page, methods=["GET"]),
            Route("/ui/operations/{operation_id}/resume", self.operation_resume, methods=["POST"]),
            Route(live.SCRIPT_PATH, live.script, methods=["GET"]),
            Route(console_output.SCRIPT_PATH, console_output.script, methods=["GET"]),
            Route("/ui/pauses", self.pauses_page, methods=["GET"]),
            Route("/ui/pauses/{action}", self.pause_action, methods=["POST"]),
            Route("/ui/projects/{project}/flow", self.flow_page, methods=["GET"]),
            Route("/ui/projects/{project}/flow/{action}", self.flow_action, methods=["POST"]),
        ]


def routes(services: Services) -> list[BaseRoute]:
    return Console(services).routes()
