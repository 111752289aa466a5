"""Space generators: turn a function into design spaces, i.e. traces whose sampling
instructions are re-drawn to produce new candidates.

``PostOrderApply`` runs schedule rules over the blocks (reductions with reuse
last-to-first, then the other stages last-to-first, so consumers are tiled or placed
before their producers are placed in their loops). ``ScheduleFn`` wraps a user
template: a function that calls primitives and sampling instructions (AutoTVM's knobs).
Post-processors (ParallelVectorizeUnroll, then VerifyRegisterTile) run after each
candidate is drawn, because what they do depends on the loops the draw made; their own
decisions are appended to that candidate's trace, and one that raises ``ScheduleError``
rejects the draw.

Example:
    >>> gen = PostOrderApply.default(Target.host())
    >>> spaces = gen.generate(func)
    >>> sch = sample(func, spaces[0], seed=3, postprocs=gen.postprocs)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..codegen import Target
from ..errors import ScheduleError, TraceError
from ..schedule import Schedule, Trace
from ..schedule.tree import iter_blocks
from ..tir.stmt import PrimFunc
from .add_rfactor import AddRFactor
from .auto_inline import AutoInline
from .multi_level_tiling import MultiLevelTiling
from .outer_reduction import OuterReduction
from .parallel_vectorize_unroll import ParallelVectorizeUnroll
from .random_compute_location import RandomComputeLocation
from .replay_cache import ReplayCache
from .replay_check import replay_checks
from .schedule_rule import ScheduleRule, has_reuse
from .tiled_transpose import TiledTranspose
from .verify_register_tile import VerifyRegisterTile


class Postproc(Protocol):
    """Runs on each drawn candidate; ``decisions`` fixes what it samples. Raising
    ``ScheduleError`` rejects the draw. A post-processor that only checks may also have
    ``check_partial(sch, changing)``, which ``sample`` calls during the replay
    (``replay_check``), so a doomed draw stops early: it must pass over the blocks named
    in ``changing`` and raise only where ``apply_all`` would raise at the end
    (VerifyRegisterTile)."""

    def apply_all(self, sch: Schedule, decisions: list | None = None) -> Schedule: ...


class SpaceGenerator:
    postprocs: list[Postproc] = []

    def generate(self, func: PrimFunc) -> list[Trace]:
        raise NotImplementedError


# Design spaces of one function at most (about; a rule may fork the last ones once
# more). The suite's functions have 1-8. A top-k's 2k small reductions, each forked by
# AddRFactor, made 2^(2k): a k = 6 top-k over 3 x 40 took 26 s to compile untuned, 25 s
# of it generating its spaces (RESULTS.md).
MAX_SPACES = 64


class PostOrderApply(SpaceGenerator):
    def __init__(self, rules: Sequence[ScheduleRule],
                 postprocs: Sequence[Postproc] = (), seed: int = 0) -> None:
        self.rules = list(rules)
        self.postprocs = list(postprocs)
        self.seed = seed

    @staticmethod
    def default(target: Target) -> PostOrderApply:
        return PostOrderApply(
            [AutoInline(), MultiLevelTiling(lanes=target.lanes("float32")),
             AddRFactor(lanes=target.lanes("float32"), cores=target.cores),
             OuterReduction(lanes=target.lanes("float32"), cores=target.cores),
             TiledTranspose(lanes=target.lanes("float32")),
             RandomComputeLocation(lanes=target.lanes("float32"))],
            [ParallelVectorizeUnroll(cores=target.cores, lanes=target.lanes("float32")),
             VerifyRegisterTile.for_target(target)])

    def generate(self, func: PrimFunc) -> list[Trace]:
        schs = [Schedule(func, seed=self.seed)]
        blocks = [b for b, _ in iter_blocks(func.body)]
        # Tiled reductions first; then the other stages last-to-first, so a stage's
        # consumers are in place before its own location is sampled (a softmax's exp
        # stage follows the row sum into the output's row loop, and the row max
        # follows both).
        order = [b.name for b in reversed(blocks) if has_reuse(b)] + \
                [b.name for b in reversed(blocks) if not has_reuse(b)]
        for name in order:
            for rule in self.rules:
                nxt: list[Schedule] = []
                for sch in schs:
                    if name not in sch.block_names():
                        nxt.append(sch)
                        continue
                    got = rule.apply(sch, sch.get_block(name))
                    # Past MAX_SPACES the rules fork no more: each keeps its first
                    # schedule (AddRFactor's is the block as it was).
                    nxt += got if len(schs) < MAX_SPACES else got[:1]
                schs = nxt
        return [s.trace for s in schs]


class ScheduleFn(SpaceGenerator):
    """A user template: ``fn(sch)`` schedules a fresh Schedule using sampling instructions.

    ``fn`` runs once; the trace it records is the design space, and every candidate is
    that trace replayed with other decisions. So a choice belongs in a sampling
    instruction whose result a primitive takes (a tile size, a compute location), not in
    a Python ``if`` on ``sch.get(v)``: the branch the first draw took would be every
    candidate's.

    Example:
        >>> def template(sch):
        ...     i, j, k = sch.get_loops(sch.get_block("C"))
        ...     sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8))
        ...     sch.vectorize(j)
        >>> tt.tune(func, trials=32, space=template)
    """

    def __init__(self, fn: Callable[[Schedule], object],
                 postprocs: Sequence[Postproc] = ()) -> None:
        self.fn = fn
        self.postprocs = list(postprocs)

    def generate(self, func: PrimFunc) -> list[Trace]:
        sch = Schedule(func, seed=0)
        self.fn(sch)
        return [sch.trace]


def sample(func: PrimFunc, space: Trace, seed: int,
           postprocs: Sequence[Postproc] = (),
           decisions: dict[int, object] | None = None,
           post_decisions: Sequence[list | None] = (),
           cache: ReplayCache | None = None) -> Schedule | None:
    """A candidate from a design space: replay with ``decisions`` (by instruction index;
    the rest re-drawn), then run the post-processors (with ``post_decisions[i]`` for the
    i-th). None if a drawn decision makes some primitive illegal. With a ``cache``, the
    replay resumes from the longest prefix of ``decisions`` replayed before."""
    dec = dict(decisions or {})
    hit = cache.resume(space, dec, seed) if cache is not None else None
    start, env = 0, {}  # type: tuple[int, dict[str, object]]
    if hit is not None:
        start, sch, env = hit
    else:
        sch = Schedule(func, seed=seed, verify=False)
    checks = [c for p in postprocs if (c := getattr(p, "check_partial", None)) is not None]
    try:
        Trace(space.insts).apply(sch, dec, start=start, env=env,
                                 on_sample=cache.recorder(space, sch) if cache else None,
                                 after=replay_checks(space, sch, checks) if checks else None)
        for i, p in enumerate(postprocs):
            p.apply_all(sch, post_decisions[i] if i < len(post_decisions) else None)
    except (ScheduleError, TraceError):
        return None
    return sch
