"""Which login roles may be bound to projects, and which projects (awooop/ingest/tenants.py)."""

from __future__ import annotations

import msgspec
import pytest

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.errors import InvalidInputError
from awooop.ingest.tenants import RoleInfo, check_projects, refusal

SERVICE = RoleInfo(
    rolname="shop_svc",
    quoted="shop_svc",
    rolcanlogin=True,
    rolsuper=False,
    rolbypassrls=False,
    rolcreaterole=False,
    app=False,
    platform=False,
)


def test_a_plain_login_may_be_bound() -> None:
    assert refusal(SERVICE) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"rolcanlogin": False}, "cannot log in"),
        ({"rolsuper": True}, "superuser"),
        ({"rolbypassrls": True}, "BYPASSRLS"),
        ({"rolcreaterole": True}, "CREATEROLE"),
        ({"app": True}, "awooop_app"),
        ({"platform": True}, "awooop_platform"),
    ],
)
def test_a_login_that_could_leave_the_binding_is_refused(
    change: dict[str, bool], reason: str
) -> None:
    why = refusal(msgspec.structs.replace(SERVICE, **change))
    assert why is not None and reason in why


def test_projects_are_ordinary_project_ids_never_the_platform() -> None:
    assert check_projects(["shop", "b", "shop"]) == ["shop", "b"]
    for bad in ([], [PLATFORM_PROJECT], ["shop", ""], ["-x"], ["a" * 65]):
        with pytest.raises(InvalidInputError):
            check_projects(bad)
