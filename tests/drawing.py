"""Drawing candidates from a design space and checking them, for the space tests."""

from __future__ import annotations

import numpy as np

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.schedule import Schedule, Trace
from tensortune.space import ParallelVectorizeUnroll, PostOrderApply, sample
from tensortune.tir.stmt import PrimFunc


def exact_draws(func: PrimFunc, space: Trace, seed: int = 0, tries: int = 4,
                check: int = 2) -> list[Schedule]:
    """The candidates drawn from ``space`` with seeds ``seed .. seed + tries - 1`` and the
    default post-processors, less those they reject; the first ``check`` of them built
    and checked against the reference on random inputs drawn with ``seed``."""
    gen = PostOrderApply.default(tt.Target.host())
    ins = random_inputs(func, seed=seed)
    want = evaluate(func, ins)[0]
    drawn = [d for d in (sample(func, space, seed + k, gen.postprocs) for k in range(tries))
             if d is not None]
    for d in drawn[:check]:
        check_close(tt.build(d)(*[np.copy(a) for a in ins]), want)
    return drawn


def jobs_choice(trace: Trace) -> int:
    """The index in ``trace`` of ParallelVectorizeUnroll's jobs decision. The rule samples
    the jobs and then the unroll depth, and no post-processor after it samples, so the two
    are the trace's last two ``sample_categorical``; the tests that look for the jobs
    decision find it here, and fail here if the rule's order changes."""
    cats = [i for i, x in enumerate(trace.insts) if x.kind == "sample_categorical"]
    assert len(cats) >= 2, "ParallelVectorizeUnroll's two choices are missing"
    depths = list(ParallelVectorizeUnroll(cores=1).unroll_depths)
    assert trace.insts[cats[-1]].attr("candidates") == depths, \
        "the last sample_categorical is not ParallelVectorizeUnroll's unroll depth"
    return cats[-2]
