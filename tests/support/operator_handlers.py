"""An order handler for the operator's flows in the browser: journaled steps driven by the
run's input, so that one worker can hold a run stuck inside a step, fail one with a traceback,
wait for an approval and complete a slow run while the page watches.

Input keys of :func:`order`: ``stuck`` (the ``reserve_stock`` step never returns, until the
attempt is cancelled), ``approval`` (wait for approval ``ship`` after reserving), ``fail_attempts``
(attempts whose ``charge`` step raises ``ValueError``), ``step_s`` (seconds each of ``charge``
and the ``pack_*`` steps takes), ``packs`` (how many ``pack_*`` steps follow ``charge``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from awooop.worker.context import RunContext


class StockError(ValueError):
    """What a failing ``charge`` step raises: the traceback the console must show."""


def _declined(order: object) -> None:
    raise StockError(f"could not reserve order lines for order {order}")


async def order(run: RunContext) -> dict[str, Any]:
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    pause = float(options.get("step_s", 0.0))

    async def reserve_stock() -> dict[str, int]:
        if options.get("stuck"):
            await asyncio.sleep(3600)
        return {"lines": int(options.get("lines", 1))}

    reserved = await run.step("reserve_stock", reserve_stock)
    if options.get("approval"):
        await run.wait_for_approval("ship", reason="ship the order?")

    async def charge() -> dict[str, bool]:
        await asyncio.sleep(pause)
        if run.attempt in options.get("fail_attempts", []):
            _declined(options.get("order"))
        return {"charged": True}

    await run.step("charge", charge)
    for index in range(int(options.get("packs", 0))):

        async def pack() -> int:
            await asyncio.sleep(pause)
            return index  # noqa: B023 - awaited before the loop moves on

        await run.step(f"pack_{index}", pack)
    return {"order": options.get("order"), "lines": reserved["lines"]}
