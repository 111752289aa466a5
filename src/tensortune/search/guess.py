"""A schedule without measuring: the program the bundled prior ranks best among a few
random draws from a function's design spaces, built and checked once.

``compile_model`` runs a task that no search has measured (``trials=0``, or a budget
that never reached it) through this instead of its unscheduled loop nest: a GPT-2-style
block compiled with no trials ran 14.5 ms as unscheduled nests against PyTorch's 0.3 ms
(RESULTS.md). The guess is not timed, so it is a starting point, not a result.

Example:
    >>> kernel = guessed_kernel(func, Target.host())
"""

from __future__ import annotations

import random

import numpy as np

from ..codegen import Target
from ..cost_model.prior import prior_model
from ..errors import TensorTuneError
from ..kernel import Kernel, build, build_checked, check_case
from ..space import PostOrderApply
from ..tir.stmt import PrimFunc
from .search_strategy import SearchContext

# Random draws the prior ranks: enough to find a parallel, vectorized program among the
# spaces' (most draws are), few enough to cost well under a second per task.
DRAWS = 12


def guessed_kernel(func: PrimFunc, target: Target, draws: int = DRAWS, seed: int = 0
                   ) -> Kernel:
    """The best-ranked of ``draws`` draws that checks against ``func``'s reference (each
    built with ``build_checked``), else ``func`` as written, checked. Without a bundled
    prior for the target's vector width the first draw that checks is taken."""
    gen = PostOrderApply.default(target)
    try:
        spaces = gen.generate(func)
    except TensorTuneError:
        spaces = []
    cands = []
    if spaces:
        ctx = SearchContext(func, spaces, gen, rng=random.Random(seed))
        for _ in range(3 * draws):
            c = ctx.draw(ctx.rng.randrange(len(spaces)))
            if c is not None:
                cands.append(c)
            if len(cands) == draws:
                break
    model = prior_model(frozenset(), frozenset(), target.vector_bytes)
    if model is not None and cands:
        scores = model.predict(np.stack([c.features() for c in cands]))
        cands = [cands[i] for i in np.argsort(-scores, kind="stable")]
    case = check_case(func)     # the reference once, for every draw tried
    if case is None:            # no finite reference to check on: the first, as built
        return build(cands[0].sch.func if cands else func, target)
    for c in cands:
        try:
            return build_checked(c.sch.func, target, reference=func, case=case)
        except TensorTuneError:
            continue     # computes wrong here even without the vectorizer: the next
    return build_checked(func, target, case=case)
