"""The code version of a worker's handler: what each of its claims records, and what a
contract's required versions are compared with (:mod:`awooop.runs.versions`).

The first of these that is there is the version, checked (E-VERSION-001 at start, nothing
written):

1. given: ``awooop worker --handler-version V``, else ``AWOOOP_HANDLER_VERSION`` (a release's
   git commit, a build number: what a deploy knows);
2. declared by the code: ``__awooop_version__`` on the handler function, else on its module;
3. derived: ``sha256:`` and the first 12 hex digits of the SHA-256 of the handler's module's
   source file (of its compiled code where there is no source). It changes with any change
   to that file, and only to that file: a handler whose steps live in other modules should
   declare or be given its version.
"""

from __future__ import annotations

import hashlib
import inspect
import marshal
import sys
from typing import Any

import msgspec

from awooop.core.config import Settings
from awooop.runs.routing import Routes
from awooop.runs.versions import check_version

ATTRIBUTE = "__awooop_version__"
DERIVED_PREFIX = "sha256:"
DERIVED_DIGITS = 12


def declared_version(handler: Any) -> str | None:
    """The version the handler (or its module) declares, checked; None when neither does."""
    module = sys.modules.get(getattr(handler, "__module__", None) or "")
    for owner, where in ((handler, "the handler's"), (module, "its module's")):
        value = getattr(owner, ATTRIBUTE, None) if owner is not None else None
        if value is not None:
            return check_version(value, f"{where} {ATTRIBUTE}")
    return None


def source_of(handler: Any) -> bytes:
    """The bytes the derived version hashes: the handler's module's source file, else its
    compiled code, else its qualified name."""
    target = inspect.unwrap(handler)
    module = inspect.getmodule(target)
    if module is not None:
        try:
            path = inspect.getsourcefile(module)
        except TypeError:  # a built-in module
            path = None
        if path:
            try:
                with open(path, "rb") as source:
                    return source.read()
            except OSError:
                pass
    code = getattr(target, "__code__", None)
    if code is not None:
        return marshal.dumps(code)
    return f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', '')}".encode()


def derived_version(handler: Any) -> str:
    """The version derived from the handler's module's source (see the module docstring)."""
    digest = hashlib.sha256(source_of(handler)).hexdigest()
    return DERIVED_PREFIX + digest[:DERIVED_DIGITS]


def version_of(handler: Any, given: str | None = None) -> str:
    """The handler's version: ``given`` (checked: an empty one too) unless None, else declared,
    else derived."""
    if given is not None:
        return check_version(given, "--handler-version (or AWOOOP_HANDLER_VERSION)")
    return declared_version(handler) or derived_version(handler)


def versioned(routes: Routes, handler: Any, settings: Settings) -> Routes:
    """``routes`` with the handler's version: kept when the routes already carry one (the
    worker command resolved it), else ``AWOOOP_HANDLER_VERSION``, declared or derived."""
    if routes.version is not None:
        return routes
    given = settings.handler_version or None  # the setting's "" is "not given"
    return msgspec.structs.replace(routes, version=version_of(handler, given))
