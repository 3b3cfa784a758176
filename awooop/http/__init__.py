"""The HTTP API (Starlette on uvicorn): ingest, runs, approvals, contracts, health, metrics."""
