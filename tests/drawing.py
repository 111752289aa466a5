"""Drawing candidates from a design space and checking them, for the space tests."""

from __future__ import annotations

import numpy as np

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.schedule import Schedule, Trace
from tensortune.space import PostOrderApply, sample
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
