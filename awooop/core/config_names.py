"""How a setting is named in the environment, and the check of a URL setting
(:mod:`awooop.core.config`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from awooop.core.errors import ConfigError

ENV_PREFIX = "AWOOOP_"
SPECIAL_ENV_NAMES = {"loop_project_id": "LOOP_PROJECT_ID"}


def env_name(field: str) -> str:
    return SPECIAL_ENV_NAMES.get(field, ENV_PREFIX + field.upper())


def check_url(field: str, value: str, schemes: tuple[str, ...]) -> None:
    """A URL of one of ``schemes`` with a host; a Postgres URL may name several hosts
    (``postgresql://h1:p1,h2:p2/db?target_session_attrs=read-write``: connect to whichever is
    the primary, as libpq and asyncpg do), each checked on its own."""
    parts = urlsplit(value)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    several = "postgresql" in schemes and "," in hosts
    for host in hosts.split(",") if several else [hosts]:
        netloc = f"{userinfo}@{host}" if userinfo else host
        one = parts._replace(netloc=netloc)
        if parts.scheme not in schemes or not one.hostname:
            raise ConfigError(
                f"{env_name(field)} must be a URL like {schemes[0]}://host:port/..., got {value!r}"
            )
        try:
            _ = one.port
        except ValueError as exc:
            raise ConfigError(f"{env_name(field)} has an invalid port: {value!r}") from exc
