"""The ``tensortune`` command line.

    tensortune tune gmm --trials 256 --db tuning.db        tune a suite workload
    tensortune tune my_ops.py:matmul_relu --trials 128      ... or a func from your file
    tensortune show gmm --db tuning.db                      best trace, loop nest and C
    tensortune tune dense --weights W,bias --db tuning.db   fixed weights: packed at bind
    tensortune show matmul_relu --db tuning.db              ... of a func stored by name
    tensortune tune-model model.py:build --input 1,3,224,224 --trials 2000 --db resnet.db
    tensortune db list|export|import --db tuning.db [FILE]
    tensortune example                                      a hand-scheduled matmul
    tensortune target                                       the detected machine
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .cli_live import best_text, live_columns
from .cli_model import tune_model_command
from .measure.roofline import latency_text


def _shape(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, _, val = part.partition("=")
        if not val.strip().isdigit():
            raise SystemExit(f"--shape: expected name=int pairs like M=64,N=64, got {part!r}")
        out[key.strip()] = int(val)
    return out


def _count(text: str) -> int:
    """An argparse type: a whole number of 0 or more (a trial budget)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, got {text!r}")
    return n


def _tune(args: argparse.Namespace) -> int:
    import dataclasses

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    import tensortune as tt
    from tensortune.measure.roofline import Roofline

    console = Console()
    func = tt.workloads.resolve(args.workload, small=args.small, **_shape(args.shape))
    # --inputs and --weights checked before the machine is read: their errors come first
    given = _given_inputs(args.inputs, func)
    if args.weights:
        from tensortune.tir.constant_stages import mark_weights

        mark_weights(func, args.weights)
    target = tt.Target.host()
    roof = Roofline.measure(func, target)
    # A function from the user's file is named as they named it, ``file.py:name``
    # (te.create_func's default name is "main" for every one).
    shown = args.workload.replace("\\", "/").rsplit("/", 1)[-1] if ":" in args.workload \
        else func.name
    console.print(f"[bold]{shown}[/] on {target}\n{roof.describe()}")
    with Progress(*live_columns(console.width), console=console, transient=False) as bar:
        task = bar.add_task("tuning", total=args.trials, best=best_text(roof, float("inf")),
                            errors=0)

        def progress(ev: dict[str, Any]) -> None:
            what = {"retiming": "re-timing", "retimed": "tuned"}
            bar.update(task, completed=ev["trials"], best=best_text(roof, ev["best"]),
                       errors=ev["errors"], description=what.get(ev["stage"], "tuning"))

        res = tt.tune(func, trials=args.trials, database=args.db, target=target,
                      strategy=args.strategy, cost_model=args.cost_model, seed=args.seed,
                      name=args.workload, progress=progress,
                      inputs=given, weights=args.weights,
                      algorithms=True if args.algorithms is None else
                      [n for n in args.algorithms if n != "none"])
    # Measure again and keep the higher readings: one taken while the machine was slowed
    # (a busy neighbour, a host in a slow state) would put the kernel above its bound.
    again = Roofline.measure(func, target)
    if again.bound > 1.1 * roof.bound:
        console.print(f"measured again after tuning: {again.describe()} (the first reading "
                      "met a slower machine); the higher readings are used")
    roof = dataclasses.replace(roof, peak=max(roof.peak, again.peak),
                               bandwidth=max(roof.bandwidth, again.bandwidth))
    # One row per figure: ten columns do not fit an 80-column terminal.
    table = Table(title=f"{shown}: tuning summary")
    table.add_column("")
    table.add_column("value", justify="right")
    lat = res.best_latency
    flops = roof.flops > 0     # else no floating-point work: GB/s says how fast
    rows = [("best latency", latency_text(lat) if res.record else "-"),
            ("GFLOP/s", f"{res.gflops:.1f}" if flops else "- (no floating-point work)"),
            ("% FMA peak", f"{100 * res.gflops / roof.peak:.1f}" if flops else "-"),
            ("GB/s (inputs and outputs once)",
             f"{roof.gbytes_per_s(lat):.1f}" if res.record else "-"),
            (f"% roofline ({roof.binding})",
             f"{roof.percent_at(lat):.1f}" if res.record else "-"),
            ("trials", str(res.trials)), ("errors", str(res.errors)),
            ("weights (packed at bind, untimed)",
             ", ".join(args.weights) or "-"),
            ("proposals with C already timed (not trials)", str(res.twins)),
            ("time", f"{res.seconds:.1f} s"),
            ("trials/s", f"{res.trials / max(res.seconds, 1e-9):.2f}"),
            ("database", str(args.db or "(in memory)"))]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if res.exhausted and res.trials < args.trials:
        # Not an error: a small space (an element-wise function has a few distinct
        # programs) is measured whole, and asking for more trials would change nothing.
        console.print(f"stopped after {res.trials} of {args.trials} trials: the search "
                      "proposed no program it had not measured (the design space holds "
                      "no more distinct programs, or none whose C differs)")
    if res.waited:
        console.print(f"waited {res.waited:.1f} s for the machine to be as quiet as it was "
                      "(another process was busy); candidates are timed only then")
    if res.record is None and args.trials:    # (none asked for, none failed)
        console.print("[red]no candidate passed the checks[/]")
        return 1
    return 0


def _show(args: argparse.Namespace) -> int:
    from .cli_show import show_command

    return show_command(args, _shape(args.shape))


def _db(args: argparse.Namespace) -> int:
    from tensortune.database import Database

    db = Database(args.db) if args.action == "import" else Database.existing(args.db)
    if args.action == "list":
        from rich.console import Console
        from rich.table import Table

        from tensortune.codegen import Target

        fp = Target.host().fingerprint()
        table = Table(title=f"{args.db}: best on this machine", title_justify="left")
        for col in ("workload", "hash", "records", "this machine", "best", "GFLOP/s",
                    "GFLOP"):
            # A long name (a user file's path) folds within 40 columns, so the hash and
            # the figures keep their width.
            table.add_column(col, justify="left" if col in ("workload", "hash") else "right",
                             overflow="fold", max_width=40 if col == "workload" else None,
                             no_wrap=col == "hash")
        for h, name, flops, n in db.workloads():
            top = db.top_k(h, fp, 1)
            best = top[0].latency if top else None
            table.add_row(name + _weights_of(db, h), h, str(n), str(db.count(h, fp)),
                          "-" if best is None else latency_text(best),
                          # no FLOPs (a transpose): no GFLOP/s to give
                          "-" if best is None or not flops else f"{flops / best / 1e9:.1f}",
                          f"{flops / 1e9:.4f}")
        Console(width=max(100, Console().width)).print(table)
    elif args.action == "export":
        print(f"exported {db.export_jsonl(args.file)} records to {args.file}")
    else:
        print(f"imported {db.import_jsonl(args.file)} new records from {args.file}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from tensortune.codegen.compile import default_cache_dir
    from tensortune.codegen.kernel_cache import clear, max_bytes, prune, usage

    cache, limit = default_cache_dir(), max_bytes()
    if args.action == "clear":
        gone = clear(cache)
        print(f"deleted {gone.entries} kernels ({gone.bytes / 2**20:.1f} MiB) from {cache}")
    elif args.action == "prune":
        gone = prune(cache, limit)
        print(f"deleted {gone.entries} kernels ({gone.bytes / 2**20:.1f} MiB) from {cache}, "
              f"the least recently used")
    now = usage(cache)
    print(f"{cache}: {now.entries} kernels, {now.bytes / 2**20:.1f} MiB of "
          f"{limit / 2**20:.0f} MiB (set TENSORTUNE_KERNEL_CACHE_MB to change; each tuning "
          f"run prunes to it when it ends)")
    return 0


def _example(args: argparse.Namespace) -> int:
    import numpy as np

    import tensortune as tt
    from tensortune.examples import SCHEDULES
    from tensortune.measure import measure

    n = args.size
    func = tt.workloads.get("gmm", M=n, N=n, K=n)
    sch = SCHEDULES["gmm"](tt.Schedule(func))
    if args.show:
        print(sch.trace.as_python(), "\n")
        print(sch.func, "\n")
    res = measure(sch, repeat=5, min_repeat_ms=50)
    if not res.ok:
        print(f"scheduled kernel failed: {res.error_kind}: {res.error_msg}", file=sys.stderr)
        return 1
    a = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
    err = float(np.abs(tt.build(sch)(a, a) - a.astype(np.float64) @ a).max())
    print(f"hand-scheduled matmul {n}^3: {res.median * 1e3:.3f} ms, "
          f"{2.0 * n ** 3 / res.median / 1e9:.1f} GFLOP/s (checked against float64, max abs "
          f"error {err:.2e})")
    return 0


def _target(args: argparse.Namespace) -> int:
    from tensortune import Target

    t = Target.host()
    print(t)
    print(f"fingerprint {t.fingerprint()} | flags {' '.join(t.flags)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from tensortune.errors import TensorTuneError
    from tensortune.workloads import names

    ap = argparse.ArgumentParser(
        prog="tensortune", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Search loop schedules for the fastest correct kernel of a tensor "
                    "computation on this machine.",
        epilog="examples:\n" + "\n".join(
            "  " + line[4:] for line in (__doc__ or "").splitlines()
            if line.startswith("    ")))
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("tune", "show"):
        p = sub.add_parser(name, help=f"{name} a workload: suite name or file.py:func")
        p.add_argument("workload", help=f"a suite workload ({', '.join(names())}) or "
                       "path/to/file.py:func, a te function or one that returns it")
        if name == "tune":
            p.add_argument("--db", help="the SQLite tuning database; tune keeps its records "
                           "only with it (and goes on from those already there)")
        else:
            p.add_argument("--db", default="tuning.db",
                           help="the SQLite tuning database (default tuning.db)")
        p.add_argument("--shape", help="shape arguments, e.g. M=64,N=64,K=64")
        p.add_argument("--small", action="store_true", help="the suite's small test shape")
        p.add_argument("--weights", type=_names, default=[], metavar="NAMES",
                       help="inputs fixed while the kernel is used, e.g. W,bias: timed "
                            "without the stages that read only them (packed once at bind)")
    tune = sub.choices["tune"]
    tune.add_argument("--trials", type=_count, default=64,
                      help="candidates to build, check and time (default 64)")
    tune.add_argument("--strategy", default="evolutionary", choices=["evolutionary", "replay"],
                      help="evolutionary search ranked by the cost model (default), or "
                           "random replay of the design spaces")
    tune.add_argument("--cost-model", default="lgbm", choices=["lgbm", "random"],
                      help="LightGBM on program features (default), or random scores")
    tune.add_argument("--seed", type=int, default=None,
                      help="seed of the search's random choices (default: a fresh one)")
    tune.add_argument("--inputs", default=None, metavar="FILE.npz",
                      help="check candidates on these example arrays, saved with "
                           "np.savez(FILE, NAME=array, ...) under the function's input "
                           "names (default: random inputs)")
    tune.add_argument("--algorithms", type=_names, default=None, metavar="NAMES",
                      help="other algorithms tuned beside the direct form: winograd, "
                           "winograd4 (F(4x4, 3x3)) or none (default: winograd)")
    tune.set_defaults(fn=_tune)
    tm = sub.add_parser("tune-model", help="tune and compile a PyTorch model")
    tm.add_argument("model", help="file.py:name, an nn.Module or a function returning one")
    tm.add_argument("--input", action="append", required=True,
                    help="an example input's shape, e.g. 1,3,224,224 (add :int for indices); "
                         "repeat for several inputs")
    tm.add_argument("--trials", type=_count, default=2000,
                    help="trials over all the model's tasks together (default 2000)")
    tm.add_argument("--db", default="model.db",
                    help="the SQLite tuning database (default model.db); a second run goes "
                         "on from its records")
    tm.add_argument("--scheduler", default="gradient", choices=["gradient", "round-robin"],
                    help="how trials are shared among tasks: by expected gain in the "
                         "model's latency (default), or in turn")
    tm.add_argument("--seed", type=int, default=None,
                    help="seed of the search's random choices (default: a fresh one)")
    tm.set_defaults(fn=tune_model_command)
    sub.choices["show"].add_argument("--c", action="store_true", help="print the C source")
    sub.choices["show"].set_defaults(fn=_show)
    db = sub.add_parser("db", help="list, export or import a tuning database")
    db.add_argument("action", choices=["list", "export", "import"],
                    help="list its workloads and their best here, or export or import "
                         "its records as JSON lines")
    db.add_argument("file", nargs="?", default="records.jsonl",
                    help="the JSON-lines file of export and import (default records.jsonl)")
    db.add_argument("--db", default="tuning.db",
                    help="the SQLite tuning database (default tuning.db)")
    db.set_defaults(fn=_db)
    cache = sub.add_parser("cache", help="the compiled-kernel cache: its size, or prune or "
                           "clear it")
    cache.add_argument("action", nargs="?", default="info", choices=["info", "prune", "clear"])
    cache.set_defaults(fn=_cache)
    ex = sub.add_parser("example", help="schedule, build, check and time a matmul by hand")
    ex.add_argument("--size", type=int, default=512)
    ex.add_argument("--show", action="store_true", help="print the trace and loop nest")
    ex.set_defaults(fn=_example)
    sub.add_parser("target", help="show the detected machine").set_defaults(fn=_target)
    args = ap.parse_args(argv)
    try:
        return int(args.fn(args))
    except TensorTuneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted{_kept(args)}", file=sys.stderr)
        return 130


def _given_inputs(path: str | None, func: Any) -> list[Any] | None:
    """The arrays of an ``.npz`` file named by the function's inputs, in their order."""
    if path is None:
        return None
    import numpy as np

    from tensortune.errors import TensorTuneError

    try:
        with np.load(path) as npz:
            found = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as e:
        raise TensorTuneError(f"--inputs {path}: not a NumPy .npz file ({e})") from e
    names = [b.name for b in func.inputs]
    missing = [n for n in names if n not in found]
    if missing:
        raise TensorTuneError(f"--inputs {path}: {func.name} takes inputs "
                              f"{', '.join(names)}; the file has no {', '.join(missing)} "
                              f"(it has {', '.join(found) or 'nothing'}); save them with "
                              f"np.savez(path, {names[0]}=...)")
    return [found[n] for n in names]


def _weights_of(db: Any, hash_: str) -> str:
    """" (weights W,bias)" for a workload tuned with marked weights (its printed text
    says which), so that ``db list`` tells it from the same function unmarked."""
    from tensortune.tir.printer import WEIGHTS_LINE

    got = db.workload_text(hash_)
    for line in (got[1] or "").splitlines() if got else ():
        if line.strip().startswith(WEIGHTS_LINE):
            names = line.strip()[len(WEIGHTS_LINE):].replace(" ", "")
            return f" (weights {names})"
    return ""


def _names(text: str) -> list[str]:
    """An argparse type: comma-separated names (``--weights W,bias``)."""
    return [w.strip() for w in text.split(",") if w.strip()]


def _kept(args: argparse.Namespace) -> str:
    """What an interrupted command leaves: every record a tuning run measured is stored as
    it is measured, so the same command goes on from there."""
    if args.cmd not in ("tune", "tune-model"):
        return ""
    if args.db is None:
        return "; without --db the records were in memory only"
    from pathlib import Path

    from tensortune.database import Database

    if not Path(args.db).exists():
        return "; nothing was measured"

    return (f"; {Database(args.db).count()} records are in {args.db}: the same command "
            "goes on from them without measuring them again")


if __name__ == "__main__":
    sys.exit(main())
