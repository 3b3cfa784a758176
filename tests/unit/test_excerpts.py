"""Text kept for operators (awooop.core.excerpts): capped, secrets redacted, storable."""

from __future__ import annotations

import pytest

from awooop.core.excerpts import REDACTED, capped, failure_traceback, kept, marker, redacted


def test_short_text_is_kept_whole() -> None:
    assert capped("abc", 3) == "abc"
    assert capped("", 10) == ""


def test_a_long_text_keeps_its_head_and_says_how_much_was_cut() -> None:
    text = "x" * 5000
    out = capped(text, 4096)
    assert len(out) == 4096
    assert out.startswith("x" * 100)
    kept_head = out.index("\n[...")
    cut = 5000 - kept_head
    assert out == "x" * kept_head + marker(cut)  # every character accounted for


def test_keep_tail_keeps_both_ends() -> None:
    text = "HEAD" + "m" * 10_000 + "TAIL"
    out = capped(text, 1000, keep_tail=True)
    assert len(out) == 1000
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert "characters cut" in out


def test_a_limit_smaller_than_the_marker_still_bounds_the_text() -> None:
    assert capped("y" * 100, 5) == "yyyyy"


def test_kept_makes_text_storable_before_capping() -> None:
    assert kept("a\x00b", 100) == "a\\u0000b"
    assert len(kept("z" * 10_000, 4096)) == 4096


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abc.DEF-123_xyz", "abc.DEF-123_xyz"),
        ("headers={'Authorization': 'basic dXNlcjpwYXNz'}", "dXNlcjpwYXNz"),
        ("token awp_0123456789abcdef_S3cr3tS3cr3tS3cr3t refused", "S3cr3tS3cr3tS3cr3t"),
        ("approve with apv_Zm9vYmFyYmF6cXV4", "apv_Zm9vYmFyYmF6cXV4"),
        ("connect postgresql://app:hunter2@db:5432/awooop failed", "hunter2"),
        ("redis://:p4ss@cache:6379/0", "p4ss"),
        ("password=hunter2 user=app", "hunter2"),
        ("db_password: 'sw0rdfish'", "sw0rdfish"),
        ('{"api_key": "k-123456"}', "k-123456"),
        ("GET /hook?token=abc123&x=1", "abc123"),
        ("client_secret = 'shh'", "shh"),
    ],
)
def test_secrets_are_redacted(text: str, secret: str) -> None:
    out = redacted(text)
    assert secret not in out
    assert REDACTED in out


def test_what_is_not_a_secret_stays() -> None:
    text = "KeyError: 'sku'\n  File \"handler.py\", line 12, in reserve_stock"
    assert redacted(text) == text
    assert redacted("postgresql://db:5432/awooop") == "postgresql://db:5432/awooop"
    # the place stays readable: what was redacted, not what it was
    assert redacted("password=hunter2") == f"password={REDACTED}"
    assert redacted("postgresql://app:hunter2@db/x") == f"postgresql://app:{REDACTED}@db/x"


def raise_with(message: str) -> BaseException:
    def inner() -> None:
        raise ValueError(message)

    try:
        try:
            inner()
        except ValueError as exc:
            raise RuntimeError("while reserving") from exc
    except RuntimeError as exc:
        return exc
    raise AssertionError("unreachable")


def test_a_traceback_has_its_frames_its_causes_and_no_secret() -> None:
    text = failure_traceback(raise_with("cannot reach postgresql://app:hunter2@db/x"))
    assert text.startswith("Traceback (most recent call last):")
    assert "in inner" in text and "raise ValueError(message)" in text
    assert "The above exception was the direct cause" in text
    assert text.rstrip().endswith("RuntimeError: while reserving")
    assert "hunter2" not in text and REDACTED in text


def test_a_long_traceback_is_capped_keeping_the_raising_end() -> None:
    text = failure_traceback(raise_with("m" * 50_000), limit=8192)
    assert len(text) == 8192
    assert text.startswith("Traceback")
    assert text.rstrip().endswith("RuntimeError: while reserving")
    assert "characters cut" in text


def test_a_traceback_is_storable() -> None:
    text = failure_traceback(raise_with("nul \x00 and \ud800"))
    assert "\x00" not in text
    text.encode("utf-8")  # no lone surrogate left
