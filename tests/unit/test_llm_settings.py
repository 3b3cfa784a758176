"""Settings of the model gateway and the pointer check are validated at start."""

from __future__ import annotations

import pytest

from awooop.core.config import load_settings
from awooop.core.errors import ConfigError


def test_defaults() -> None:
    settings = load_settings(environ={})
    assert (settings.llm_url, settings.llm_max_connections, settings.pointer_check_connections) == (
        "local:",
        16,
        2,
    )


@pytest.mark.parametrize(
    "url", ["local:", "local:?delay_ms=1", "http://127.0.0.1:11434", "https://ollama.internal"]
)
def test_model_urls_accepted(url: str) -> None:
    assert load_settings(environ={"AWOOOP_LLM_URL": url}).llm_url == url


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AWOOOP_LLM_URL": "ftp://host"}, "AWOOOP_LLM_URL"),
        ({"AWOOOP_LLM_URL": "http://host:port"}, "AWOOOP_LLM_URL"),
        ({"AWOOOP_LLM_MAX_CONNECTIONS": "0"}, "AWOOOP_LLM_MAX_CONNECTIONS"),
        ({"AWOOOP_POINTER_CHECK_CONNECTIONS": "0"}, "AWOOOP_POINTER_CHECK_CONNECTIONS"),
        ({"AWOOOP_LLM_DEFAULT_MODEL": ""}, "AWOOOP_LLM_DEFAULT_MODEL"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ=env)
    assert named in info.value.message
