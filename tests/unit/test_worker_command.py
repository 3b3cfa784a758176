"""``awooop worker`` refuses a handler it cannot load with E-HANDLER-002 and a clear message."""

from __future__ import annotations

import pytest

from awooop.commands.worker import load_callable
from awooop.core.errors import HandlerNotFoundError
from awooop.examples import handlers


def test_an_async_function_loads() -> None:
    assert load_callable("awooop.examples.handlers:handle") is handlers.handle


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("awooop.examples.handlers", "package.module:function"),
        (":handle", "package.module:function"),
        ("no.such.module:handle", "cannot be imported"),
        ("awooop.examples.handlers:nothing", "has no 'nothing'"),
        ("awooop.examples.handlers:log", "async function"),
    ],
)
def test_bad_handlers_are_refused(spec: str, says: str) -> None:
    with pytest.raises(HandlerNotFoundError) as info:
        load_callable(spec)
    assert info.value.code == "E-HANDLER-002" and says in info.value.message
