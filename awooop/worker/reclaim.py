"""Pending-entry reclaim (R-16): what to do with a message a dead consumer left behind.

A worker's ``worker-reclaim`` loop (every ``AWOOOP_RECLAIM_INTERVAL_S``) claims work-stream
entries idle longer than the lease TTL (a live worker touches its own entries at every
heartbeat, so only entries of dead or stalled consumers get that old) and reconciles each
with Postgres, the authority:

| the run is                           | deliveries <= max         | deliveries > max            |
|--------------------------------------|---------------------------|-----------------------------|
| finished, unknown, awaiting approval | XACK                      | XACK                        |
| a suspect (runs alone)               | XACK                      | XACK                        |
| held by a live lease elsewhere       | leave pending, uncounted  | XACK (superseded)           |
| held by this worker                  | XACK (already running)    | XACK                        |
| its lease expired                    | take it (reap decision)   | take it (reap decision)     |
| dispatchable                         | take the lease, run       | FAIL (E-RUN-005), dead letter |

A run that this worker does not serve (awooop.runs.routing) and that it would take or dead-letter
is handed to the claim, which refuses it: the entry is acknowledged and the workers that serve
the run are rung (their polling path takes it, or the reap decision if its lease expired).

"Too many deliveries" fails a run only when nobody is making progress on it: a message for a
run that a live worker holds is a redundant doorbell (a duplicate publication, or the one the
holder did not claim through), and failing that run would be wrong. Such a message is left
pending for as long as the holder lives and reclaimed once per lease TTL; each of those
deliveries is taken back (the entry's count is set to what it was before the reclaim, see
:func:`held_delivery_count`), so a long attempt elsewhere never brings its run closer to the
limit. A run whose lease expired is taken whatever its message's count: the reap decision
(:func:`awooop.runs.leases.rules.reap_event`) counts the attempts, requeues and claims it while
attempts remain, else FAILS it with E-RUN-004 and records its dead letter.
Only a dispatchable run whose message keeps being delivered without anyone claiming it (a
message that kills its consumers before the claim) is failed for its deliveries. A reclaim
that Postgres (or Redis) could not serve (away, read-only, a revoked privilege, a lock past
the bound) killed nobody either: its delivery is taken back the same way, so a database that
refuses writes for a while never makes healthy runs look like poison.

Dead-lettering fails the run and records its dead letter (with the message) in one Postgres
transaction, then acknowledges the entry: a crash between the two leaves a message whose run
is finished (acknowledged at the next pass), never a live run without a message.
"""

from __future__ import annotations

import enum

from awooop.runs.leases import Availability


class ReclaimAction(enum.StrEnum):
    ACK = "ack"
    LEAVE = "leave"  # leave pending, and take this delivery back (held_delivery_count)
    TAKE = "take"
    DEAD_LETTER = "dead_letter"


def reclaim_action(seen: Availability, deliveries: int, max_deliveries: int) -> ReclaimAction:
    """Pure: the table in the module docstring."""
    too_many = deliveries > max_deliveries
    if seen is Availability.EXPIRED:
        return ReclaimAction.TAKE  # the attempts decide, not the deliveries
    if seen is Availability.CLAIMABLE:
        return ReclaimAction.DEAD_LETTER if too_many else ReclaimAction.TAKE
    if seen is Availability.HELD:
        return ReclaimAction.ACK if too_many else ReclaimAction.LEAVE
    # Finished, unknown, awaiting approval, mine, or a suspect (the isolated claim finds it in
    # Postgres, awooop.worker.isolation): nothing for this message to do.
    return ReclaimAction.ACK


def held_delivery_count(deliveries: int) -> int:
    """Pure: the delivery count to set on an entry left pending because a live lease elsewhere
    holds its run. The reclaim that delivered it counted one delivery; it is not one (the run
    is making progress), so the count goes back to what it was (never below one: the entry
    was read once)."""
    return max(1, deliveries - 1)


def dead_letter_reason(deliveries: int, max_deliveries: int) -> str:
    return f"work message delivered {deliveries} times (limit {max_deliveries}); dead-lettered"
