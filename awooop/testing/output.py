"""The test kit's output log: what a handler emitted with ``run.emit_output``, by attempt.

Each emit is kept as one chunk (the worker coalesces them into rows; a test asks about the
text, not the rows), under the worker's rule for the run's limit (``max_bytes``, all attempts
together: the text is cut on a character boundary, :attr:`KitOutput.truncated` is set and
later text is dropped). Text Postgres cannot store is refused at the emit (E-DATA-001), as
the worker refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from awooop.core.config import OUTPUT_MAX_BYTES
from awooop.runs.output_rules import fit, utf8_len

MAX_BYTES = OUTPUT_MAX_BYTES


@dataclass
class KitOutput:
    max_bytes: int = MAX_BYTES
    chunks: list[tuple[int, str]] = field(default_factory=list)  # (attempt, text) per emit
    truncated: bool = False

    @property
    def text(self) -> str:
        """Everything the run emitted, every attempt's in order."""
        return "".join(text for _, text in self.chunks)

    def of_attempt(self, attempt: int) -> str:
        """What attempt ``attempt`` emitted."""
        return "".join(text for n, text in self.chunks if n == attempt)

    def sink(self, attempt: int) -> AttemptOutput:
        return AttemptOutput(self, attempt)


@dataclass
class AttemptOutput:
    """One attempt's ``run.emit_output`` in the kit."""

    log: KitOutput
    attempt: int

    async def emit(self, text: str) -> None:
        if self.log.truncated or not text:
            return
        kept, cut = fit(text, sum(utf8_len(t) for _, t in self.log.chunks), self.log.max_bytes)
        if kept:
            self.log.chunks.append((self.attempt, kept))
        self.log.truncated = cut

    async def flush(self) -> None:
        return None
