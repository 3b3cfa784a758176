"""ops/lint/floors.py, the size, code-literal and import-name rules of ``make lint``, on trees
made in a temporary directory (no services needed)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script

PATH = Path(__file__).resolve().parents[2] / "ops" / "lint" / "floors.py"


@pytest.fixture(scope="module")
def floors() -> ModuleType:
    return load_script("ops/lint/floors.py", "floors")


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def lines(n: int) -> str:
    return "".join(f"x{i} = {i}\n" for i in range(n))


def test_a_runtime_module_over_400_lines_is_named(floors: ModuleType, tmp_path: Path) -> None:
    write(tmp_path, "awooop/big.py", lines(401))
    write(tmp_path, "streams/edge.py", lines(400))
    write(tmp_path, "projections/deep/big.py", lines(450))
    write(tmp_path, "tests/huge.py", lines(900))  # not runtime
    write(tmp_path, "awooop/templates/page.html", lines(900))  # not Python
    violations = floors.check(tmp_path)
    assert violations == [
        "floors: runtime modules over 400 lines (split them by job):",
        "  awooop/big.py: 401 lines",
        "  projections/deep/big.py: 450 lines",
    ]


def test_a_code_literal_outside_the_catalog_is_named(floors: ModuleType, tmp_path: Path) -> None:
    write(
        tmp_path,
        "awooop/http/route.py",
        '"""Answers E-RUN-003 for a missing run."""\n'
        "\n"
        "# a comment may name E-RUN-003\n"
        'MISSING = "E-RUN-003"\n'
        "\n"
        "def code(status: int) -> str:\n"
        '    """E-HTTP-<status>: the code of a bare HTTP error."""\n'
        '    return f"E-HTTP-{status}"\n'
        "\n"
        "class Answer:\n"
        "    '''E-INPUT-001 is named here, in a docstring.'''\n"
        "    code = 'E-INPUT-001'\n"
        '    text = "see E-INPUT-001"  # not a code literal: prose that mentions one\n',
    )
    write(tmp_path, "streams/ok.py", 'ERROR = "EVENT"\nSTAGE = "E-"\n')
    write(tmp_path, "awooop/core/errors.py", 'from x import y\nCODE = "E-RUN-003"\n')
    write(tmp_path, "awooop/core/error_catalog/runs.py", 'CODE = "E-RUN-004"\n')
    write(tmp_path, "tests/test_codes.py", 'assert code == "E-RUN-003"\n')
    violations = floors.check(tmp_path)
    assert violations[0].startswith("floors: error code literals outside the catalog")
    assert violations[1:] == [
        "  awooop/http/route.py:4: 'E-RUN-003'",
        "  awooop/http/route.py:8: 'E-HTTP-'",
        "  awooop/http/route.py:12: 'E-INPUT-001'",
    ]


def test_main_exits_1_on_a_violation_and_0_on_a_clean_tree(
    floors: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "awooop/ok.py", lines(3))
    assert floors.main(["floors.py", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
    write(tmp_path, "projections/bad.py", 'CODE = "E-REPLAY-001"\n')
    assert floors.main(["floors.py", str(tmp_path)]) == 1
    assert "projections/bad.py:1: 'E-REPLAY-001'" in capsys.readouterr().out


def test_an_import_of_a_linked_folder_by_its_own_name_is_named(
    floors: ModuleType, tmp_path: Path
) -> None:
    write(tmp_path, "awooop/ok.py", "from awooop.streams import keys\nimport awooop.projections\n")
    write(tmp_path, "streams/inner.py", "from . import keys\nfrom .keys import shard_of\n")
    write(
        tmp_path, "tests/t.py", "import os, streams.keys as k\n\ndef f():\n    import projections\n"
    )
    write(tmp_path, "ops/bench/b.py", "from projections.replay import replay\nimport streamsx\n")
    write(tmp_path, "docs/a.md", "```python\nfrom streams.consumer import Delivery\n```\n")
    write(tmp_path, "README.md", "Read `streams.md`; import awooop.streams.\n")
    violations = floors.check(tmp_path)
    assert violations[0].startswith("floors: imports of streams/projections by their folder")
    assert violations[1:] == [
        "  tests/t.py:1: streams.keys",
        "  tests/t.py:4: projections",
        "  ops/bench/b.py:1: projections.replay",
        "  docs/a.md:2: from streams",
    ]


def test_line_count_is_wc_l(floors: ModuleType) -> None:
    assert [floors.line_count(t) for t in ("", "a\n", "a\nb", "a\nb\n")] == [0, 1, 2, 2]


def test_the_tree_itself_passes(floors: ModuleType) -> None:
    root = PATH.parents[2]
    violations = floors.check(root)
    assert violations == []
