"""A run's streamed output on the console's run page, in a real browser (headless Chromium,
as tests/acceptance/test_console_browser.py): the page shows what was written, the script
appends each chunk as it is flushed, marks the first attempt abandoned when a second one takes
the run, and closes at the end, when the live page swaps itself whole without a chunk twice.

Skipped, saying so, only where no Chromium is installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import shutil
import uuid

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunCompleted
from awooop.ingest import credentials
from awooop.runs import leases, output_log
from tests.acceptance.test_console_browser import CHROMIUM, console
from tests.support.runs import create_runs

P = "shop-stream"

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None,
    reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does)",
)


async def emit(db: Database, run_id: uuid.UUID, worker: str, attempt: int, text: str) -> None:
    found = await db.in_run_statement(
        lambda c: output_log.append(
            c, run_id, worker, attempt, text, len(text.encode()), truncated=False, max_bytes=10**6
        )
    )
    assert found.written is not None


async def test_the_run_page_follows_the_output_live(settings: Settings, db: Database) -> None:
    from playwright.async_api import async_playwright

    live = msgspec.structs.replace(settings, console_live_s=0.5)
    _, read = await credentials.create_management_token(db, P, "read")
    [run_id] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "w1", 60))
    await emit(db, run_id, "w1", 1, "<i>first</i> ")
    async with console(live) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            await page.goto(f"{base}/ui/login")
            await page.fill("input[name=token]", read)
            await page.click("button:has-text('Log in')")
            await page.wait_for_url(f"{base}/ui/runs")
            await page.goto(f"{base}/ui/runs/{P}/{run_id}")
            block = page.locator('#output .output-attempt[data-attempt="1"] pre')
            assert await block.text_content() == "<i>first</i> "  # as served, escaped
            await page.wait_for_selector('html[data-output="open"]', state="attached")
            await emit(db, run_id, "w1", 1, "second ")
            await page.wait_for_selector('html[data-output-seq="2"]', state="attached")
            assert await block.text_content() == "<i>first</i> second "

            # Attempt 1's lease runs out (its clock moved back: no waiting for it); attempt 2
            # takes the run and streams from the top.
            async with db.platform_writes() as conn:
                await conn.execute(
                    "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
                    "WHERE run_id = $1",
                    run_id,
                )
            taken = await db.in_tenant(P, lambda c: leases.take_expired(c, run_id, "w2", 30))
            assert taken is not None and taken.claimed and taken.state.attempt_count == 2
            await emit(db, run_id, "w2", 2, "again")
            await page.wait_for_selector('html[data-output-seq="3"]', state="attached")
            first = page.locator('#output .output-attempt[data-attempt="1"]')
            assert "abandoned" in (await first.get_attribute("class") or "")
            second = page.locator('#output .output-attempt[data-attempt="2"] pre')
            assert await second.text_content() == "again"

            await db.in_tenant(
                P,
                lambda c: leases.fenced_record(
                    c,
                    run_id,
                    "w2",
                    2,
                    lambda _s, now: RunCompleted(at=now, worker_id="w2", attempt=2, result={}),
                ),
            )
            await page.wait_for_selector('html[data-output="end"]', state="attached")
            await page.wait_for_selector('html[data-live="final"]', state="attached")
            # The page swapped in whole once the run was final: every chunk once.
            assert await second.text_content() == "again"
            assert await block.text_content() == "<i>first</i> second "
            assert await page.locator("#output .output-attempt").count() == 2
        finally:
            await browser.close()
