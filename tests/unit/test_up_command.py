"""``awooop up`` says where to go, and its help shows its defaults."""

from __future__ import annotations

from awooop.cli import build_parser
from awooop.commands.up import DEFAULT_HANDLER, urls
from tests.unit.test_cli_polish import commands


def test_up_prints_the_console_api_and_metrics_urls() -> None:
    lines = urls("0.0.0.0", 8080, None).splitlines()  # noqa: S104 - a host name, not a bind
    assert lines == [
        "up: console http://127.0.0.1:8080/ui",
        "up: API     http://127.0.0.1:8080/v1 (routes: docs/reference.md)",
        "up: metrics http://127.0.0.1:8080/metrics",
    ]
    assert (
        urls("10.0.0.5", 9000, 9100).splitlines()[-1] == "up: metrics http://10.0.0.5:9100/metrics"
    )


def test_up_help_shows_defaults_and_takes_an_approval_notifier() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["up", "--approval-notifier", "awooop.examples.handlers:notify_approval"]
    )
    assert args.approval_notifier == "awooop.examples.handlers:notify_approval"
    assert args.workers == 2 and args.handler == DEFAULT_HANDLER
    help_text = " ".join(dict(commands(parser))[("up",)].format_help().split())
    assert "(default: 2)" in help_text and f"(default: {DEFAULT_HANDLER})" in help_text
