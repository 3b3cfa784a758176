"""docs/requirements.md stays true to SPEC.md, the tests and the code (no services needed).

- Every requirement id of SPEC.md (``- R-11 ...`` lines) has a section in the doc. SPEC.md lives
  beside the repository (``../shared/SPEC.md``); on a checkout without it that check is skipped.
- Every ``tests/...py::name`` the doc cites names an existing file that defines ``def name`` or
  ``async def name`` (read as text: no test module is imported).
- Every backticked ``.py`` or ``.sql`` path the doc cites exists in the repository.
- The doc's sections are in SPEC order, each id once, and each cites at least one test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "requirements.md"
SPEC = Path(__file__).resolve().parents[3] / "shared" / "SPEC.md"

# A requirement line of SPEC.md: "- R-11 `awooop_run_state` carries ...". Two digits only, so
# that longer numbers SPEC.md cites are never taken for requirement ids.
SPEC_ID = re.compile(r"^\s*-\s+(R-\d\d)\b", re.MULTILINE)
# A requirement section of the doc: "### R-11 Lease columns ..." (or a table row "| R-11 |").
DOC_ID = re.compile(r"^(?:#+\s+|\|\s*)(R-\d\d)\b", re.MULTILINE)
SECTION = re.compile(r"^###\s+(R-\d\d)\b", re.MULTILINE)
TEST_REF = re.compile(r"\b(tests/[\w./-]+?\.py)::(\w+)")
# A module or migration path in backticks: `awooop/runs/run_rows.py`,
# `migrations/0003_run_state.sql`.
MODULE_PATH = re.compile(r"`((?:[\w.-]+/)*[\w-]+\.(?:py|sql))`")


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def spec_ids() -> list[str]:
    if not SPEC.is_file():
        pytest.skip(f"{SPEC} not found (a checkout without ../shared): SPEC ids not checked")
    ids = SPEC_ID.findall(SPEC.read_text(encoding="utf-8"))
    assert ids, f"no requirement ids (lines like '- R-01 ...') found in {SPEC}"
    return ids


def sections(text: str) -> dict[str, str]:
    """Each requirement section's text, by id (a repeated id keeps its last section)."""
    found: dict[str, str] = {}
    matches = list(SECTION.finditer(text))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(text)
        found[match.group(1)] = text[match.start() : end]
    return found


def defines(path: Path, name: str) -> bool:
    pattern = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", re.MULTILINE)
    return pattern.search(path.read_text(encoding="utf-8")) is not None


def test_every_spec_requirement_has_a_section() -> None:
    ids = spec_ids()
    documented = set(DOC_ID.findall(doc_text()))
    missing = [i for i in ids if i not in documented]
    assert missing == [], f"requirements of SPEC.md without a section in {DOC.name}: {missing}"


def test_the_doc_names_no_requirement_that_spec_lacks() -> None:
    ids = set(spec_ids())
    unknown = sorted(set(DOC_ID.findall(doc_text())) - ids)
    assert unknown == [], f"{DOC.name} has sections for ids SPEC.md does not define: {unknown}"


def test_cited_tests_exist() -> None:
    refs = TEST_REF.findall(doc_text())
    assert len(refs) >= 32, f"only {len(refs)} test references found in {DOC.name}"
    problems: list[str] = []
    for relative, name in sorted(set(refs)):
        path = ROOT / relative
        if not path.is_file():
            problems.append(f"{relative}: no such file")
        elif not defines(path, name):
            problems.append(f"{relative}::{name}: no 'def {name}' or 'async def {name}'")
    assert problems == [], "\n".join(problems)


def test_cited_modules_exist() -> None:
    cited = set(MODULE_PATH.findall(doc_text()))
    assert cited, f"no module paths in backticks found in {DOC.name}"
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert missing == [], f"paths cited in {DOC.name} that do not exist: {missing}"


def test_sections_are_in_order_once_each_and_cite_a_test() -> None:
    text = doc_text()
    order = SECTION.findall(text)
    assert order, f"no '### R-xx' sections in {DOC.name}"
    assert len(order) == len(set(order)), f"an id has two sections: {order}"
    assert order == sorted(order), f"sections not in SPEC order: {order}"
    untested = [rid for rid, body in sections(text).items() if not TEST_REF.search(body)]
    assert untested == [], f"sections that cite no test: {untested}"
