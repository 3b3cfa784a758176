"""Two rules of the tree that ruff and mypy do not know, checked by ``make lint``:

- no runtime module (``.py`` under awooop, streams, projections) is over 400 lines: a module
  that grows past that is split by job;
- every error code comes from the catalog (``awooop/core/errors.py``, the classes in
  ``awooop/core/error_catalog/``): a string literal that starts with a code (``"E-RUN-004"``,
  ``f"E-HTTP-{status}"``) anywhere else in the runtime is refused. Docstrings and comments may
  name codes.

    python ops/lint/floors.py [ROOT]

Prints each violation and exits 1, or prints nothing and exits 0. No path is exempt. Standard
library only: it runs before anything is installed.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 400
RUNTIME = ("awooop", "streams", "projections")
CATALOG = ("awooop/core/errors.py", "awooop/core/error_catalog/")
CODE = re.compile(r"E-[A-Z]")


def runtime_modules(root: Path) -> Iterator[Path]:
    """The runtime's ``.py`` files under ``root``, as paths relative to it, in order."""
    for package in RUNTIME:
        for path in sorted((root / package).rglob("*.py")):
            yield path.relative_to(root)


def line_count(text: str) -> int:
    """Pure: lines as ``wc -l`` counts them (a last line without a newline counts too)."""
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def in_catalog(relative: Path) -> bool:
    name = relative.as_posix()
    return any(name == c or (c.endswith("/") and name.startswith(c)) for c in CATALOG)


def docstrings(tree: ast.AST) -> set[int]:
    """Pure: the ids of the string nodes that are docstrings (module, class, function)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def code_literals(source: str) -> list[tuple[int, str]]:
    """Pure: (line, literal) of each string literal in ``source`` that starts with an error
    code (an f-string's leading text counts); docstrings are left alone."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and CODE.match(node.value)
        ):
            found.append((node.lineno, node.value))
    return sorted(found)


def check(root: Path) -> list[str]:
    """The violations of the tree at ``root``, each a line to print."""
    oversized: list[str] = []
    literals: list[str] = []
    for relative in runtime_modules(root):
        name = relative.as_posix()
        text = (root / relative).read_text("utf-8")
        lines = line_count(text)
        if lines > MAX_LINES:
            oversized.append(f"  {name}: {lines} lines")
        if not in_catalog(relative):
            for lineno, value in code_literals(text):
                literals.append(f"  {name}:{lineno}: {value[:40]!r}")
    violations = []
    if oversized:
        violations.append(f"floors: runtime modules over {MAX_LINES} lines (split them by job):")
        violations += oversized
    if literals:
        violations.append(
            "floors: error code literals outside the catalog "
            "(use the class from awooop.core.errors; add new codes in awooop/core/error_catalog/):"
        )
        violations += literals
    return violations


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2]
    violations = check(root)
    for line in violations:
        print(line)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
