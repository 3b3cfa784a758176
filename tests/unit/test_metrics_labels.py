"""Labelled counters exist from the first scrape at 0 for every known label value, and every
literal label value the code increments is one of those known values."""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client import REGISTRY, Counter

from awooop.core import metrics

ROOT = Path(__file__).resolve().parents[2]


def test_known_label_values_are_exported_at_zero_before_any_increment() -> None:
    for counter, values in metrics.KNOWN_LABELS.items():
        for labels in values:
            sample = REGISTRY.get_sample_value(
                f"{counter._name}_total", dict(zip(counter._labelnames, labels, strict=True))
            )
            assert sample is not None, (counter._name, labels)


def literal_label_uses() -> list[tuple[str, str, tuple[str | None, ...]]]:
    """(file:line, metric constant, label arguments: the literal, else None) of every
    ``metrics.NAME.labels(...)`` call in the three packages."""
    uses = []
    for package in ("awooop", "streams", "projections"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "labels"
                    and isinstance(node.func.value, ast.Attribute)
                    and isinstance(node.func.value.value, ast.Name)
                    and node.func.value.value.id == "metrics"
                ):
                    continue
                args = tuple(
                    a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
                    for a in node.args
                )
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                uses.append((where, node.func.value.attr, args))
    return uses


def test_every_literal_label_value_in_the_code_is_known() -> None:
    known = {
        name: set(metrics.KNOWN_LABELS[counter])
        for name, counter in vars(metrics).items()
        if isinstance(counter, Counter) and counter in metrics.KNOWN_LABELS
    }
    uses = literal_label_uses()
    assert len(uses) > 10
    unknown = []
    for where, name, args in uses:
        if name not in known:
            continue
        if not any(
            all(a is None or a == k for a, k in zip(args, labels, strict=True))
            for labels in known[name]
        ):
            unknown.append((where, name, args))
    assert unknown == [], "add these label values to metrics.KNOWN_LABELS"
