"""The model path: a client protocol, the Ollama-compatible HTTP client, the deterministic
local model, and the gateway that checks the revision pointer before every call (R-24, R-25).
"""
