"""``tensortune tune-model``: a whole PyTorch model tuned from the command line.

    tensortune tune-model model.py:build --input 1,3,224,224 --trials 2000 --db resnet.db

PyTorch is imported only when this command runs (an optional extra).
"""

from __future__ import annotations

import argparse
from typing import Any


def _load_model(spec: str) -> Any:
    from tensortune.errors import TensorTuneError
    from tensortune.user_file import load_attr

    obj = load_attr(spec)
    import torch

    model = obj if isinstance(obj, torch.nn.Module) else obj()
    if not isinstance(model, torch.nn.Module):
        raise TensorTuneError(f"{spec} gave {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


def _example_input(text: str) -> Any:
    import torch

    shape, _, kind = text.partition(":")
    try:
        dims = [int(d) for d in shape.split(",")]
    except ValueError:
        raise SystemExit(f"--input: expected a shape like 1,3,224,224[:int], got "
                         f"{text!r}") from None
    if kind == "int":
        return torch.randint(0, 2, dims)
    return torch.randn(*dims)


def relative_error(got: Any, want: Any) -> float:
    """The largest error of the compiled model's outputs (one, or a tuple) over the
    largest magnitude of PyTorch's, in float64 (an index or a bool output compares as
    its numbers)."""
    gots = got if isinstance(got, (tuple, list)) else (got,)
    wants = want if isinstance(want, (tuple, list)) else (want,)
    err = max(float((g.double() - w.double()).abs().max()) for g, w in zip(gots, wants))
    scale = max(float(w.double().abs().max()) for w in wants)
    return err / max(scale, 1e-30)


def tune_model_command(args: argparse.Namespace) -> int:
    """``tensortune tune-model``: tune a PyTorch model's tasks with a live table of them,
    print the compiled model's summary, and compare its output with PyTorch's (exit 1
    when the relative error is 1e-3 or more)."""
    import time

    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    import tensortune as tt
    from tensortune.graph.from_torch import from_torch
    from tensortune.measure.roofline import microseconds_text

    console = Console()
    model = _load_model(args.model)
    xs = tuple(_example_input(t) for t in args.input)
    # Imported before the live table starts: an operator it cannot import is then its
    # error alone, not one printed under an empty table.
    graph = from_torch(model, *xs)
    states: dict[str, Any] = {}
    last = [0.0]

    def view(ev: dict[str, Any] | None = None) -> Table:
        title = args.model
        if ev:
            est = ev["objective"]
            title += (f": {ev['spent']}/{ev['total']} trials, {ev['elapsed']:.0f} s, kernel "
                      "time " + (f"{est * 1e3:.3f} ms" if est < float("inf") else
                                 "n/a until every task has a valid kernel"))
        table = Table(title=title)
        for col in ("task", "weight", "trials", "best (us)", "GFLOP/s", "errors", "share"):
            table.add_column(col, justify="left" if col == "task" else "right")
        total = sum(s.cost for s in states.values() if s.best_latency < float("inf"))
        for st in states.values():
            ok = st.best_latency < float("inf")
            table.add_row(st.name, f"{st.weight:.0f}", str(st.trials),
                          microseconds_text(st.best_latency) if ok else "-",
                          f"{st.flops / st.best_latency / 1e9:.1f}" if ok else "-",
                          str(st.errors), f"{100 * st.cost / total:.1f}%" if ok else "-")
        return table

    with Live(view(), console=console, refresh_per_second=2) as live:
        def progress(st: Any, ev: dict[str, Any]) -> None:
            states.update((s.name, s) for s in ev["states"])
            if time.perf_counter() - last[0] > 0.5 or ev["spent"] == ev["total"]:
                last[0] = time.perf_counter()
                live.update(view(ev))
        compiled = tt.compile_model(graph, xs if len(xs) > 1 else xs[0], trials=args.trials,
                                    database=args.db, scheduler=args.scheduler,
                                    seed=args.seed, progress=progress)
    if not console.is_terminal:
        console.line()   # rich ends a Live table written to a file or pipe without one
    console.print(compiled.summary())
    with __import__("torch").no_grad():
        want = model(*xs)
    got = compiled(*xs)
    err = relative_error(got, want)
    t0 = time.perf_counter()
    for _ in range(3):
        compiled(*xs)
    console.print(f"end to end {1e3 * (time.perf_counter() - t0) / 3:.3f} ms per call; "
                  f"relative error against PyTorch {err:.1e}")
    return 0 if err < 1e-3 else 1
