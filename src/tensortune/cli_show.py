"""``tensortune show``: the best record of a workload, as Python, loop nest and C.

A workload is named as for ``tune`` (a suite name or ``path/to/file.py:func``), or by the
name or hash the database stored it under: a function tuned from a user's file (or from
Python) is found by that name too, and shown as far as the database can show it (its
best trace and the function's text; the loop nest and C need the function itself).

Example:
    $ tensortune show gmm --db tuning.db --c
    $ tensortune show matmul_relu --db tuning.db      # tuned earlier from my_ops.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .database import Database
from .errors import TensorTuneError
from .measure.roofline import latency_text


def show_command(args: argparse.Namespace, shape: dict[str, int]) -> int:
    import tensortune as tt
    from tensortune.codegen.packed_once import program_c
    from tensortune.measure import source_hash
    from tensortune.search.records import best_record, replay
    from tensortune.search.tune import stored_forms
    from tensortune.tir.constant_stages import mark_weights

    try:
        given = tt.workloads.resolve(args.workload, small=args.small, **shape)
    except TensorTuneError as e:
        if ":" in args.workload or not Path(args.db).is_file():
            raise
        db = Database.existing(args.db)
        stored = _stored(db, args.workload)
        if not stored:
            held = sorted({name for _, name, _, n in db.workloads() if n})
            raise TensorTuneError(f"{e}; {args.db} holds records of: "
                                  f"{', '.join(held) or 'none'}") from e
        return _show_stored(db, stored, args.db)
    if args.weights:       # the workload tuned with ``--weights``
        given = mark_weights(given, args.weights)
    db = Database.existing(args.db)
    target = tt.Target.host()
    # The stored forms, fastest first: the first is the one shown (``tuned_func``'s).
    forms = sorted(((label, f, top) for label, f, top in stored_forms(given, db, target)
                    if top is not None), key=lambda x: x[2].latency)
    func = forms[0][1] if forms else given   # none: best_record says what is stored
    rec = best_record(func, db, target)
    sch = replay(func, rec)
    source = program_c(sch.func, target)
    fp = target.fingerprint()
    for i, (label, f, top) in enumerate(forms):   # the first's best is ``rec``
        print(f"# {label + ' form: ' if len(forms) > 1 else ''}best of "
              f"{db.count(f.structural_hash(), fp)} records: "
              f"{latency_text(top.latency)}{'' if i == 0 else ' (not shown)'}")
    if rec.source != source_hash(source):
        print("# (timed with other C than this tensortune generates for it; tt.compile "
              "times the best records again)")
    print()
    print(sch.trace.as_python(), "\n")
    print(sch.func, "\n")
    if args.c:
        print(source)
    return 0


def _stored(db: Database, key: str) -> list[tuple[str, str, float, int]]:
    """The stored workloads with records whose hash or name is ``key``, or whose name is
    a ``file.py:key`` (how ``tensortune tune`` stores a function of a user's file)."""
    return [w for w in db.workloads()
            if w[3] > 0 and (key in (w[0], w[1]) or w[1].endswith(":" + key))]


def _show_stored(db: Database, stored: list[tuple[str, str, float, int]], path: str) -> int:
    """What the database holds of a workload it knows by name or hash: per stored
    function of that name, the best record on this machine, its trace and the
    function's text."""
    from tensortune.codegen import Target
    from tensortune.schedule import Trace

    fp = Target.host().fingerprint()
    for hash_, name, flops, _ in stored:
        text = db.workload_text(hash_)
        top = db.top_k(hash_, fp, 1)
        if not top:
            others = len([t for t in db.targets(hash_) if t != fp])
            print(f"# {name} (workload {hash_}): no valid record on this machine "
                  f"({others} other machine(s) hold records of it)\n")
            continue
        rec = top[0]
        rate = f", {flops / rec.latency / 1e9:.1f} GFLOP/s" if flops else ""
        print(f"# {name} (workload {hash_}): best of {db.count(hash_, fp)} records on this "
              f"machine: {latency_text(rec.latency)}{rate}")
        spec = name if ":" in name else f"path/to/file.py:{name}"
        print(f"# its loop nest and C need the function: tensortune show {spec} --db {path}\n")
        print(Trace.from_json(rec.trace).as_python(), "\n")
        if text is not None:
            print(text[1], "\n")
    return 0
