-- ingest.store's second look: the dedupe row that decides each key a concurrent delivery
-- committed after ingest_new.sql's snapshot ($1 project, $2 channel, $3 keys, $4 TTL), with
-- whether it is past expires_at. The probe is the one ingest_new.sql ends with.
SELECT d.provider_event_id, d.run_id, d.expires_at <= now() AS expired
{{dedupe_probe}}
