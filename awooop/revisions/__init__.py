"""Contract revisions (R-20 to R-26).

- :mod:`.body`: canonical JSON, ``body_hash``, names and per-family body validation (pure);
- :mod:`.store`: create, list, show, activate and roll back, each in one transaction with its
  event (R-30) and, for activation, the contract outbox row (R-21);
- :mod:`.cache`: the worker cache and the pure decisions around it (R-23);
- :mod:`.pointer`: the one-round-trip active-pointer check (R-24);
- :mod:`.effective`: ``get_effective_policy`` (cache + pointer check) and re-validation;
- :mod:`.notices`: the worker-side reader of the invalidation stream (R-22, R-25).
"""
