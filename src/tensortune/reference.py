"""A NumPy float64 reference evaluator for unscheduled functions, and result checks.

It reads each block's iteration domain directly (not the loops), vectorised over the
domain in chunks, so it shares no code path with the C backend it is used to check. A
sum of a product (a matmul's, a conv's) is contracted with ``np.einsum`` over the axes
each factor varies along, and a gather is cut along the axes its indices do not vary
along: a 1024^3 matmul takes 0.1 s, not 3.5 s, and never forms its 8 GB product.

Example:
    >>> outs = evaluate(func, [a, b])      # list of float64 arrays, one per output
    >>> check_close(c, outs[0], "C")       # raises CheckError with the worst element
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .errors import TensorTuneError
from .tir.expr import (
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
    is_float,
    structural_equal,
)
from .tir.functor import blocks_in
from .tir.stmt import Block, BufferStore, PrimFunc

_CHUNK = 1 << 22
_AXES = "abcdefghijklmnopqrstuvwxyz"
_erf = np.frompyfunc(math.erf, 1, 1)


class CheckError(TensorTuneError):
    """A kernel's output differs from the reference or is not finite."""


def random_inputs(func: PrimFunc, seed: int = 0,
                  span: tuple[float, float] = (-1.0, 1.0)) -> list[np.ndarray]:
    """Uniform float inputs in ``span`` (default (-1, 1); never zeros); ints uniform in
    [0, 8)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in func.inputs:
        if is_float(b.dtype):
            out.append(rng.uniform(*span, size=b.shape).astype(b.dtype))
        else:
            out.append(rng.integers(0, 8, size=b.shape).astype(b.dtype))
    return out


# The spans of float inputs a check tries in turn, until the reference is finite: both
# signs first (a ReLU or a max is checked on both sides of zero), then positive numbers
# away from zero, for a function that takes a square root or logarithm of an input (an
# optimizer's step, a log of probabilities).
CHECK_SPANS = ((-1.0, 1.0), (0.5, 1.5))


def _outputs_and_fault(func: PrimFunc, ins: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], str | None]:
    """``func``'s reference outputs on ``ins``, and where the first non-finite one is
    ("its output 0 (Y) is nan at index (0, 0)"), None if all are finite."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        outs = evaluate(func, ins)      # a NaN is reported below, not warned about
    for k, o in enumerate(outs):
        if not np.all(np.isfinite(o)):
            at = tuple(int(i) for i in np.argwhere(~np.isfinite(o))[0])
            return outs, f"its output {k} ({func.outputs[k].name}) is {o[at]} at index {at}"
    return outs, None


def given_case(func: PrimFunc, inputs: Sequence[np.ndarray]
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The user's own ``inputs`` to check ``func``'s candidates on (C-contiguous copies),
    and the reference outputs on them. Raises ``CheckError`` for a wrong count, shape or
    dtype (naming the input and what ``func`` takes) or a reference not finite on them.

    Example:
        >>> ins, expected = given_case(func, [x + 3.0])    # log(x - 2) needs x > 2
    """
    if len(inputs) != len(func.inputs):
        n = len(func.inputs)
        raise CheckError(f"{func.name} takes {n} input{'s' if n != 1 else ''} "
                         f"({', '.join(b.name for b in func.inputs)}), got {len(inputs)}")
    ins = []
    for k, (b, x) in enumerate(zip(func.inputs, inputs, strict=True)):
        a = np.asarray(x)
        if a.shape != b.shape or a.dtype != np.dtype(b.dtype):
            raise CheckError(f"{func.name}: input {k} ({b.name}) must be {b.dtype} of shape "
                             f"{b.shape}, got {a.dtype} of shape {a.shape}")
        ins.append(np.ascontiguousarray(a))
    outs, fault = _outputs_and_fault(func, ins)
    if fault is not None:
        raise CheckError(f"{func.name}: {fault} on the given inputs; candidates are checked "
                         "on them, so its outputs must be finite there")
    return ins, outs


def reference_case(func: PrimFunc, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs to check ``func``'s candidates on, and the reference outputs on them: the
    first of ``CHECK_SPANS`` where every output is finite. A candidate must be finite
    everywhere (an element it never writes shows as NaN), so a reference that is not
    finite on any of them raises ``CheckError`` naming the output and the element.

    Example:
        >>> ins, expected = reference_case(func)    # sqrt(x): inputs in (0.5, 1.5)
    """
    fault = None
    for span in CHECK_SPANS:
        ins = random_inputs(func, seed, span)
        outs, fault = _outputs_and_fault(func, ins)
        if fault is None:
            return ins, outs
    spans = " and ".join(f"({lo:g}, {hi:g})" for lo, hi in CHECK_SPANS)
    raise CheckError(
        f"{func.name}: {fault} on random inputs in {spans}, so no candidate can be checked "
        "against it; every candidate is checked on such inputs, and its outputs must be "
        "finite. Pass inputs it is finite on (tune(..., inputs=[...]), and the same to "
        "compile), or write it so that it is finite there")


def eval_expr(e: Expr, env: dict, arrays: dict) -> np.ndarray | float | int:
    """Evaluate ``e`` with NumPy: ``env`` maps variables to arrays, ``arrays`` buffers."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    if isinstance(e, BufferLoad):
        arr = arrays[e.buffer]
        # Indices under an if_then_else may leave the buffer where the branch is not taken;
        # clipping keeps the gather legal and the Select discards those values.
        idx = [np.clip(np.asarray(eval_expr(i, env, arrays)), 0, n - 1)
               for i, n in zip(e.indices, arr.shape, strict=True)]
        return arr[_uniform_axes_cut(idx)]
    if isinstance(e, BinOp):
        a, b = eval_expr(e.a, env, arrays), eval_expr(e.b, env, arrays)
        return _binop(e.op, a, b, e.dtype)
    if isinstance(e, Not):
        return np.logical_not(eval_expr(e.a, env, arrays))
    if isinstance(e, Select):
        return np.where(eval_expr(e.cond, env, arrays), eval_expr(e.t, env, arrays),
                        eval_expr(e.f, env, arrays))
    if isinstance(e, Cast):
        v = np.asarray(eval_expr(e.value, env, arrays))
        return v.astype(np.float64) if is_float(e.dtype) else np.trunc(v).astype(np.int64)
    if isinstance(e, Call):
        args = [np.asarray(eval_expr(a, env, arrays), dtype=np.float64) for a in e.args]
        if e.name == "erf":
            return np.asarray(_erf(args[0]), dtype=np.float64)
        fn = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
              "fabs": np.abs, "pow": np.power, "floor": np.floor, "ceil": np.ceil,
              "sin": np.sin, "cos": np.cos}[e.name]
        return fn(*args)
    raise TypeError(f"reference: cannot evaluate {type(e).__name__}")


def _uniform_axes_cut(idx: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The index arrays of a gather, each cut to one slice along every axis it does not
    vary along: the gather's shape is their broadcast, so an axis none of them varies
    along (a grouped conv's ``k // 64 * 64`` with one group) is gathered once, not once
    per step of that axis, and broadcast by the arithmetic that follows."""
    nd = max((a.ndim for a in idx), default=0)
    out = []
    for a in idx:
        a = a.reshape((1,) * (nd - a.ndim) + a.shape)
        for ax in range(nd):
            if a.shape[ax] > 1:
                first = a.take([0], axis=ax)
                if np.array_equal(a, np.broadcast_to(first, a.shape)):
                    a = first
        out.append(a)
    return tuple(out)


def _binop(op: str, a, b, dtype: str):
    if op == "+":
        return np.add(a, b)
    if op == "-":
        return np.subtract(a, b)
    if op == "*":
        return np.multiply(a, b)
    if op == "/":
        return np.true_divide(a, b)
    if op == "//":
        return np.floor_divide(a, b)
    if op == "%":
        return np.mod(a, b)
    if op == "min":
        return np.minimum(a, b)
    if op == "max":
        return np.maximum(a, b)
    fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
          "==": np.equal, "!=": np.not_equal, "&&": np.logical_and, "||": np.logical_or}
    return fn[op](a, b)


def _reduction(block: Block) -> tuple[str, Expr] | None:
    """(combiner, source) if the body is ``buf[idx] = combine(buf[idx], source)``."""
    st = block.body
    if block.init is None or not isinstance(st, BufferStore) or not isinstance(st.value, BinOp):
        return None
    v = st.value
    a = v.a
    if isinstance(a, BufferLoad) and a.buffer is st.buffer and \
            structural_equal(a.indices, st.indices):
        return {"+": "sum", "max": "max", "min": "min"}.get(v.op, ""), v.b
    return None


def _env(ivs: list, lo: int, hi: int, chunked: bool) -> dict:
    """Each iteration variable as an arange along its own axis; the first over
    ``[lo, hi)`` when ``chunked``."""
    env: dict = {}
    for d, iv in enumerate(ivs):
        rng = np.arange(lo, hi) if d == 0 and chunked else np.arange(iv.extent)
        shape = [1] * len(ivs)
        shape[d] = -1
        env[iv.var] = rng.reshape(shape)
    return env


def _contract(a, b, shape: tuple[int, ...], n_spatial: int) -> np.ndarray:
    """The sum over the reduction axes (those after the first ``n_spatial``) of ``a * b``,
    arrays broadcastable to ``shape``, kept as size-1 axes; by ``np.einsum`` over the axes
    each factor varies along, so the product over the whole domain is never formed (a
    1024^3 matmul's would be 8 GB)."""
    nd = len(shape)
    ops, subs, present = [], [], set()
    for x in (a, b):
        x = np.asarray(x)
        x = x.reshape((1,) * (nd - x.ndim) + x.shape)
        keep = [d for d in range(nd) if x.shape[d] > 1]
        present.update(keep)
        ops.append(x.reshape([x.shape[d] for d in keep]))
        subs.append("".join(_AXES[d] for d in keep))
    out = [d for d in range(n_spatial) if d in present]
    r = np.einsum(f"{subs[0]},{subs[1]}->{''.join(_AXES[d] for d in out)}", *ops,
                  optimize=True)
    # A reduction axis neither factor varies along adds the same term extent times.
    times = math.prod(shape[d] for d in range(n_spatial, nd) if d not in present)
    if times != 1:
        r = r * times
    return np.asarray(r).reshape([shape[d] if d in out else 1 for d in range(nd)])


def _product(red: tuple[str, Expr] | None) -> tuple[Expr, Expr] | None:
    """The two factors of a sum reduction of a product (a matmul's, a conv's)."""
    if red is not None and red[0] == "sum" and isinstance(red[1], BinOp) and \
            red[1].op == "*":
        return red[1].a, red[1].b
    return None


def _run_block(block: Block, arrays: dict) -> None:
    st = block.body
    if not isinstance(st, BufferStore):
        raise TensorTuneError(f"reference: block {block.name} is not a single store; the "
                              "reference evaluator needs the unscheduled function")
    spatial = [iv for iv in block.iter_vars if iv.kind == "S"]
    reds = [iv for iv in block.iter_vars if iv.kind == "R"]
    ivs = spatial + reds
    red = _reduction(block) if reds else None
    if reds and not red:
        raise TensorTuneError(f"reference: cannot read block {block.name} as a reduction")
    nd = len(ivs)
    first = spatial[0].extent if spatial else 1
    factors = _product(red)
    if factors is not None and spatial:
        # Chunked by how much the factors and the output grow per row of the first axis
        # (a factor that does not depend on it, a matmul's B, is gathered whole).
        grow = math.prod(iv.extent for iv in spatial[1:])
        if first > 1:
            probe = _env(ivs, 0, 2, True)
            for x in factors:
                v = np.asarray(eval_expr(x, probe, arrays))
                if v.ndim == nd and v.shape[0] > 1:
                    grow = max(grow, v.size // v.shape[0])
    else:
        grow = math.prod(iv.extent for iv in ivs[1:]) if spatial else \
            math.prod(iv.extent for iv in ivs)
    step = max(1, min(first, _CHUNK // max(1, grow)))
    out = arrays[st.buffer]
    for lo in range(0, first, step):
        hi = min(first, lo + step)
        env = _env(ivs, lo, hi, bool(spatial))
        shape = tuple(hi - lo if d == 0 and spatial else iv.extent for d, iv in enumerate(ivs))
        if factors is not None:
            val: np.ndarray | float | int = _contract(
                eval_expr(factors[0], env, arrays), eval_expr(factors[1], env, arrays),
                shape, len(spatial))
        elif red is not None:
            val = np.broadcast_to(eval_expr(red[1], env, arrays), shape)
            axes = tuple(range(len(spatial), nd))
            reducer = {"sum": np.sum, "max": np.max, "min": np.min}[red[0]]
            val = reducer(val, axis=axes, keepdims=True)  # type: ignore[operator]
        else:
            val = eval_expr(st.value, env, arrays)
        # Store indices depend on spatial variables only; reduced axes were kept as size 1.
        idx = tuple(np.asarray(eval_expr(i, env, arrays)) for i in st.indices)
        idx_b = np.broadcast_arrays(*idx, np.asarray(val))
        out[tuple(idx_b[:-1])] = idx_b[-1]


def evaluate(func: PrimFunc, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Compute ``func``'s outputs in float64 from ``inputs`` (one array per input)."""
    if len(inputs) != len(func.inputs):
        raise TensorTuneError(f"reference: {func.name} takes {len(func.inputs)} inputs, "
                              f"got {len(inputs)}")
    arrays: dict = {}
    for b, x in zip(func.inputs, inputs, strict=True):
        arrays[b] = np.asarray(x, dtype=np.float64 if is_float(b.dtype) else np.int64)
    for b in (*func.outputs, *func.alloc_buffers):
        arrays[b] = np.zeros(b.shape, np.float64 if is_float(b.dtype) else np.int64)
    for block in blocks_in(func.body):
        _run_block(block, arrays)
    return [arrays[b] for b in func.outputs]


def check_close(out: np.ndarray, ref: np.ndarray, name: str = "output",
                rtol: float = 1e-4, atol_scale: float = 1e-4) -> None:
    """Raise ``CheckError`` unless ``out`` is finite and close to ``ref``; the absolute
    tolerance scales with the reference's magnitude (float32 accumulation error)."""
    out64 = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out64)):
        bad = np.argwhere(~np.isfinite(out64))[0]
        raise CheckError(f"{name}: non-finite value {out64[tuple(bad)]} at index {tuple(bad)}")
    atol = atol_scale * max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    err = np.abs(out64 - ref) - rtol * np.abs(ref)
    if ref.size and float(np.max(err)) > atol:
        w = np.unravel_index(int(np.argmax(err)), ref.shape)
        raise CheckError(f"{name}: mismatch at index {tuple(int(x) for x in w)}: got "
                         f"{out64[w]}, expected {ref[w]} (rtol={rtol}, atol={atol:.3g})")
