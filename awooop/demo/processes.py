"""The demo's child processes: every component as a real ``awooop`` process, logs to files."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from awooop.core.process import cli_command


@dataclass
class Child:
    name: str
    args: list[str]
    process: asyncio.subprocess.Process
    log_path: Path


@dataclass
class Processes:
    """Children of one build of the runtime: by default this one (``python -m awooop.cli`` with
    this interpreter, on the code this process runs: :func:`awooop.core.process.cli_command`);
    ``python`` and ``cwd`` name another installation's (the upgrade test runs an earlier
    release's processes from its own tree and virtual environment, importing from that tree)."""

    env: dict[str, str]
    log_dir: Path
    children: dict[str, Child] = field(default_factory=dict)
    python: str = sys.executable
    cwd: Path | None = None

    async def start(self, name: str, *args: str) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("ab")
        process = await asyncio.create_subprocess_exec(
            *self.command(),
            *args,
            cwd=self.cwd,
            env={**os.environ, **self.env},
            stdout=log,
            stderr=log,
            start_new_session=True,  # Ctrl-C in the terminal reaches the demo, not each child
        )
        log.close()
        child = Child(name, list(args), process, log_path)
        self.children[name] = child
        return child

    async def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """Run one ``awooop`` command to completion; (exit code, stdout, stderr). ``env``
        overrides entries of the processes' environment for this command."""
        process = await asyncio.create_subprocess_exec(
            *self.command(),
            *args,
            cwd=self.cwd,
            env={**os.environ, **self.env, **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        return process.returncode or 0, out.decode(), err.decode()

    def command(self) -> list[str]:
        """The command line of an ``awooop`` child, before its arguments."""
        if self.cwd is None:
            return cli_command(self.python)
        return [self.python, "-m", "awooop.cli"]

    def by_pid(self, pid: int) -> Child | None:
        return next((c for c in self.children.values() if c.process.pid == pid), None)

    def kill(self, child: Child) -> None:
        child.process.send_signal(signal.SIGKILL)

    async def stop(self, child: Child, grace_s: float = 15.0) -> int:
        """SIGTERM ``child`` and wait for it to exit (SIGKILL after ``grace_s``); its code."""
        if child.process.returncode is None:
            child.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(child.process.wait(), grace_s)
        except TimeoutError:
            child.process.kill()
            return await child.process.wait()

    def alive(self) -> list[Child]:
        return [c for c in self.children.values() if c.process.returncode is None]

    async def stop_all(self, grace_s: float = 15.0) -> dict[str, int | None]:
        for child in self.alive():
            child.process.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for child in list(self.children.values()):
            try:
                codes[child.name] = await asyncio.wait_for(child.process.wait(), grace_s)
            except TimeoutError:
                child.process.kill()
                codes[child.name] = await child.process.wait()
        return codes
