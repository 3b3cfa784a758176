"""The text ``producer.transaction`` sends: the only query of the producer whose value is in its
text, so every way a project id could reach it is refused unless it is plain."""

from __future__ import annotations

import pytest

from awooop.core.errors import InvalidInputError
from awooop.ingest.credentials import PROJECT_ID
from awooop.producer.tenant_transaction import PLAIN, begin_tenant, tenant_literal


def test_the_query_for_each_isolation_level() -> None:
    tenant = "SET LOCAL awooop.project_id = 'shop-1.eu:a_b'"
    assert begin_tenant("shop-1.eu:a_b") == f"BEGIN; {tenant}"
    assert begin_tenant("shop-1.eu:a_b", "read_committed") == (
        f"BEGIN ISOLATION LEVEL READ COMMITTED; {tenant}"
    )
    assert begin_tenant("shop-1.eu:a_b", "repeatable_read") == (
        f"BEGIN ISOLATION LEVEL REPEATABLE READ; {tenant}"
    )
    assert begin_tenant("shop-1.eu:a_b", "serializable") == (
        f"BEGIN ISOLATION LEVEL SERIALIZABLE; {tenant}"
    )


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "read uncommitted", "serializable; --"])
def test_an_unknown_isolation_level_is_refused(isolation: str) -> None:
    with pytest.raises(InvalidInputError, match="isolation"):
        begin_tenant("shop", isolation)


@pytest.mark.parametrize(
    "value", ["a'b", "a''", "a\\'", "a b", "a;b", "a\nb", "shop\n", "é", "a$$b", "a\x00b", ""]
)
def test_the_literal_refuses_anything_but_plain_characters_on_its_own(value: str) -> None:
    with pytest.raises(InvalidInputError):
        tenant_literal(value)
    with pytest.raises(InvalidInputError):
        begin_tenant(value)


def test_every_valid_project_id_is_plain() -> None:
    # PROJECT_ID's character classes, one by one, and the longest id: all pass through
    # tenant_literal unchanged, in quotes
    for project in ["a" * 64, "0.a", "A:b", "z_-9", "Shop"]:
        assert PROJECT_ID.fullmatch(project) and PLAIN.fullmatch(project)
        assert tenant_literal(project) == f"'{project}'"
    for char in map(chr, range(128)):
        if PROJECT_ID.fullmatch("a" + char):
            assert PLAIN.fullmatch("a" + char), repr(char)
