"""Provider event ids from headers: any UTF-8 text, never bytes that were not UTF-8.

Header values reach the adapters decoded as UTF-8 with ``surrogateescape``
(:func:`awooop.http.ingest.lowercase_headers`), so a byte that is not UTF-8 arrives as a lone
surrogate, which :func:`awooop.ingest.common.event_id` refuses by name.
"""

from __future__ import annotations

import pytest

from awooop.core.errors import InvalidInputError
from awooop.ingest.common import event_id

FIELD = "Idempotency-Key header"


def header(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # as lowercase_headers decodes


@pytest.mark.parametrize("text", ["ключ-1", "é-1", "鍵-🔑", "order 42"])
def test_utf8_text_is_the_key_as_sent(text: str) -> None:
    assert event_id(header(text.encode()), FIELD) == text


@pytest.mark.parametrize("raw", [b"caf\xe9", b"\xff\xfe", b"ok-\xc3"])
def test_bytes_that_are_not_utf8_are_refused_by_name(raw: bytes) -> None:
    with pytest.raises(InvalidInputError, match=f"^{FIELD} is not valid UTF-8$"):
        event_id(header(raw), FIELD)


def test_length_counts_characters_and_control_characters_are_refused() -> None:
    assert event_id("ж" * 256, FIELD) == "ж" * 256
    with pytest.raises(InvalidInputError, match="longer than 256 characters"):
        event_id("ж" * 257, FIELD)
    with pytest.raises(InvalidInputError, match="control characters"):
        event_id("a\x7fb", FIELD)
