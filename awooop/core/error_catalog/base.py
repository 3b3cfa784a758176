"""The catalog's base class: every runtime error has a code, an HTTP status and a message."""

from __future__ import annotations

from typing import ClassVar


class AwoooPError(Exception):
    """AwoooP runtime error."""

    code: ClassVar[str] = "E-INTERNAL-001"
    http_status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False
    # Seconds a client should wait before trying again (HTTP ``Retry-After``); None: no hint.
    retry_after_s: ClassVar[int | None] = None

    def __init__(self, message: str | None = None, **details: object) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)

    def to_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = {k: str(v) for k, v in self.details.items()}
        return body


def http_error_code(status: int) -> str:
    """The code of an HTTP status answered without a catalog error (an unknown route 404, a
    wrong method 405, a failing readiness check 503)."""
    return f"E-HTTP-{status}"
