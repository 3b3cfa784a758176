"""Which runs a worker serves: its routes (``awooop worker --contract C --project P``), pure.

A worker started with ``--contract`` takes only runs of the named contracts, with
``--project`` only runs of the named projects; without either it serves every run (a run
without a contract included). The rule is written once in SQL (``_run_served.sql``): every
claim statement (stream deliveries, polling, expired leases, suspects) tests it on the row it
locks, with the worker's :attr:`Routes.params` as two ``text[]`` parameters (NULL: every
one), so a run is never claimed, on any path, by a worker that does not serve it. The rule
also holds the worker's handler version (:attr:`Routes.version`, a third parameter): a run
whose contract requires handler versions (:mod:`awooop.runs.versions`) is served only by a
worker whose version is among them, and each claim records the version in its ``RunClaimed``.

A stream delivery is one consumer's in the ``workers`` group: a worker that receives a
message for a run it does not serve (or may not take for its version) acknowledges it and
rings the polling path of the workers that do (``pg_notify`` on :data:`ROUTE_CHANNEL`,
payload :func:`notice`); the run waits in Postgres, and each of them owes its polling path
one start, at any age, now (``awooop.worker.resume_bell``, as for a deferral of the fair
share). A notice is a doorbell, never an order: a false one costs one poll (a worker of
another version that serves the contract is rung too, and finds nothing).

Each worker process records its routes in its ``awooop_processes`` row (migration 0137), so
that ``blocked_on`` can name a waiting run whose contract no live worker serves
(``no_worker_for_contract``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from awooop.core.errors import ConfigError
from awooop.eventlog.batches import Served

ROUTE_CHANNEL = "awooop_route"
MAX_NAME = 200  # the registry's bound on one contract or project name


class Routes(msgspec.Struct, frozen=True, kw_only=True):
    """A worker's routes: ``None`` serves every contract (or project); and the version of its
    handler (None: not known yet, :func:`awooop.worker.handler_version.versioned` sets it)."""

    contracts: tuple[str, ...] | None = None
    projects: tuple[str, ...] | None = None
    version: str | None = None

    @property
    def everything(self) -> bool:
        return self.contracts is None and self.projects is None

    def serves(self, project_id: str, contract_id: str | None) -> bool:
        """Pure: the rule of ``_run_served.sql`` (a run without a contract is served only by a
        worker without ``--contract``)."""
        if self.contracts is not None and contract_id not in self.contracts:
            return False
        return self.projects is None or project_id in self.projects

    @property
    def params(self) -> Served:
        """The claim statements' parameters: two ``text[]`` (NULL: every one), the version."""
        return Served(
            None if self.contracts is None else list(self.contracts),
            None if self.projects is None else list(self.projects),
            self.version,
        )

    def describe(self) -> str:
        if self.everything:
            served = "every contract of every project"
        else:
            contracts = "every contract" if self.contracts is None else ", ".join(self.contracts)
            projects = "every project" if self.projects is None else ", ".join(self.projects)
            served = f"{contracts} of {projects}"
        return served if self.version is None else f"{served}, handler version {self.version}"


ALL = Routes()


def _names(values: Iterable[str] | None, option: str) -> tuple[str, ...] | None:
    if values is None:
        return None
    names = []
    for value in values:
        name = value.strip()
        if not name or len(name) > MAX_NAME or "\n" in name:
            raise ConfigError(
                f"{option} {value!r}: give a name of 1 to {MAX_NAME} characters", option=option
            )
        names.append(name)
    return tuple(sorted(set(names))) or None


def routes_of(
    contracts: Sequence[str] | None, projects: Sequence[str] | None, version: str | None = None
) -> Routes:
    """Pure: the routes of ``--contract`` and ``--project`` (repeated options; None or empty:
    every one), with the handler's ``version`` (checked by the caller). A blank or oversized
    name is an E-CONFIG-001."""
    return Routes(
        contracts=_names(contracts, "--contract"),
        projects=_names(projects, "--project"),
        version=version,
    )


def notice(project_id: str, contract_id: str | None, run_id: object = "") -> str:
    """The payload of a routing notice: the run's project, contract and id (one notice per
    run: Postgres folds identical payloads of one transaction into one)."""
    return f"{project_id}\n{contract_id or ''}\n{run_id}"


def notice_served(routes: Routes, payload: str) -> bool:
    """Pure: whether a routing notice names runs that ``routes`` serves (a malformed one: no)."""
    project_id, sep, rest = payload.partition("\n")
    contract = rest.partition("\n")[0]
    return bool(sep) and routes.serves(project_id, contract or None)
