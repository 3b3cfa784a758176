"""Channel ingest (R-01 to R-06): provider adapters, the ingest transaction, dedupe expiry.

- one module per channel (:mod:`telegram`, :mod:`alertmanager`, :mod:`gitea`, :mod:`line`,
  :mod:`api`), each pure: ``authenticate``, ``parse`` and ``provider_event_id``;
- :mod:`awooop.ingest.service`: the :class:`~awooop.ingest.service.Ingestor`, the one flow behind
  the HTTP route and the producer library (configuration cache, authentication, group commit,
  metrics); :mod:`awooop.ingest.submission`: the producer's events, checked, then written;
- :mod:`awooop.ingest.ingest_write`: the one transaction per delivery (dedupe row, run, first
  event);
- :mod:`awooop.ingest.credentials`: channel secrets, dedupe TTLs and bearer tokens in Postgres;
- :mod:`awooop.loops.dedupe_expiry`: the platform loop deleting expired dedupe rows in batches.
"""

from __future__ import annotations

from awooop.ingest import alertmanager, api, gitea, line, telegram
from awooop.ingest.common import Adapter

ADAPTERS: dict[str, Adapter] = {
    m.ADAPTER.channel_type: m.ADAPTER for m in (telegram, alertmanager, gitea, line, api)
}
