"""Sampling instructions: the random choices of a design space, each with a checkable
decision so a trace replays exactly and mutators can propose new decisions.

Example:
    >>> sample_perfect_tile(random.Random(0), 64, n=3, max_innermost=16)
    [2, 4, 8]
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from ..errors import check


def prime_factors(n: int) -> list[int]:
    """Prime factors with multiplicity, ascending."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def sample_perfect_tile(rng: random.Random, extent: int, n: int,
                        max_innermost: int, inner: int = 1, multiple: int = 1) -> list[int]:
    """n factors whose product is ``extent``; the product of the ``inner`` innermost ones
    is at most ``max_innermost`` (inner=2 bounds a register tile made of two levels).

    ``multiple`` > 1: the innermost factor is a multiple of it (the vector lanes), drawn
    uniformly from the divisors that qualify; the other levels tile the rest. Without it,
    scattering 56's prime factors puts exactly 8 innermost in under 1% of draws."""
    last = _whole_multiples(extent, multiple, max_innermost) if n > 1 else []
    if last:
        d = rng.choice(last)
        # The innermost d takes its share of the inner bound; the rest tile extent / d.
        rest = sample_perfect_tile(rng, extent // d, n - 1, max_innermost // d, inner - 1) \
            if inner > 1 else sample_perfect_tile(rng, extent // d, n - 1, 1 << 30)
        return rest + [d]
    for _ in range(100):
        tiles = [1] * n
        for p in prime_factors(extent):
            tiles[rng.randrange(n)] *= p
        if math.prod(tiles[n - inner:]) <= max_innermost:
            return tiles
    tiles = [1] * n
    tiles[0] = extent
    return tiles


def _whole_multiples(extent: int, multiple: int, cap: int) -> list[int]:
    """Divisors of ``extent`` that are multiples of ``multiple`` (> 1) and at most ``cap``:
    the innermost factors a ``multiple`` allows; empty when there are none (or multiple
    is 1), and the constraint then does not apply."""
    if multiple <= 1:
        return []
    return [d for d in range(multiple, min(extent, cap) + 1, multiple) if extent % d == 0]


def check_perfect_tile(decision: Any, extent: int, n: int, max_innermost: int,
                       where: str, inner: int = 1, multiple: int = 1) -> list[int]:
    ok = isinstance(decision, (list, tuple)) and len(decision) == n and \
        all(isinstance(x, int) and x > 0 for x in decision) and math.prod(decision) == extent
    check(ok, f"{where}: decision {decision} must be {n} positive ints whose product is the "
              f"loop extent {extent}")
    check(decision[-1] % multiple == 0 or not _whole_multiples(extent, multiple, max_innermost),
          f"{where}: the innermost factor of {decision} must be a multiple of {multiple}")
    return _check_inner(decision, n, max_innermost, where, inner)


def _check_inner(decision: Any, n: int, max_innermost: int, where: str, inner: int
                 ) -> list[int]:
    check(math.prod(decision[n - inner:]) <= max_innermost,
          f"{where}: the product of the {inner} innermost factor(s) of {decision} exceeds "
          f"max_innermost_factor {max_innermost}")
    return list(decision)


def sample_tile(rng: random.Random, extent: int, n: int, max_innermost: int,
                inner: int = 1) -> list[int]:
    """Like ``sample_perfect_tile`` but the innermost factor is any integer up to
    ``max_innermost`` (a 6-row register tile of a 1024-long axis); the other factors are a
    perfect tiling of ``ceil(extent / innermost)``, so only the last outer iteration has
    a tail. The innermost factor is drawn first, uniformly."""
    for _ in range(100):
        last = rng.randint(1, min(max_innermost, extent))
        outer = sample_perfect_tile(rng, -(-extent // last), n - 1, 1 << 30)
        tiles = outer + [last]
        if math.prod(tiles[n - inner:]) <= max_innermost:
            return tiles
    return [extent] + [1] * (n - 1)


def check_tile(decision: Any, extent: int, n: int, max_innermost: int, where: str,
               inner: int = 1) -> list[int]:
    ok = isinstance(decision, (list, tuple)) and len(decision) == n and \
        all(isinstance(x, int) and x > 0 for x in decision) and \
        math.prod(decision[:-1]) == -(-extent // decision[-1])
    check(ok, f"{where}: decision {decision} must be {n} positive ints, the first {n - 1} "
              f"multiplying to ceil({extent} / last)")
    return _check_inner(decision, n, max_innermost, where, inner)


def sample_categorical(rng: random.Random, probs: Sequence[float]) -> int:
    return rng.choices(range(len(probs)), weights=probs)[0]


def check_categorical(decision: Any, n: int, where: str) -> int:
    check(isinstance(decision, int) and 0 <= decision < n,
          f"{where}: decision {decision} must be an index in [0, {n})")
    return int(decision)


def tile_decision(rng: random.Random, kind: str, loop: str, extent: int, n: int,
                  max_innermost: int, decision: list[int] | None, inner: int,
                  recorded_extent: int | None, multiple: int = 1
                  ) -> tuple[list[int], dict[str, Any]]:
    """The checked factors of ``sample_perfect_tile`` or ``sample_tile`` (``kind``) on a
    loop named ``loop`` of ``extent`` (drawn when ``decision`` is None), and the attributes
    its trace instruction records. ``recorded_extent``: the extent a replayed trace tiled.

    Example:
        >>> tile_decision(random.Random(0), "sample_perfect_tile", "j", 64, 2, 16, None, 1,
        ...               None)     # ([4, 16], {"n": 2, "max_innermost_factor": 16})
    """
    where = f"{kind}({loop})"
    perfect = kind == "sample_perfect_tile"
    check(1 <= inner <= n and (n >= 2 or perfect), f"{where}: inner={inner} must be in [1, n={n}]")
    check(recorded_extent is None or recorded_extent == extent,
          f"{where}: the trace tiled a loop of extent {recorded_extent}, this one has {extent}")
    check(multiple >= 1 and (perfect or multiple == 1),
          f"{where}: multiple={multiple} must be a positive int (sample_perfect_tile only)")
    if decision is None:
        if perfect:
            decision = sample_perfect_tile(rng, extent, n, max_innermost, inner, multiple)
        else:
            decision = sample_tile(rng, extent, n, max_innermost, inner)
    if perfect:
        decision = check_perfect_tile(decision, extent, n, max_innermost, where, inner,
                                      multiple)
    else:
        decision = check_tile(decision, extent, n, max_innermost, where, inner)
    attrs: dict[str, Any] = {"n": n, "max_innermost_factor": max_innermost}
    if not perfect:
        attrs |= {"inner": inner, "extent": extent}
    elif inner != 1:
        attrs["inner"] = inner
    if multiple != 1:
        attrs["multiple"] = multiple
    return decision, attrs
