"""Three rules of the tree that ruff and mypy do not know, checked by ``make lint``:

- no runtime module (``.py`` under awooop, streams, projections) is over 400 lines: a module
  that grows past that is split by job;
- every error code comes from the catalog (``awooop/core/errors.py``, the classes in
  ``awooop/core/error_catalog/``): a string literal that starts with a code (``"E-RUN-004"``,
  ``f"E-HTTP-{status}"``) anywhere else in the runtime is refused. Docstrings and comments may
  name codes;
- the modules of the folders ``streams/`` and ``projections/`` are imported as
  ``awooop.streams`` and ``awooop.projections`` only (``awooop/streams`` and
  ``awooop/projections`` link to them): an ``import streams...`` or ``from projections...``
  anywhere in the Python code (runtime, tests, ops) is refused, as is one in a line of the docs'
  code (README.md, docs/). From the checkout's folder both names would import, and a module
  imported by both would be two modules in one process; an installed wheel has only the first.

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
LINKED = ("streams", "projections")  # folders awooop links in: awooop.streams, awooop.projections
PYTHON = ("awooop", "streams", "projections", "tests", "ops")
DOCS = ("README.md", "docs")
DOC_IMPORT = re.compile(rf"^\s*(?:from|import)\s+(?:{'|'.join(LINKED)})\b", re.MULTILINE)


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


def top_level_imports(source: str) -> list[tuple[int, str]]:
    """Pure: (line, module) of each import in ``source`` of a linked folder's module by its
    top-level name (``import streams.keys``, ``from projections import registry``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in LINKED]
    return sorted(found)


def imports_by_old_names(root: Path) -> list[str]:
    """The imports of a linked folder's module by its top-level name in the Python code and the
    docs under ``root``, each a line to print."""
    found = []
    for top in PYTHON:
        for path in sorted((root / top).rglob("*.py")):
            text = path.read_text("utf-8")
            name = path.relative_to(root).as_posix()
            found += [f"  {name}:{n}: {module}" for n, module in top_level_imports(text)]
    docs = [root / d for d in DOCS if (root / d).is_file()]
    docs += [p for d in DOCS if (root / d).is_dir() for p in sorted((root / d).rglob("*.md"))]
    for path in docs:
        text = path.read_text("utf-8")
        for match in DOC_IMPORT.finditer(text):
            lineno = text.count("\n", 0, match.start()) + 1
            found.append(
                f"  {path.relative_to(root).as_posix()}:{lineno}: {match.group(0).strip()}"
            )
    return found


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
    old = imports_by_old_names(root)
    if old:
        violations.append(
            "floors: imports of streams/projections by their folder's name "
            "(import awooop.streams, awooop.projections):"
        )
        violations += old
    return violations


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2]
    violations = check(root)
    for line in violations:
        print(line)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
