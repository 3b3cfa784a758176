"""The example of docs/workers.md's "Testing handlers" runs as written: its ``python`` code
blocks are executed as one module and each of its ``test_*`` functions is run here."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

WORKERS_DOC = Path(__file__).resolve().parents[2] / "docs" / "workers.md"
SECTION = "## Testing handlers\n"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def example_module() -> types.ModuleType:
    text = WORKERS_DOC.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    blocks = BLOCK.findall(text[start:end])
    assert blocks, "the section shows no python example"
    module = types.ModuleType("docs_testing_handlers")
    exec(compile("\n".join(blocks), str(WORKERS_DOC), "exec"), module.__dict__)  # noqa: S102
    return module


EXAMPLE = example_module()
TESTS = sorted(name for name in vars(EXAMPLE) if name.startswith("test_"))


def test_the_example_has_tests() -> None:
    assert len(TESTS) >= 2


@pytest.mark.parametrize("name", TESTS)
async def test_the_documented_example(name: str) -> None:
    await getattr(EXAMPLE, name)()
