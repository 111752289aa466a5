"""The live line ``tensortune tune`` draws while it searches.

    tuning ━━━━━━━━━━ 37/64 best  312.4 GFLOP/s (72.6% peak) err 0 0:05<0:04

It must fit an 80-column terminal whole: rich cuts the last columns to "0:…" when a
field grows, so every figure here keeps a fixed width, whatever it reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .measure.roofline import Roofline


def clock(seconds: float | None) -> str:
    """``m:ss`` below an hour, ``h:mm:ss`` above, ``?`` where not yet known.

    >>> [clock(s) for s in (5, 65.9, 3725, None)]
    ['0:05', '1:05', '1:02:05', '?']
    """
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def live_columns(width: int = 80) -> list[Any]:
    """The progress bar's columns for a ``width``-column terminal: stage, bar, trials,
    best, errors, and the time spent and left as ``elapsed<remaining`` (tqdm's form;
    rich's two time columns took 16 of 80 columns).

    The bar gets what the figures leave (76 columns at most: 2048 trials, an hour's
    times): a bar rich sizes itself keeps 10 columns or more, and rich then cuts every
    column short, the figures too."""
    from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, TextColumn
    from rich.text import Text

    class Times(ProgressColumn):
        def render(self, task: Any) -> Text:
            left = "" if task.finished else f"<{clock(task.time_remaining)}"
            return Text(clock(task.elapsed) + left, style="progress.elapsed")

    return [TextColumn("{task.description}"), BarColumn(bar_width=max(4, min(40, width - 76))),
            MofNCompleteColumn(), TextColumn("best {task.fields[best]}"),
            TextColumn("err {task.fields[errors]}"), Times()]


def percent_text(percent: float) -> str:
    """A percent in four characters: ``72.6``, `` 100`` (a kernel a little above a bound
    read while the machine was slowed), ``>999``.

    >>> [percent_text(p) for p in (7.25, 99.94, 100.2, 1234.0)]
    [' 7.2', '99.9', ' 100', '>999']
    """
    if percent < 99.95:
        return f"{percent:4.1f}"
    return f"{percent:4.0f}" if percent < 999.5 else ">999"


def best_text(roof: Roofline, latency: float) -> str:
    """The best kernel's speed for the live line, in a fixed width.

    GFLOP/s and % of the FMA peak; where the data's reading binds first, % of that bound
    (the summary gives both); for a function without FLOPs (a transpose, integer
    arithmetic), which only moves data, GB/s and % of the read bandwidth. ``latency`` is
    ``inf`` before any candidate has run.
    """
    found = latency < float("inf")
    if roof.flops <= 0:
        gbs = roof.gbytes_per_s(latency) if found else 0.0
        return f"{gbs:6.1f} GB/s ({percent_text(roof.percent_at(latency))}% of bound)"
    gflops = roof.flops / latency / 1e9 if found else 0.0
    if gflops > 1.05 * roof.peak:
        # The peak was read while something else held the cores (it read 4 GFLOP/s beside
        # a pip install); a percent of it would mislead. It is read again after tuning.
        share = "> peak reading"
    elif roof.reading_bound:
        share = f"{percent_text(roof.percent_at(latency))}% of bound"
    else:
        share = f"{percent_text(100 * gflops / roof.peak)}% peak"
    return f"{gflops:6.1f} GFLOP/s ({share})"
