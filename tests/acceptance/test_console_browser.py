"""The run console in a real browser: headless Chromium from Debian's packages
(``/usr/bin/chromium``; ``make test`` installs it) driven by Playwright for Python, against the
console served by uvicorn on a free port, with a real worker process and relay.

A manage token logs in, filters the list to FAILED, opens the failed run, sees its timeline and
blocked_on, retries it and sees it complete; a read token sees the pages without action buttons
and is refused on a forged POST; another project's token sees nothing of the project. The list
and run pages are saved as console-runs.png and console-run.png (in the test's folder, or in
``$AWOOOP_TEST_SCREENSHOTS``: ``AWOOOP_TEST_SCREENSHOTS=docs`` renews docs/console.md's pictures).

Skipped, saying so, only where no Chromium is installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError
from awooop.demo.servers import free_port
from awooop.http.app import create_app
from awooop.http.server import server_config
from awooop.ingest import credentials
from awooop.runs import leases
from awooop.services import Services
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import workers

CHROMIUM = os.environ.get("AWOOOP_TEST_CHROMIUM", "/usr/bin/chromium")
# Where the list and run screenshots go: docs/ when asked (they are docs/console.md's pictures).
SHOTS_ENV = "AWOOOP_TEST_SCREENSHOTS"
P, Q = "shop-orders", "billing"

pytestmark = [
    pytest.mark.fast("processes"),
    pytest.mark.skipif(
        shutil.which(CHROMIUM) is None,
        reason=f"no Chromium at {CHROMIUM}: run ops/install-test-deps.sh (make test does)",
    ),
]


@asynccontextmanager
async def console(settings: Settings) -> AsyncIterator[str]:
    """``awooop serve``'s app and server configuration on a free port; its base URL."""
    services = await Services.open(settings)
    port = free_port()
    server = uvicorn.Server(
        server_config(create_app(services), settings, host="127.0.0.1", port=port)
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag, no event
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        await services.close()


async def failed_run(db: Database, project: str) -> uuid.UUID:
    [run_id] = await create_runs(db, project, payload={"order": 1042})
    assert await db.in_tenant(project, lambda c: leases.claim(c, run_id, "host:1:w1", 0.01))
    await asyncio.sleep(0.05)
    failed = await db.in_tenant(
        project,
        lambda c: leases.fail_undeliverable(
            c,
            run_id,
            "host:1:w2",
            "work message delivered 11 times (limit 10); dead-lettered",
            DeliveryLimitError.code,
        ),
    )
    assert failed is not None
    return run_id


@pytest.mark.connections(26)
async def test_log_in_filter_open_retry_and_see_it_complete(
    fast: Settings, db: Database, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    _, manage = await credentials.create_management_token(db, P, "manage")
    _, read = await credentials.create_management_token(db, P, "read")
    _, other = await credentials.create_management_token(db, Q, "manage")
    shots = Path(os.environ.get(SHOTS_ENV) or tmp_path)
    failed = await failed_run(db, P)
    done = await create_runs(db, P, 2)
    async with console(fast) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            with workers(fast, tmp_path, 1) as _procs:
                await eventually(
                    lambda: all_done(db, done), timeout_s=60, what="the other runs completed"
                )
                page = await (
                    await browser.new_context(viewport={"width": 1400, "height": 800})
                ).new_page()
                await page.goto(f"{base}/ui/runs")
                assert "/ui/login" in page.url
                await page.fill("input[name=token]", manage)
                await page.click("button:has-text('Log in')")
                await page.wait_for_url(f"{base}/ui/runs")
                await page.select_option("select[name=status]", "FAILED")
                await page.click("text=Filter")
                await page.wait_for_url("**status=FAILED**")
                rows = page.locator("#runs tr")
                assert await rows.count() == 2  # the header and the failed run
                assert "failed_dead_lettered" in await rows.nth(1).inner_text()
                await page.screenshot(path=str(shots / "console-runs.png"))
                await page.click(f"text={failed}")
                await page.wait_for_url(f"**/ui/runs/{P}/{failed}")
                blocked = await page.inner_text("#blocked-on")
                assert "failed_dead_lettered" in blocked and "E-RUN-005" in blocked
                timeline = await page.inner_text("#timeline")
                assert "RunCreated" in timeline and "RunFailed" in timeline
                await page.screenshot(path=str(shots / "console-run.png"), full_page=True)
                await page.click("#retry")
                await page.wait_for_selector("#done")

                async def completed() -> bool:
                    await page.reload()
                    return (await page.inner_text("#status")) == "COMPLETED"

                await eventually(completed, timeout_s=60, what="the retried run completed")
                assert "RunRetried" in await page.inner_text("#timeline")
                assert "nothing" in await page.inner_text("#blocked-on")
                assert "manage-token:" in await page.inner_text("#timeline")
            assert (await load(db, P, failed)).status == "COMPLETED"

            # A read token: the pages, no action, a forged POST refused.
            second = await failed_run(db, P)
            reader = await (await browser.new_context()).new_page()
            await reader.goto(f"{base}/ui/login")
            await reader.fill("input[name=token]", read)
            await reader.click("button:has-text('Log in')")
            await reader.goto(f"{base}/ui/runs/{P}/{second}")
            assert "failed_dead_lettered" in await reader.inner_text("#blocked-on")
            assert await reader.locator("#actions").count() == 0
            assert await reader.locator("button#retry").count() == 0
            csrf = await reader.get_attribute("input[name=csrf]", "value")
            forged = await reader.request.post(
                f"{base}/ui/runs/{P}/{second}/retry", form={"csrf": csrf or ""}
            )
            assert forged.status == 403 and "E-AUTH-004" in await forged.text()
            assert (await load(db, P, second)).status == "FAILED"

            # Another project's token: nothing of P.
            stranger = await (await browser.new_context()).new_page()
            await stranger.goto(f"{base}/ui/login")
            await stranger.fill("input[name=token]", other)
            await stranger.click("button:has-text('Log in')")
            await stranger.wait_for_url(f"{base}/ui/runs")
            listing = await stranger.inner_text("#runs")
            assert str(failed) not in listing and str(second) not in listing
            answer = await stranger.goto(f"{base}/ui/runs/{P}/{second}")
            assert answer is not None and answer.status == 403
            answer = await stranger.goto(f"{base}/ui/runs/{Q}/{second}")
            assert answer is not None and answer.status == 404
        finally:
            await browser.close()


async def all_done(db: Database, run_ids: list[uuid.UUID]) -> bool:
    return all([(await load(db, P, r)).status == "COMPLETED" for r in run_ids])
