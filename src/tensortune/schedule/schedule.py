"""``Schedule``: apply primitives to a function through random variables, recording a trace.

Every method checks legality and raises ``ScheduleError`` (naming the block or loop and
what would be valid) before changing anything, so a failed call leaves the schedule as it
was. Primitives live in ``loops.py``, ``compute_location.py``, ``inline.py``, ``cache.py``
and ``reduction.py``; this class only resolves random variables and records.

Example:
    >>> sch = tt.Schedule(func)
    >>> blk = sch.get_block("C")
    >>> i, j, k = sch.get_loops(blk)
    >>> i0, i1 = sch.split(i, factors=[None, 32])
    >>> sch.parallel(i0)
    >>> print(sch.trace.as_python())
    b0 = sch.get_block('C')
    l1, l2, l3 = sch.get_loops(b0)
    l4, l5 = sch.split(l1, factors=[None, 32])
    sch.parallel(l4)
"""

from __future__ import annotations

import copy
import inspect
import random
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ScheduleError, check
from ..tir.expr import Var
from ..tir.stmt import Buffer, ForKind, PrimFunc
from ..tir.verify import verify as _verify
from . import cache, compute_location, inline, loops, reduction, sampling
from .index_map import IndexMap
from .trace import BlockRV, ExprRV, Instruction, LoopRV, RootRV, Trace
from .tree import (
    find_block,
    find_loop,
    iter_blocks,
    readers,
    reads,
    writers,
    writes,
)

ROOT = RootRV()


class Schedule:
    """A function being scheduled (``sch.func``), its original (``sch.original``) and the
    trace of everything applied (``sch.trace``). ``seed`` makes sampling deterministic.
    ``verify=False`` skips the IR verifier after each primitive: the search replays
    thousands of traces and the builder verifies each candidate before compiling it."""

    def __init__(self, func: PrimFunc, *, seed: int | None = None, verify: bool = True) -> None:
        if not isinstance(func, PrimFunc):
            raise ScheduleError(f"Schedule takes a PrimFunc, got {type(func).__name__}")
        self.verify = verify
        _verify(func)
        self.original = func
        self.func = func
        self.trace = Trace()
        self.rng = random.Random(seed)
        self._rv: dict[int, Any] = {}

    @classmethod
    def from_trace(cls, func: PrimFunc, trace: Trace | str, *, verify: bool = True) -> Schedule:
        """``func`` scheduled by ``trace`` (a ``Trace`` or its JSON), decisions as recorded.

        >>> sch = Schedule.from_trace(func, record.trace)
        """
        sch = cls(func, verify=verify)
        (Trace.from_json(trace) if isinstance(trace, str) else trace).apply(sch)
        return sch

    def copy(self) -> Schedule:
        new = copy.copy(self)
        new.trace = Trace(list(self.trace.insts), dict(self.trace.decisions))
        new.rng = random.Random()
        new.rng.setstate(self.rng.getstate())
        new._rv = dict(self._rv)
        return new

    def __str__(self) -> str:
        return str(self.func)

    # ------------------------------------------------------------------ plumbing
    def _new(self, cls: type, value: Any) -> Any:
        rv = cls()
        self._rv[id(rv)] = (rv, value)
        return rv

    def _get(self, rv: Any, cls: type, what: str) -> Any:
        if not isinstance(rv, cls) or id(rv) not in self._rv:
            raise ScheduleError(f"{what}: expected a {cls.__name__} of this schedule, "
                                f"got {rv!r}")
        return self._rv[id(rv)][1]

    def _block(self, rv: Any, what: str) -> str:
        name = self._get(rv, BlockRV, what)
        find_block(self.func, name)
        return name

    def _loop(self, rv: Any, what: str) -> Var:
        var = self._get(rv, LoopRV, what)
        if var is None:
            raise ScheduleError(f"{what}: {rv.name} is the root compute location (sampled by "
                                "sample_compute_location), not a loop")
        return var

    def _int(self, x: Any, what: str) -> int | None:
        if isinstance(x, ExprRV):
            return self._get(x, ExprRV, what)
        return x

    def _record(self, kind: str, inputs: Sequence[Any], attrs: dict[str, Any],
                outputs: Sequence[Any], decision: Any = None) -> None:
        self.trace.append(Instruction(kind, tuple(inputs), tuple(attrs.items()),
                                      tuple(outputs)), decision)

    def _commit(self, func: PrimFunc) -> None:
        if self.verify:
            _verify(func)
        self.func = func

    # ------------------------------------------------------------------ queries
    def get_block(self, name: str) -> BlockRV:
        find_block(self.func, name)
        rv = self._new(BlockRV, name)
        self._record("get_block", [name], {}, [rv])
        return rv

    def get_loops(self, block: BlockRV, innermost: int | None = None) -> list[LoopRV]:
        """The loops around ``block``, outermost first; with ``innermost``, only that many
        of the innermost (a block whose compute location is sampled has as many own
        loops wherever it lands, and a trace must get the same number back on replay).

        >>> sch.get_loops(sch.get_block("w_global"), innermost=4)
        """
        name = self._block(block, "get_loops")
        _, path = find_block(self.func, name)
        if innermost is not None:
            if not 0 < innermost <= len(path):
                raise ScheduleError(f"get_loops: block {name} has {len(path)} loops, "
                                    f"asked for the innermost {innermost}")
            path = path[len(path) - innermost:]
        rvs = [self._new(LoopRV, lp.var) for lp in path]
        self._record("get_loops", [block], {} if innermost is None else
                     {"innermost": innermost}, rvs)
        return rvs

    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        blk, _ = find_block(self.func, self._block(block, "get_producers"))
        names = [w.name for b in reads(blk) for w in writers(self.func, b) if w.name != blk.name]
        rvs = [self._new(BlockRV, n) for n in dict.fromkeys(names)]
        self._record("get_producers", [block], {}, rvs)
        return rvs

    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        blk, _ = find_block(self.func, self._block(block, "get_consumers"))
        names = [r.name for b in writes(blk) for r in readers(self.func, b)]
        rvs = [self._new(BlockRV, n) for n in dict.fromkeys(names)]
        self._record("get_consumers", [block], {}, rvs)
        return rvs

    def get(self, rv: Any) -> Any:
        """The IR behind a random variable (a Block, a For or an int); not recorded."""
        if isinstance(rv, BlockRV):
            return find_block(self.func, self._block(rv, "get"))[0]
        if isinstance(rv, LoopRV):
            return find_loop(self.func, self._loop(rv, "get"))[0]
        return self._get(rv, ExprRV, "get")

    def block_name(self, rv: BlockRV) -> str:
        """The name of the block ``rv`` stands for (it may no longer exist); not recorded."""
        return str(self._get(rv, BlockRV, "block_name"))

    def block_names(self) -> list[str]:
        return [b.name for b, _ in iter_blocks(self.func.body)]

    # ------------------------------------------------------------------ loops
    def split(self, loop: LoopRV, factors: Sequence[int | ExprRV | None]) -> list[LoopRV]:
        var = self._loop(loop, "split")
        facs = [self._int(f, "split") for f in factors]
        func, new = loops.split(self.func, var, facs)
        self._commit(func)
        rvs = [self._new(LoopRV, v) for v in new]
        self._record("split", [loop], {"factors": list(factors)}, rvs)
        return rvs

    def fuse(self, *loop_rvs: LoopRV) -> LoopRV:
        func, new = loops.fuse(self.func, [self._loop(lp, "fuse") for lp in loop_rvs])
        self._commit(func)
        rv = self._new(LoopRV, new)
        self._record("fuse", list(loop_rvs), {}, [rv])
        return rv

    def reorder(self, *loop_rvs: LoopRV) -> None:
        self._commit(loops.reorder(self.func, [self._loop(lp, "reorder") for lp in loop_rvs]))
        self._record("reorder", list(loop_rvs), {}, [])

    def _kind(self, name: str, loop: LoopRV, kind: ForKind) -> None:
        self._commit(loops.set_kind(self.func, self._loop(loop, name), kind))
        self._record(name, [loop], {}, [])

    def parallel(self, loop: LoopRV) -> None:
        self._kind("parallel", loop, ForKind.PARALLEL)

    def vectorize(self, loop: LoopRV) -> None:
        self._kind("vectorize", loop, ForKind.VECTORIZED)

    def unroll(self, loop: LoopRV) -> None:
        self._kind("unroll", loop, ForKind.UNROLLED)

    def annotate(self, loop: LoopRV, key: str, value: int | ExprRV) -> None:
        val = self._int(value, "annotate")
        self._commit(loops.annotate(self.func, self._loop(loop, "annotate"), key, val))
        self._record("annotate", [loop, key, value], {}, [])

    # ------------------------------------------------------------------ compute location
    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        name = self._block(block, "compute_at")
        # A sampled location may be the root: then the block stays where it is.
        var = None if isinstance(loop, RootRV) else self._get(loop, LoopRV, "compute_at")
        if var is not None:
            self._commit(compute_location.compute_at(self.func, name, var))
        self._record("compute_at", [block, loop], {}, [])

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        name = self._block(block, "reverse_compute_at")
        var = self._loop(loop, "reverse_compute_at")
        self._commit(compute_location.reverse_compute_at(self.func, name, var))
        self._record("reverse_compute_at", [block, loop], {}, [])

    def compute_inline(self, block: BlockRV) -> None:
        self._commit(inline.compute_inline(self.func, self._block(block, "compute_inline")))
        self._record("compute_inline", [block], {}, [])

    def reverse_compute_inline(self, block: BlockRV) -> None:
        name = self._block(block, "reverse_compute_inline")
        self._commit(inline.reverse_compute_inline(self.func, name))
        self._record("reverse_compute_inline", [block], {}, [])

    # ------------------------------------------------------------------ caches and layout
    def cache_read(self, block: BlockRV, read_index: int, scope: str = "global") -> BlockRV:
        name = self._block(block, "cache_read")
        func, new = cache.cache_read(self.func, name, read_index, scope)
        self._commit(func)
        rv = self._new(BlockRV, new)
        self._record("cache_read", [block, read_index, scope], {}, [rv])
        return rv

    def cache_write(self, block: BlockRV, write_index: int = 0, scope: str = "local") -> BlockRV:
        name = self._block(block, "cache_write")
        func, new = cache.cache_write(self.func, name, write_index, scope)
        self._commit(func)
        rv = self._new(BlockRV, new)
        self._record("cache_write", [block, write_index, scope], {}, [rv])
        return rv

    def transform_layout(self, block: BlockRV, buffer: str,
                         index_map: Callable[..., Any] | str) -> None:
        """``buffer`` names an intermediate buffer that ``block`` reads or writes;
        ``index_map`` is a lambda or its text."""
        buf = self._buffer_of(block, buffer, "transform_layout")
        im = IndexMap.parse(index_map, len(buf.shape))
        self._commit(cache.transform_layout(self.func, buf, im.params, im.results))
        self._record("transform_layout", [block, buffer, im.text], {}, [])

    def storage_align(self, block: BlockRV, buffer: str, factor: int, offset: int) -> None:
        """``buffer`` names an intermediate buffer that ``block`` reads or writes."""
        buf = self._buffer_of(block, buffer, "storage_align")
        self._commit(cache.storage_align(self.func, buf, factor, offset))
        self._record("storage_align", [block, buffer, factor, offset], {}, [])

    def _buffer_of(self, block: BlockRV, name: str, what: str) -> Buffer:
        """The buffer called ``name`` that ``block`` reads or writes."""
        blk, _ = find_block(self.func, self._block(block, what))
        bufs = [b for b in (*reads(blk), *writes(blk)) if b.name == name]
        check(bool(bufs), f"{what}: block {blk.name} does not access a buffer named "
                          f"{name!r}; it accesses "
                          f"{[b.name for b in (*reads(blk), *writes(blk))]}")
        return bufs[0]

    # ------------------------------------------------------------------ reductions
    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        name = self._block(block, "decompose_reduction")
        func, new = reduction.decompose_reduction(self.func, name,
                                                  self._loop(loop, "decompose_reduction"))
        self._commit(func)
        rv = self._new(BlockRV, new)
        self._record("decompose_reduction", [block, loop], {}, [rv])
        return rv

    def rfactor(self, loop: LoopRV, factor_axis: int = 0) -> BlockRV:
        func, new = reduction.rfactor(self.func, self._loop(loop, "rfactor"), factor_axis)
        self._commit(func)
        rv = self._new(BlockRV, new)
        self._record("rfactor", [loop], {"factor_axis": factor_axis}, [rv])
        return rv

    # ------------------------------------------------------------------ sampling
    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision: list[int] | None = None, inner: int = 1,
                            multiple: int = 1) -> list[ExprRV]:
        """``n`` factors of the loop's extent; the product of the ``inner`` innermost is at
        most ``max_innermost_factor``; with ``multiple`` > 1 the innermost is a multiple
        of it where the extent has such a divisor (a vector axis: whole vectors only).

        Example:
            >>> i, j = sch.get_loops(sch.get_block("C"))[:2]
            >>> j0, j1 = sch.split(j, sch.sample_perfect_tile(j, n=2, multiple=8))
        """
        return self._sample_tiles("sample_perfect_tile", loop, n, max_innermost_factor,
                                  decision, inner, None, multiple)

    def sample_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                    decision: list[int] | None = None, inner: int = 1,
                    extent: int | None = None) -> list[ExprRV]:
        """``n`` tile factors whose innermost may not divide the extent (the last outer
        iteration is then a guarded tail): the other factors tile ceil(extent / innermost)
        exactly. The product of the ``inner`` innermost is at most max_innermost_factor.
        The extent is recorded so mutators can draw a new innermost factor."""
        return self._sample_tiles("sample_tile", loop, n, max_innermost_factor, decision,
                                  inner, extent)

    def _sample_tiles(self, kind: str, loop: LoopRV, n: int, max_innermost: int,
                      decision: list[int] | None, inner: int, extent: int | None,
                      multiple: int = 1) -> list[ExprRV]:
        lp, _ = find_loop(self.func, self._loop(loop, kind))
        decision, attrs = sampling.tile_decision(self.rng, kind, lp.var.name, lp.extent, n,
                                                 max_innermost, decision, inner, extent,
                                                 multiple)
        rvs = [self._new(ExprRV, f) for f in decision]
        self._record(kind, [loop], attrs, rvs, decision)
        return rvs

    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float],
                           decision: int | None = None) -> ExprRV:
        check(len(candidates) == len(probs) and len(candidates) > 0,
              "sample_categorical: candidates and probs must be non-empty and equally long")
        if decision is None:
            decision = sampling.sample_categorical(self.rng, probs)
        decision = sampling.check_categorical(decision, len(candidates), "sample_categorical")
        rv = self._new(ExprRV, candidates[decision])
        self._record("sample_categorical", [],
                     {"candidates": list(candidates), "probs": list(probs)}, [rv], decision)
        return rv

    def compute_location_candidates(self, block: BlockRV, outside: LoopRV | None = None,
                                    upto: int | None = None) -> list[Var | None]:
        """None (stay at root) and every loop where compute_at(block, loop) is legal and
        not redundant: a loop the consumer's reads of the block's output do not move
        with would recompute the same values in each of its iterations. With
        ``outside``, only loops that enclose that loop of the consumer (a weight panel
        copied inside the reduction loops would be copied again at every step). With
        ``upto``, the list may end once it holds index ``upto`` (a replay knows which one
        it takes, and each candidate costs a legality check)."""
        name = self._block(block, "sample_compute_location")
        stop = self._loop(outside, "sample_compute_location") if outside is not None else None
        return compute_location.location_candidates(self.func, name, stop, upto)

    def sample_compute_location(self, block: BlockRV, outside: LoopRV | None = None,
                                decision: int | None = None) -> LoopRV:
        """A legal compute location of ``block``: ``tt.ROOT`` or a loop of its consumer
        (with ``outside``, one that encloses that loop); the decision is an index into
        ``compute_location_candidates``."""
        lazy = type(decision) is int and decision >= 0   # else the whole list, for the error
        cands = self.compute_location_candidates(block, outside, decision if lazy else None)
        if decision is None:
            decision = self.rng.randrange(len(cands))
        decision = sampling.check_categorical(decision, len(cands), "sample_compute_location")
        # Root or not, the result is a fresh LoopRV: replayed with another decision, the
        # compute_at that uses it must follow the new location.
        out: LoopRV = self._new(LoopRV, cands[decision])
        self._record("sample_compute_location", [block] if outside is None else
                     [block, outside], {}, [out], decision)
        return out


# The primitives' documentation (with the loop nest before and after) lives beside their
# algorithms; the methods users call show the same text.
for _meth, _fn in [("split", loops.split), ("fuse", loops.fuse), ("reorder", loops.reorder),
                   ("parallel", loops.set_kind), ("vectorize", loops.set_kind),
                   ("unroll", loops.set_kind), ("annotate", loops.annotate),
                   ("compute_at", compute_location.compute_at),
                   ("reverse_compute_at", compute_location.reverse_compute_at),
                   ("compute_inline", inline.compute_inline),
                   ("reverse_compute_inline", inline.reverse_compute_inline),
                   ("cache_read", cache.cache_read), ("cache_write", cache.cache_write),
                   ("transform_layout", cache.transform_layout),
                   ("storage_align", cache.storage_align),
                   ("decompose_reduction", reduction.decompose_reduction),
                   ("rfactor", reduction.rfactor)]:
    # A method's own line (what it takes: a block and a buffer's name) leads the
    # primitive's description, which speaks of the function and buffer it rewrites.
    _own = getattr(Schedule, _meth).__doc__
    getattr(Schedule, _meth).__doc__ = (inspect.cleandoc(_own) + "\n\n" + inspect.cleandoc(
        _fn.__doc__ or "")) if _own else _fn.__doc__
