"""A project's flow-control page in Chromium at a phone's width, without its script: reached
from the run list's filter bar, it fits the screen; the browser will not send a pause without
a reason; a person pauses the project and resumes it with the page's buttons."""

from __future__ import annotations

from pathlib import Path

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.runs import pauses
from tests.acceptance.test_console_browser import CHROMIUM, console
from tests.integration.test_console_flow import flow_set_up
from tests.support.webhooks import PROJECT as P

PHONE = {"width": 390, "height": 844}

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
)


async def test_an_operator_pauses_and_resumes_from_the_flow_page_on_a_phone(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    await flow_set_up(db, settings)
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with console(settings) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = await browser.new_context(viewport=PHONE, java_script_enabled=False)
            page = await context.new_page()
            await page.goto(f"{base}/ui/login")
            await page.fill("input[name=token]", manage)
            await page.click("button")
            await page.wait_for_url(f"{base}/ui/runs")
            await page.click("#flow")
            await page.wait_for_url(f"{base}/ui/projects/{P}/flow")
            assert await page.inner_text("h1") == f"Flow control of {P}"
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"the page is {width} px wide"
            await page.screenshot(path=str(tmp_path / "flow.png"), full_page=True)

            await page.click("#pause button")  # no reason: the browser asks for it first
            assert await db.in_platform(lambda c: pauses.listing(c, P)) == []
            await page.fill("#pause input[name=reason]", "provider outage")
            await page.fill("#pause input[name=actor]", "Olga")
            await page.click("#pause button")
            await page.wait_for_selector("#done")
            assert "provider outage" in await page.inner_text("#paused")
            [made] = await db.in_platform(lambda c: pauses.listing(c, P))
            assert (made.paused_by, made.reason) == ("Olga", "provider outage")

            await page.click("#paused button")
            await page.wait_for_selector("#not-paused")
            assert "resumed" in await page.inner_text("#done")
        finally:
            await browser.close()
    assert await db.in_platform(lambda c: pauses.listing(c, P)) == []
