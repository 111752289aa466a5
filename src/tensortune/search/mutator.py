"""Mutators: change one decision of a candidate; the program is re-derived by replay, so
a mutant is legal or rejected, never wrong.

- tile size: move one prime factor between two levels of a sample_perfect_tile,
  keeping the product (and the innermost limit); for a sample_tile, also a new
  innermost factor that need not divide the extent;
- categorical (parallel extent, unroll depth): another choice;
- compute location: another candidate loop.

Example:
    >>> new_decisions, new_post = mutate(cand, space, rng)
"""

from __future__ import annotations

import math
import random
from typing import Any

from ..schedule import Trace
from ..schedule.sampling import prime_factors, sample_perfect_tile
from .search_strategy import Candidate


def _mutate_tile(d: list[int], max_inner: int, rng: random.Random, inner: int = 1
                 ) -> list[int] | None:
    src = [i for i, x in enumerate(d) if x > 1]
    if not src or len(d) < 2:
        return None
    for _ in range(8):
        a = rng.choice(src)
        b = rng.choice([i for i in range(len(d)) if i != a])
        p = rng.choice(prime_factors(d[a]))
        new = list(d)
        new[a] //= p
        new[b] *= p
        if math.prod(new[len(new) - inner:]) <= max_inner:
            return new
    return None


def _mutate_perfect(d: list[int], inst: Any, rng: random.Random) -> list[int] | None:
    """A sample_perfect_tile decision: a prime factor moved between two levels. With a
    ``multiple`` (a vector axis), the innermost stays a multiple of it: half the time a
    new innermost factor is drawn (moving one prime at a time, 28 -> 8 takes two steps
    through worse programs), else a factor moves in a way that keeps it one."""
    limit, inner = int(inst.attr("max_innermost_factor", 1 << 30)), int(inst.attr("inner", 1))
    multiple = int(inst.attr("multiple", 1))
    if multiple == 1 or d[-1] % multiple:
        return _mutate_tile(d, limit, rng, inner)
    for _ in range(8):
        new: list[int] | None
        if rng.random() < 0.5:
            new = sample_perfect_tile(rng, math.prod(d), len(d), limit, inner, multiple)
        else:
            new = _mutate_tile(d, limit, rng, inner)
        if new is not None and new != d and new[-1] % multiple == 0:
            return new
    return None


def _mutate_imperfect(d: list[int], inst: Any, rng: random.Random) -> list[int] | None:
    """A sample_tile decision: half the time a new innermost factor (the outer levels
    re-drawn to tile what is left), else a prime factor moved between the outer levels."""
    limit, inner = int(inst.attr("max_innermost_factor")), int(inst.attr("inner", 1))
    extent, n = int(inst.attr("extent")), len(d)
    for _ in range(8):
        if rng.random() < 0.5:
            last = rng.randint(1, min(limit, extent))
            new = sample_perfect_tile(rng, -(-extent // last), n - 1, 1 << 30) + [last]
        else:
            outer = _mutate_tile(d[:-1], 1 << 30, rng)
            if outer is None:
                continue
            new = outer + [d[-1]]
        if new != d and math.prod(new[n - inner:]) <= limit:
            return new
    return None


def mutate(cand: Candidate, space: Trace, rng: random.Random
           ) -> tuple[dict[int, Any], list[Any]] | None:
    """New (decisions, post-processor decisions), or None if no mutation applies."""
    choices: list[tuple[str, Any]] = [("space", i) for i in cand.decisions]
    choices += [("post", i) for i in range(len(cand.post))]
    rng.shuffle(choices)
    for where, i in choices:
        if where == "post":
            new_post = list(cand.post)
            new_post[i] = rng.randrange(3)
            if new_post[i] != cand.post[i]:
                return dict(cand.decisions), new_post
            continue
        inst = space.insts[i]
        d = cand.decisions[i]
        nd: Any
        if inst.kind == "sample_perfect_tile":
            nd = _mutate_perfect(list(d), inst, rng)
        elif inst.kind == "sample_tile":
            nd = _mutate_imperfect(list(d), inst, rng)
        elif inst.kind == "sample_categorical":
            n = len(inst.attr("candidates", []))
            nd = rng.randrange(n) if n > 1 else None
        else:  # sample_compute_location: the replay rejects an index out of range
            nd = rng.randrange(max(2, int(d) + 2))
        if nd is not None and nd != d:
            new = dict(cand.decisions)
            new[i] = nd
            return new, list(cand.post)
    return None
