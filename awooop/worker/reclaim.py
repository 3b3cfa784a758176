"""Pending-entry reclaim (R-16): what to do with a message a dead consumer left behind.

A worker's ``worker-reclaim`` loop (every ``AWOOOP_RECLAIM_INTERVAL_S``) claims work-stream
entries idle longer than the lease TTL (a live worker touches its own entries at every
heartbeat, so only entries of dead or stalled consumers get that old) and reconciles each
with Postgres, the authority:

| the run is                          | deliveries <= max     | deliveries > max            |
|-------------------------------------|-----------------------|-----------------------------|
| finished, unknown, awaiting approval | XACK                  | XACK                        |
| held by a live lease elsewhere      | leave pending         | XACK (superseded)           |
| held by this worker                 | XACK (already running) | XACK                       |
| dispatchable, or its lease expired  | take the lease, run   | FAIL (E-RUN-005), dead letter |

"Too many deliveries" fails a run only when nobody is making progress on it: a message for a
run that a live worker holds is a redundant doorbell (a duplicate publication, or the one the
holder did not claim through), and failing that run would be wrong. Dead-lettering moves the
message to the shard's dead-letter stream and acknowledges it atomically; the run's failure is
written first, so a crash between the two leaves a message whose run is finished (acknowledged
at the next pass), never a live run without a message.
"""

from __future__ import annotations

import enum

from awooop.runs.leases import Availability


class ReclaimAction(enum.StrEnum):
    ACK = "ack"
    LEAVE = "leave"
    TAKE = "take"
    DEAD_LETTER = "dead_letter"


def reclaim_action(seen: Availability, deliveries: int, max_deliveries: int) -> ReclaimAction:
    """Pure: the table in the module docstring."""
    too_many = deliveries > max_deliveries
    if seen in (Availability.CLAIMABLE, Availability.EXPIRED):
        return ReclaimAction.DEAD_LETTER if too_many else ReclaimAction.TAKE
    if seen is Availability.HELD:
        return ReclaimAction.ACK if too_many else ReclaimAction.LEAVE
    return ReclaimAction.ACK


def dead_letter_reason(deliveries: int, max_deliveries: int) -> str:
    return (
        f"work message delivered {deliveries} times (limit {max_deliveries}); "
        "moved to the dead-letter stream"
    )
