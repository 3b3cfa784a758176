"""The dead-letter and operations pages and a run's approval forms in Chromium at a phone's
width: the page itself fits the screen (a wide table scrolls in its own box), the nav reaches
both lists, and a person approves from the phone with their name."""

from __future__ import annotations

from pathlib import Path

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError
from awooop.ingest import credentials
from awooop.runs import approvals, leases
from tests.acceptance.test_console_browser import CHROMIUM, console
from tests.integration.test_console_lists import dead_lettered, operation
from tests.support.runs import create_runs, load

P = "shop-orders"
PHONE = {"width": 390, "height": 844}

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
)


async def test_the_lists_and_the_approval_forms_fit_a_phone(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    _, manage = await credentials.create_management_token(db, P, "manage")
    [lettered] = await dead_lettered(db, P, 1, DeliveryLimitError.code)
    op = await operation(db, P, person="Olga")
    [waiting] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, waiting, "w1", 30)) is not None
    await db.in_tenant(
        P, lambda c: approvals.request(c, waiting, "w1", 1, name="go", reason="ship?", ttl_s=900)
    )
    async with console(settings) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await (await browser.new_context(viewport=PHONE)).new_page()
            await page.goto(f"{base}/ui/login")
            await page.fill("input[name=token]", manage)
            await page.click("button")
            await page.wait_for_url(f"{base}/ui/runs")

            async def fits(what: str) -> None:
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= PHONE["width"], f"{what}: the page is {width} px wide"
                await page.screenshot(path=str(tmp_path / f"{what}.png"), full_page=True)

            await page.click("header a[href='/ui/dead-letters']")
            await page.wait_for_url(f"{base}/ui/dead-letters")
            assert await page.inner_text("h1") == "Dead letters"
            assert str(lettered) in await page.inner_text("#dead-letters")
            await fits("dead-letters")

            await page.click("header a[href='/ui/operations']")
            await page.wait_for_url(f"{base}/ui/operations")
            assert str(op.operation_id) in await page.inner_text("#operations")
            await fits("operations")

            await page.goto(f"{base}/ui/runs/{P}/{waiting}")
            await fits("run")
            await page.click("#approve")  # no name: the browser asks for it first
            assert (await load(db, P, waiting)).status == "WAITING_APPROVAL"
            await page.fill("form.decide:has(#approve) input[name=by]", "Ann on a phone")
            await page.click("#approve")
            await page.wait_for_selector("#done")
            assert "Ann on a phone" in await page.inner_text("#approvals")
        finally:
            await browser.close()
    assert (await load(db, P, waiting)).status == "RESUMED"
