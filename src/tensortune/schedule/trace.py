"""Traces: the replayable record of a schedule, as data.

A trace is a list of instructions (a primitive's name, its inputs, attributes and output
random variables) plus the decisions of its sampling instructions. It prints as Python a
person can paste and run, round-trips through JSON, and replays on a fresh schedule with
its own decisions or new ones (mutators only change decisions).

Example:
    >>> text = sch.trace.as_json()
    >>> t = Trace.from_json(text)
    >>> sch2 = tt.Schedule(func)
    >>> t.apply(sch2)                        # same program as sch
    >>> t.with_decision(3, [8, 16]).apply(tt.Schedule(func))
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import TraceError


class RV:
    """A random variable of a schedule: a block, a loop or an integer."""

    prefix = "x"

    def __init__(self) -> None:
        self.name = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class BlockRV(RV):
    prefix = "b"


class LoopRV(RV):
    prefix = "l"


class ExprRV(RV):
    prefix = "v"


class RootRV(LoopRV):
    """The 'root' compute location: compute_at to it leaves the block where it is."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "ROOT"


LIST_RESULTS = ("get_loops", "get_producers", "get_consumers", "split", "sample_perfect_tile",
                "sample_tile")
SAMPLING = ("sample_perfect_tile", "sample_tile", "sample_categorical",
            "sample_compute_location")


@dataclass(frozen=True)
class Instruction:
    kind: str
    inputs: tuple[Any, ...]          # RVs, ints, strings, None, lists of those
    attrs: tuple[tuple[str, Any], ...]
    outputs: tuple[RV, ...]

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


@dataclass
class Trace:
    insts: list[Instruction] = field(default_factory=list)
    decisions: dict[int, Any] = field(default_factory=dict)
    _named: tuple[int, int] | None = field(default=None, repr=False, compare=False)

    def append(self, inst: Instruction, decision: Any = None) -> None:
        if self._named is None or self._named[0] != len(self.insts):
            # Counted once per trace object, then kept up to date (appending is the
            # search's inner loop: every replay appends every instruction).
            self._named = (len(self.insts), sum(len(i.outputs) for i in self.insts))
        named = self._named[1]
        for rv in inst.outputs:
            if not rv.name:
                rv.name = f"{rv.prefix}{named}"
            named += 1
        self._named = (len(self.insts) + 1, named)
        if inst.kind in SAMPLING:
            self.decisions[len(self.insts)] = decision
        self.insts.append(inst)

    def __len__(self) -> int:
        return len(self.insts)

    def with_decision(self, index: int, decision: Any) -> Trace:
        """A copy with the decision of sampling instruction ``index`` replaced."""
        if not 0 <= index < len(self.insts) or self.insts[index].kind not in SAMPLING:
            raise TraceError(f"instruction {index} is not a sampling instruction; sampling "
                             f"instructions are at {sorted(self.decisions)}")
        d = dict(self.decisions)
        d[index] = decision
        return replace(self, decisions=d)

    # ------------------------------------------------------------------ formats
    def as_json(self) -> str:
        return json.dumps({
            "insts": [{"kind": i.kind, "inputs": [_enc(x) for x in i.inputs],
                       "attrs": {k: _enc(v) for k, v in i.attrs},
                       "outputs": [[type(o).__name__, o.name] for o in i.outputs]}
                      for i in self.insts],
            "decisions": {str(k): v for k, v in self.decisions.items()},
        })

    @staticmethod
    def from_json(text: str) -> Trace:
        try:
            data = json.loads(text)
            rvs: dict[str, RV] = {"ROOT": RootRV()}
            insts = []
            for d in data["insts"]:
                outs = []
                for cls_name, name in d["outputs"]:
                    rv = {"BlockRV": BlockRV, "LoopRV": LoopRV, "ExprRV": ExprRV,
                          "RootRV": RootRV}[cls_name]()
                    rv.name = name
                    rvs[name] = rv
                    outs.append(rv)
                insts.append(Instruction(
                    d["kind"], tuple(_dec(x, rvs) for x in d["inputs"]),
                    tuple((k, _dec(v, rvs)) for k, v in d["attrs"].items()), tuple(outs)))
            decisions = {int(k): v for k, v in data["decisions"].items()}
        except (KeyError, TypeError, ValueError) as e:
            raise TraceError(f"malformed trace JSON: {e}") from e
        return Trace(insts, decisions)

    def as_python(self) -> str:
        lines = []
        for idx, i in enumerate(self.insts):
            args = [_py(x) for x in i.inputs]
            args += [f"{k}={_py(v)}" for k, v in i.attrs]
            if i.kind in SAMPLING:
                args.append(f"decision={_py(self.decisions.get(idx))}")
            lhs = ", ".join(o.name for o in i.outputs)
            if i.kind in LIST_RESULTS and len(i.outputs) == 1:
                lhs = f"[{lhs}]"  # the call returns a list of one
            call = f"sch.{i.kind}({', '.join(args)})"
            lines.append(f"{lhs} = {call}" if lhs else call)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_python()

    def apply(self, sch: Any, decisions: dict[int, Any] | None = None, *, start: int = 0,
              env: dict[str, Any] | None = None,
              on_sample: Callable[[int, dict[str, Any]], None] | None = None,
              after: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        """Replay every instruction on ``sch`` (a fresh ``Schedule`` of the same function).

        ``start`` and ``env`` resume a replay: ``sch`` then holds the state before
        instruction ``start`` and ``env`` the random variables bound so far.
        ``on_sample(index, env)`` is called before each sampling instruction and once at
        the end (index = len(self)), so a caller can keep snapshots to resume from.
        ``after(index, env)`` is called after each instruction (``space.replay_check``:
        a check that stops a doomed replay early by raising)."""
        dec = dict(self.decisions)
        dec.update(decisions or {})
        env = {} if env is None else env
        for idx in range(start, len(self.insts)):
            inst = self.insts[idx]
            args = [_bind(x, env) for x in inst.inputs]
            kw = {k: _bind(v, env) for k, v in inst.attrs}
            if inst.kind in SAMPLING:
                if on_sample is not None:
                    on_sample(idx, env)
                kw["decision"] = dec.get(idx)
            fn = getattr(sch, inst.kind, None)
            if fn is None:
                raise TraceError(f"unknown instruction {inst.kind!r} at position {idx}")
            out = fn(*args, **kw)
            outs = out if isinstance(out, (list, tuple)) else ([] if out is None else [out])
            if len(outs) != len(inst.outputs):
                raise TraceError(f"instruction {idx} ({inst.kind}) produced {len(outs)} "
                                 f"outputs on replay, the trace recorded {len(inst.outputs)}")
            for rv, new in zip(inst.outputs, outs):
                env[rv.name] = new
            if after is not None:
                after(idx, env)
        if on_sample is not None:
            on_sample(len(self.insts), env)


def _enc(x: Any) -> Any:
    if isinstance(x, RV):
        return {"rv": x.name}
    if isinstance(x, (list, tuple)):
        return [_enc(y) for y in x]
    if x is None or isinstance(x, (int, float, str, bool)):
        return x
    raise TraceError(f"cannot store {x!r} in a trace")


def _dec(x: Any, rvs: dict[str, RV]) -> Any:
    if isinstance(x, dict) and "rv" in x:
        if x["rv"] not in rvs:
            raise TraceError(f"trace uses {x['rv']} before defining it")
        return rvs[x["rv"]]
    if isinstance(x, list):
        return [_dec(y, rvs) for y in x]
    return x


def _bind(x: Any, env: dict[str, Any]) -> Any:
    if isinstance(x, RootRV):
        return x
    if isinstance(x, RV):
        if x.name not in env:
            raise TraceError(f"{x.name} is used before it is defined")
        return env[x.name]
    if isinstance(x, list):
        return [_bind(y, env) for y in x]
    return x


def _py(x: Any) -> str:
    if isinstance(x, RootRV):
        return "tt.ROOT"
    if isinstance(x, RV):
        return x.name
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_py(y) for y in x) + "]"
    return repr(x)
