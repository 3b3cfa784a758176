"""Pure decisions of online migrations (awooop/core/online_migrations.py runs them).

A migration file with the line ``-- awooop: online`` in the comments that open it (before its
first statement) is not run as one transaction: its statements become steps, each holding its
locks only briefly:

- ``CREATE [UNIQUE] INDEX CONCURRENTLY name ON table (...)``: built CONCURRENTLY; on a
  partitioned table, an index ON ONLY the parent, then one per partition built CONCURRENTLY
  and attached to it (the parent's index is valid once every partition's is attached);
- ``ALTER TABLE t VALIDATE CONSTRAINT c``: validated partition by partition, then on the
  parent (which then scans nothing);
- a statement with the placeholder ``$1``: a batch, run with ``$1`` = the batch size in its own
  transaction until it changes no row; it must change only rows that still need it, so that
  running it again from the start (after an interruption) is safe;
- another statement with ``CONCURRENTLY`` (``DROP INDEX CONCURRENTLY`` ...): on its own,
  outside a transaction;
- any other statement: in its own short transaction.

Every step runs under ``lock_timeout``; a step that times out on a lock, or meets a
serialisation failure or deadlock, is retried after a growing pause (:func:`retry_delay`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from awooop.core.errors import ConfigError
from awooop.core.migration_checksums import (
    _block_comment_end,
    _continues_identifier,
    _quoted_end,
    dollar_quote_end,
    normalise_sql,
)

ONLINE_MARK = re.compile(r"^--\s*awooop:.*\bonline\b", re.IGNORECASE)
NAME = r"[a-z_][a-z0-9_$]*"
CREATE_INDEX = re.compile(
    rf"^CREATE (?P<unique>UNIQUE )?INDEX CONCURRENTLY (?:IF NOT EXISTS )?(?P<name>{NAME}) "
    rf"ON (?:ONLY )?(?P<table>{NAME})(?P<rest>[ (].*)$",
    re.IGNORECASE | re.DOTALL,
)
VALIDATE = re.compile(
    rf"^ALTER TABLE (?:ONLY )?(?P<table>{NAME}) VALIDATE CONSTRAINT (?P<name>{NAME})$",
    re.IGNORECASE,
)
WRITTEN_TABLE = re.compile(
    rf"^(?:WITH .*?)?(?:UPDATE|DELETE FROM|INSERT INTO) (?:ONLY )?(?P<table>{NAME})\b",
    re.IGNORECASE | re.DOTALL,
)
CONCURRENTLY = re.compile(r"\bCONCURRENTLY\b", re.IGNORECASE)


def is_online(sql: str) -> bool:
    """Whether the comment lines that open the file (before its first statement) include
    ``-- awooop: online``."""
    for line in sql.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return False
        if ONLINE_MARK.match(stripped):
            return True
    return False


class Kind(StrEnum):
    INDEX = "index"
    VALIDATE = "validate"
    BATCH = "batch"
    AUTOCOMMIT = "autocommit"
    TRANSACTION = "transaction"


@dataclass(frozen=True)
class Step:
    number: int  # 1-based, in file order
    kind: Kind
    sql: str  # as written (comments dropped), what runs for BATCH/AUTOCOMMIT/TRANSACTION
    table: str | None = None  # INDEX, VALIDATE; BATCH: the table it writes (for the estimate)
    name: str | None = None  # INDEX: the index; VALIDATE: the constraint
    unique: bool = False  # INDEX
    definition: str = ""  # INDEX: what follows ``ON table``

    def index_sql(self, name: str, table: str, *, only: bool, concurrently: bool) -> str:
        """This INDEX step's statement for one table (a partition, or the parent ON ONLY)."""
        return (
            f"CREATE {'UNIQUE ' if self.unique else ''}INDEX "
            f"{'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS {name} "
            f"ON {'ONLY ' if only else ''}{table}{self.definition}"
        )


def split_statements(sql: str) -> list[tuple[str, bool]]:
    """The statements of ``sql`` (comments dropped, trimmed), each with whether it uses the
    placeholder ``$1`` outside literals."""
    out: list[tuple[str, bool]] = []
    current: list[str] = []
    batch = False
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            current.append(" ")
        elif sql.startswith("/*", i):
            i = _block_comment_end(sql, i)
            current.append(" ")
        elif ch in "'\"":
            escapes = (
                ch == "'" and i > 0 and sql[i - 1] in "eE" and not _continues_identifier(sql, i - 1)
            )
            end = _quoted_end(sql, i, ch, backslash=escapes)
            current.append(sql[i:end])
            i = end
        elif ch == "$" and (dollar_end := dollar_quote_end(sql, i)) is not None:
            current.append(sql[i:dollar_end])
            i = dollar_end
        elif ch == "$" and re.match(r"\$1(?![0-9])", sql[i:]):
            batch = True
            current.append("$1")
            i += 2
        elif ch == ";":
            out.append(("".join(current).strip(), batch))
            current, batch = [], False
            i += 1
        else:
            current.append(ch)
            i += 1
    out.append(("".join(current).strip(), batch))
    return [(text, uses) for text, uses in out if text]


def plan(name: str, sql: str) -> list[Step]:
    """The steps of online migration ``name``; ConfigError for a statement it cannot run."""
    steps: list[Step] = []
    for number, (text, batch) in enumerate(split_statements(sql), start=1):
        flat = normalise_sql(text)
        if batch:
            written = WRITTEN_TABLE.match(flat)
            if written is None:
                raise ConfigError(
                    f"{name}: statement {number} uses $1 (a batch) but is no UPDATE, DELETE or "
                    "INSERT: a batch runs until it changes no row"
                )
            steps.append(Step(number, Kind.BATCH, text, table=written["table"].lower()))
        elif index := CREATE_INDEX.match(flat):
            steps.append(
                Step(
                    number,
                    Kind.INDEX,
                    text,
                    table=index["table"].lower(),
                    name=index["name"].lower(),
                    unique=index["unique"] is not None,
                    definition=index["rest"],
                )
            )
        elif validate := VALIDATE.match(flat):
            steps.append(
                Step(
                    number,
                    Kind.VALIDATE,
                    text,
                    table=validate["table"].lower(),
                    name=validate["name"].lower(),
                )
            )
        elif flat.upper().startswith("CREATE") and CONCURRENTLY.search(flat.split(" ON ")[0]):
            raise ConfigError(
                f"{name}: statement {number}: write CREATE [UNIQUE] INDEX CONCURRENTLY with a "
                "lower-case unquoted name and table, or without CONCURRENTLY"
            )
        elif CONCURRENTLY.search(flat):
            steps.append(Step(number, Kind.AUTOCOMMIT, text))
        else:
            steps.append(Step(number, Kind.TRANSACTION, text))
    return steps


def partition_index_name(index: str, parent: str, partition: str) -> str:
    """The name of ``index``'s copy on ``partition`` (at most 63 characters, one per pair):
    the index's name with the partition's suffix (``awooop_events_p20261130`` -> ``_p20261130``)."""
    suffix = partition[len(parent) :] if partition.startswith(parent) else "_" + partition
    return index[: 63 - len(suffix)] + suffix


# --- how hard to push ------------------------------------------------------------------------


# A file that is not online runs whole in one transaction (awooop.core.migrate), holding each
# lock it took until it commits. Waiting at most this long for the next one, well below the
# server's deadlock_timeout (1 s by default), makes the migrator the side that gives way in a
# lock cycle with a runtime transaction: the other side's deadlock check never fires.
WHOLE_FILE_LOCK_TIMEOUT_S = 0.2


@dataclass(frozen=True)
class Policy:
    lock_timeout_s: float = 1.0  # the longest a step waits for a lock (and so blocks others)
    # CONCURRENTLY builds and drops wait for older transactions (never blocking anyone): a
    # longer bound, so that a transaction left open fails the attempt, which is then retried.
    concurrent_lock_timeout_s: float = 60.0
    batch_statement_timeout_s: float = 30.0
    first_batch: int = 1_000
    min_batch: int = 100
    max_batch: int = 10_000
    batch_target_s: float = 0.25  # a batch's transaction: about this long
    attempts: int = 60  # per step, before giving up with E-MIGRATE-006
    backoff_first_s: float = 0.1
    backoff_cap_s: float = 5.0
    progress_every_s: float = 2.0


def next_batch_size(size: int, elapsed_s: float, policy: Policy) -> int:
    """Double a batch that took under half the target, halve one that took longer."""
    if elapsed_s < policy.batch_target_s / 2:
        size *= 2
    elif elapsed_s > policy.batch_target_s:
        size //= 2
    return max(policy.min_batch, min(policy.max_batch, size))


def retry_delay(attempt: int, policy: Policy, jitter: float) -> float | None:
    """The pause before attempt ``attempt + 1`` after ``attempt`` failed on a lock or a
    conflict (``jitter`` in [0, 1): spreads migrators and the transactions they met); None:
    give up."""
    if attempt >= policy.attempts:
        return None
    base = min(policy.backoff_cap_s, policy.backoff_first_s * 2.0 ** (attempt - 1))
    return base * (0.5 + jitter / 2)


@dataclass(frozen=True)
class Progress:
    done: int
    total: int  # an estimate (pg_class.reltuples): may be below done
    elapsed_s: float

    def fields(self) -> dict[str, float | int]:
        rate = self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0
        total = max(self.total, self.done)
        left = (total - self.done) / rate if rate > 0 else 0.0
        return {
            "rows_done": self.done,
            "rows_estimated": total,
            "percent": round(100.0 * self.done / total, 1) if total else 100.0,
            "rows_per_s": round(rate),
            "eta_s": round(left, 1),
        }
