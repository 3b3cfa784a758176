"""An operator's day in the console, in headless Chromium, against ``awooop serve``'s app with a
real relay and a real worker process running :func:`tests.support.operator_handlers.order`:

1. find why a run is stuck, and in which step (the list, then the run page's running step);
2. see a failed run's traceback and the step it failed in;
3. retry in bulk every FAILED run of one channel created in the last hour, leaving out one
   failure code (the preview lists the runs and their codes);
4. approve a waiting run with a manage session and a person's name, no approval token;
5. follow a live run to COMPLETED without reloading the page.

Each flow saves a screenshot (``operator-*.png``) in the test's folder, or in
``$AWOOOP_TEST_SCREENSHOTS`` (``docs`` renews docs/console.md's pictures).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError
from awooop.core.events import RunCreated
from awooop.eventlog.runs import create_run
from awooop.ingest import credentials
from awooop.runs import leases
from tests.acceptance.test_console_browser import CHROMIUM, SHOTS_ENV, console
from tests.support.runs import load
from tests.support.waiting import eventually
from tests.support.workers import workers

P = "shop-orders"
HANDLER = "tests.support.operator_handlers:order"

pytestmark = [
    pytest.mark.fast("processes"),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"no Chromium at {CHROMIUM}: run ops/install-test-deps.sh (make test does)",
    ),
]


async def submit(
    db: Database,
    order: dict[str, Any],
    *,
    channel: str = "api",
    max_attempts: int = 1,
    age: timedelta = timedelta(0),
) -> uuid.UUID:
    """One run of ``P`` through the write path, created ``age`` ago (its ``since`` position)."""
    run_id = uuid.uuid4()
    async with db.tenant(P) as conn:
        now = await conn.fetchval("SELECT now()")
        await create_run(
            conn,
            RunCreated(
                at=now - age,
                run_id=run_id,
                project_id=P,
                channel_type=channel,
                provider_event_id=f"order-{order.get('order', run_id)}",
                input=order,
                max_attempts=max_attempts,
            ),
        )
    return run_id


async def dead_lettered(db: Database) -> uuid.UUID:
    """A FAILED run of channel api whose work message a consumer gave up on (E-RUN-005)."""
    run_id = await submit(db, {"order": 7001}, max_attempts=3)
    # Its holder died: the lease ran out, then a consumer gave up on the message.
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "host:1:gone", 0.01))
    await asyncio.sleep(0.05)
    failed = await db.in_tenant(
        P,
        lambda c: leases.fail_undeliverable(
            c, run_id, "host:1:w2", "delivered 11 times (limit 10)", DeliveryLimitError.code
        ),
    )
    assert failed is not None
    return run_id


async def status_of(db: Database, run_id: uuid.UUID) -> str:
    return (await load(db, P, run_id)).status


@pytest.mark.long
@pytest.mark.connections(27)
async def test_an_operators_day(fast: Settings, db: Database, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    _, manage = await credentials.create_management_token(db, P, "manage")
    shots = Path(os.environ.get(SHOTS_ENV) or tmp_path)
    lettered = await dead_lettered(db)  # E-RUN-005: left out of the bulk retry
    async with console(fast) as base, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        with workers(fast, tmp_path, 1, handler=HANDLER, args=("--concurrency", "8")):
            stuck = await submit(db, {"order": 1001, "stuck": True})
            broken = await submit(db, {"order": 1002, "fail_attempts": [1]})
            declined = [await submit(db, {"order": 2000 + i, "fail_attempts": [1]}) for i in (1, 2)]
            other_channel = await submit(db, {"order": 3001, "fail_attempts": [1]}, channel="gitea")
            old = await submit(db, {"order": 3002, "fail_attempts": [1]}, age=timedelta(hours=2))
            waiting = await submit(db, {"order": 4001, "approval": True})
            failing = [broken, *declined, other_channel, old]

            seen: list[tuple[str, int, str | None]] = []

            async def settled() -> bool:
                states = [await load(db, P, r) for r in (*failing, waiting)]
                seen[:] = [(s.status, s.attempt_count, s.failure_code) for s in states]
                return [s for s, _, _ in seen] == ["FAILED"] * len(failing) + ["WAITING_APPROVAL"]

            try:
                await eventually(settled, timeout_s=60, what="failures and the approval settled")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; status, attempts, code of each: {seen}") from None
            page = await (
                await browser.new_context(viewport={"width": 1400, "height": 900})
            ).new_page()
            await page.goto(f"{base}/ui/login")
            await page.fill("input[name=token]", manage)
            await page.click("button:has-text('Log in')")
            await page.wait_for_url(f"{base}/ui/runs")

            # 1. Why is a run stuck, and where? The list's RUNNING runs, then the run page.
            await page.select_option("select[name=status]", "RUNNING")
            await page.click("text=Filter")
            await page.wait_for_url("**status=RUNNING**")
            await page.click(f"text={stuck}")
            await page.wait_for_url(f"**/ui/runs/{P}/{stuck}")

            async def in_step() -> bool:
                # The running step reaches the server with the lease's next renewal.
                found = page.locator("#current-step")
                return await found.count() == 1 and "reserve_stock" in await found.inner_text()

            await eventually(in_step, timeout_s=30, what="the page names the running step")
            assert "RUNNING" in await page.inner_text("#status")
            await page.screenshot(path=str(shots / "operator-stuck.png"), full_page=True)

            # 2. A failed run's traceback and the step it failed in.
            await page.goto(f"{base}/ui/runs/{P}/{broken}")
            assert await page.inner_text("#failure-step") == "charge"
            traceback = await page.inner_text("#traceback")
            assert "StockError" in traceback and "_declined" in traceback
            assert "could not reserve order lines for order 1002" in traceback
            await page.screenshot(path=str(shots / "operator-traceback.png"), full_page=True)

            # 3. Retry every FAILED run of channel api created in the last hour, but not the
            # dead-lettered one: the preview lists the runs and their failure codes.
            await page.goto(f"{base}/ui/runs")
            await page.select_option("select[name=status]", "FAILED")
            await page.select_option("select[name=channel]", "api")
            await page.fill("input[name=since]", "1h")
            await page.click("text=Filter")
            await page.wait_for_url("**since=1h**")
            await page.click("#bulk-retry")
            await page.wait_for_url("**/ui/bulk/retry**")
            assert await page.inner_text("#total") == "4"  # broken, declined x2, lettered
            codes = await page.inner_text("#failure-codes")
            assert DeliveryLimitError.code in codes
            listed = await page.inner_text("#preview-runs")
            assert all(str(r) in listed for r in (broken, *declined, lettered))
            assert str(other_channel) not in listed and str(old) not in listed
            await page.check(f"input[name=exclude_codes][value={DeliveryLimitError.code}]")
            await page.click("#exclude")
            await page.wait_for_url("**exclude_codes=**")
            assert await page.inner_text("#total") == "3"
            assert str(lettered) not in await page.inner_text("#preview-runs")
            await page.screenshot(path=str(shots / "operator-bulk-preview.png"), full_page=True)
            await page.fill("input[name=actor]", "Olga")
            await page.click("#confirm")
            await page.wait_for_url("**/ui/operations/**")
            retried = [broken, *declined]

            async def retried_completed() -> bool:
                return [await status_of(db, r) for r in retried] == ["COMPLETED"] * 3

            await eventually(retried_completed, timeout_s=60, what="the retried runs completed")
            for untouched in (lettered, other_channel, old):
                assert await status_of(db, untouched) == "FAILED"

            # 4. Approve a waiting run with the session and a name: no approval token.
            await page.goto(f"{base}/ui/runs/{P}/{waiting}")
            approve = page.locator("form:has(#approve)")
            await approve.locator("input[name=by]").fill("Ana Ruiz")
            await page.screenshot(path=str(shots / "operator-approve.png"), full_page=True)
            await page.click("#approve")
            await page.wait_for_selector("#done")

            async def approved_completed() -> bool:
                return await status_of(db, waiting) == "COMPLETED"

            await eventually(approved_completed, timeout_s=60, what="the approved run completed")
            await page.reload()
            assert "Ana Ruiz" in await page.inner_text("#approvals")

            # 5. Follow a live run to COMPLETED: the page updates itself, no reload.
            live = await submit(db, {"order": 5001, "step_s": 0.5, "packs": 4})
            await page.goto(f"{base}/ui/runs/{P}/{live}")
            await page.evaluate("window.__sameDocument = true")
            # Selectors, not wait_for_function: the console's CSP forbids eval.
            await page.wait_for_selector("#status:has-text('COMPLETED')", timeout=60_000)
            await page.wait_for_selector("html[data-live=final]", state="attached", timeout=30_000)
            assert await page.evaluate("window.__sameDocument === true")  # never reloaded
            assert "pack_3" in await page.inner_text("#steps")
            await page.screenshot(path=str(shots / "operator-live.png"), full_page=True)
        await browser.close()
