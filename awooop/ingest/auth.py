"""Pure authentication helpers: HMAC signatures, secret headers and bearer tokens (R-05).

Every comparison of a presented value with a stored one goes through
:func:`hmac.compare_digest` on bytes (constant time; bytes also accept any header text).

Bearer tokens read ``awp_<token_id>_<secret>``: ``token_id`` (16 hex digits) finds the row
without a secret-dependent lookup, ``secret`` is 32 random bytes (base64url), and only
``sha256(secret)`` is stored. A fast hash is right here: the secret has 256 bits of entropy,
so there is no dictionary to try (passwords would need a slow hash, tokens do not).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from awooop.core.errors import AuthenticationError
from awooop.ingest.common import Headers, StoredCredential

TOKEN_PATTERN = re.compile(r"awp_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
AUTHORIZATION = "authorization"
AUTH_FAILED = "authentication failed: the signature does not match or no secret is set"
TOKEN_FAILED = "authentication failed: unknown, revoked or wrong-channel bearer token"


def equal(presented: str, expected: str) -> bool:
    return hmac.compare_digest(
        presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def hmac_sha256(secret: str, body: bytes) -> bytes:
    return hmac.new(secret.encode(), body, hashlib.sha256).digest()


def require_header(headers: Headers, name: str) -> str:
    value = headers.get(name)
    if not value:
        raise AuthenticationError(f"missing {name} header", header=name)
    return value


def require_secret(stored: StoredCredential) -> str:
    if stored.secret is None:
        raise AuthenticationError(AUTH_FAILED)
    return stored.secret


# --- bearer tokens --------------------------------------------------------------------------


def new_token() -> tuple[str, str, str]:
    """A fresh token: (token_id, token as shown once, sha256 hex of its secret)."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return token_id, f"awp_{token_id}_{secret}", hash_secret(secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_token(token: str) -> tuple[str, str] | None:
    match = TOKEN_PATTERN.fullmatch(token)
    return None if match is None else (match.group(1), match.group(2))


def presented_token(headers: Headers) -> str | None:
    value = headers.get(AUTHORIZATION, "")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def bearer_token_id(headers: Headers) -> str | None:
    """The token id of the request's bearer token, to look the stored hash up by."""
    token = presented_token(headers)
    parsed = None if token is None else parse_token(token)
    return None if parsed is None else parsed[0]


def authenticate_bearer(headers: Headers, _body: bytes, stored: StoredCredential) -> None:
    token = presented_token(headers)
    if token is None:
        raise AuthenticationError("missing bearer token (Authorization: Bearer awp_...)")
    parsed = parse_token(token)
    if parsed is None:
        raise AuthenticationError("malformed bearer token")
    presented_hash = hash_secret(parsed[1])
    if stored.token_hash is None or not equal(presented_hash, stored.token_hash):
        raise AuthenticationError(TOKEN_FAILED)


def line_signature(secret: str, body: bytes) -> str:
    """``X-Line-Signature``: base64 of HMAC-SHA256(channel secret, raw body)."""
    return base64.b64encode(hmac_sha256(secret, body)).decode()


def gitea_signature(secret: str, body: bytes) -> str:
    """``X-Gitea-Signature``: hex HMAC-SHA256(webhook secret, raw body)."""
    return hmac_sha256(secret, body).hex()
