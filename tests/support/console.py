"""Logging in to the run console as a browser does (the tests and the console benchmarks)."""

from __future__ import annotations

import re

import httpx

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: httpx.Response) -> str:
    """The CSRF token a console page's forms carry."""
    found = CSRF.search(page.text)
    assert found is not None, page.text[:300]
    return found.group(1)


async def log_in(http: httpx.AsyncClient, token: str) -> httpx.Response:
    """Log in through the form with ``token``; the answer (303 to the run list)."""
    page = await http.get("/ui/login")
    answer = await http.post(
        "/ui/login", data={"csrf": csrf_of(page), "token": token, "next": "/ui/runs"}
    )
    assert answer.status_code == 303, answer.text
    return answer
