"""Progress reports that suit where they are written: a bar on a terminal, plain lines in a log.

tqdm redraws its bar with carriage returns, which a terminal turns into one moving line and a log file keeps
as one line of every frame (thousands of characters). :func:`progress` gives a tqdm bar when its stream is a
terminal and otherwise a :class:`PlainProgress`, which writes one short line at most every ``interval``
seconds, and at the end, with the same figures: position, total, the caller's figures (loss, samples/s),
rate and ETA. :func:`silence_third_party_progress` turns off the bars of Hugging Face libraries
(``transformers``' "Loading weights", ``huggingface_hub``, ``datasets``), which this package does not draw.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

#: Seconds between two plain progress lines.
PLAIN_INTERVAL = 30.0


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (a file, a pipe or a closed stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress(total: int, *, initial: int = 0, unit: str = "step", desc: str = "", stream: TextIO | None = None):
    """A progress report over ``total`` units: a tqdm bar on a terminal, else a :class:`PlainProgress`.

    Both are driven alike: ``update(position, **figures)`` moves to the absolute ``position`` and shows
    ``figures`` (already formatted strings, such as ``loss="4.4041"``); ``close()`` ends the report.
    """
    stream = sys.stderr if stream is None else stream
    if is_terminal(stream):
        return _TerminalProgress(total, initial=initial, unit=unit, desc=desc, stream=stream)
    return PlainProgress(total, initial=initial, unit=unit, desc=desc, stream=stream)


class _TerminalProgress:
    """A tqdm bar moved to absolute positions."""

    def __init__(self, total: int, *, initial: int, unit: str, desc: str, stream: TextIO) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit=unit, desc=desc or None, file=stream)

    def update(self, position: int, **figures: str) -> None:
        self.bar.update(position - self.bar.n)
        if figures:
            self.bar.set_postfix(figures)

    def close(self) -> None:
        self.bar.close()


class PlainProgress:
    """One line per ``interval`` seconds (and one at the end): ``desc: step 40/468 (9%), loss 4.40, ..., ETA 3m05s``.

    The rate and the ETA count only the units done since the report started, so a resumed run's estimate
    is not flattered by the steps it had already done.
    """

    def __init__(
        self,
        total: int,
        *,
        initial: int = 0,
        unit: str = "step",
        desc: str = "",
        stream: TextIO | None = None,
        interval: float = PLAIN_INTERVAL,
        clock=time.monotonic,
    ) -> None:
        self.total, self.unit, self.desc = int(total), unit, desc
        self.stream = sys.stderr if stream is None else stream
        self.interval, self.clock = float(interval), clock
        self.start_position = self.position = int(initial)
        self.started = self.clock()
        self.last_written: float | None = None
        self.written_position: int | None = None
        self.figures: dict[str, str] = {}

    def update(self, position: int, **figures: str) -> None:
        self.position = int(position)
        self.figures.update(figures)
        now = self.clock()
        due = self.last_written is None or now - self.last_written >= self.interval
        if due or self.position >= self.total:
            self._write(now)

    def close(self) -> None:
        if self.written_position != self.position:
            self._write(self.clock())

    def line(self, now: float) -> str:
        """The progress line at time ``now``."""
        done = self.position - self.start_position
        elapsed = max(now - self.started, 0.0)
        parts = [
            f"{self.unit} {self.position}/{self.total}"
            + (f" ({100 * self.position / self.total:.0f}%)" if self.total else "")
        ]
        parts += [f"{name.replace('_', ' ')} {value}" for name, value in self.figures.items()]
        if done > 0 and elapsed > 0:
            rate = done / elapsed
            parts.append(f"{rate:.3g} {self.unit}/s" if rate >= 1 else f"{1 / rate:.3g} s/{self.unit}")
            parts.append(f"ETA {_duration(max(self.total - self.position, 0) / rate)}")
        return (f"{self.desc}: " if self.desc else "") + ", ".join(parts)

    def _write(self, now: float) -> None:
        print(self.line(now), file=self.stream, flush=True)
        self.last_written, self.written_position = now, self.position


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def silence_third_party_progress() -> None:
    """Turn off the progress bars of Hugging Face libraries, imported already or later.

    ``huggingface_hub`` and ``transformers`` read ``HF_HUB_DISABLE_PROGRESS_BARS`` when they are imported;
    those already imported are told directly. Nothing is imported here that was not imported already.
    """
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    # A module set to None in sys.modules is one an import must not find (as a test that hides it does).
    if sys.modules.get("huggingface_hub") is not None:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if sys.modules.get("transformers") is not None:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if sys.modules.get("datasets") is not None:
        sys.modules["datasets"].disable_progress_bars()
