"""Print expressions, statements and functions as Python-like code a person can read.

Example output for an unscheduled matmul::

    def gmm(A: float32[64, 64], B: float32[64, 64], C: float32[64, 64]):
        for i in range(64):
            for j in range(64):
                for k in range(64):
                    with block("C", vi=S(i), vj=S(j), vk=R(k)):
                        init: C[vi, vj] = 0.0
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

from __future__ import annotations

from .expr import BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not, Reduce, Select, Var
from .stmt import (
    Allocate,
    Block,
    Buffer,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Seq,
    Stmt,
)

_PREC = {"||": 1, "&&": 2, "<": 3, "<=": 3, ">": 3, ">=": 3, "==": 3, "!=": 3,
         "+": 4, "-": 4, "*": 5, "/": 5, "//": 5, "%": 5}


class Namer:
    """Gives every variable a printable name, unique within one printout."""

    def __init__(self, canonical: bool = False) -> None:
        self.canonical = canonical
        self.names: dict[Var, str] = {}
        self.used: set[str] = set()

    def __call__(self, v: Var) -> str:
        name = self.names.get(v)
        if name is None:
            base = f"v{len(self.names)}" if self.canonical else v.name
            name, n = base, 1
            while name in self.used:
                name, n = f"{base}_{n}", n + 1
            self.names[v] = name
            self.used.add(name)
        return name


def expr_str(e: Expr, namer: Namer | None = None, prec: int = 0) -> str:
    nm = namer or Namer()
    if isinstance(e, Var):
        return nm(e)
    if isinstance(e, IntImm):
        return ("True" if e.value else "False") if e.dtype == "bool" else str(e.value)
    if isinstance(e, FloatImm):
        return repr(e.value) if e.dtype == "float32" else f"float64({e.value!r})"
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a, nm)}, {expr_str(e.b, nm)})"
        p = _PREC[e.op]
        right_prec = p + 1 if e.op in ("-", "/", "//", "%") or p == 3 else p
        s = f"{expr_str(e.a, nm, p)} {_py_op(e.op)} {expr_str(e.b, nm, right_prec)}"
        return f"({s})" if p < prec else s
    if isinstance(e, Not):
        return f"not {expr_str(e.a, nm, 6)}"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond, nm)}, {expr_str(e.t, nm)}, {expr_str(e.f, nm)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.value, nm)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a, nm) for a in e.args)})"
    if isinstance(e, BufferLoad):
        return f"{e.buffer.name}[{', '.join(expr_str(i, nm) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(nm(a) for a in e.axes)
        return f"{e.combiner}({expr_str(e.source, nm)}, axis=[{axes}])"
    raise TypeError(f"cannot print {type(e).__name__}")


def _py_op(op: str) -> str:
    return {"&&": "and", "||": "or"}.get(op, op)


def _loop_head(s: For, nm: Namer) -> str:
    rng = "range" if s.kind == ForKind.SERIAL else {
        ForKind.PARALLEL: "parallel", ForKind.VECTORIZED: "vectorized",
        ForKind.UNROLLED: "unroll"}[s.kind]
    ann = "".join(f", {k}={v!r}" for k, v in s.annotations)
    return f"for {nm(s.var)} in {rng}({s.extent}{ann}):"


def _lines(s: Stmt, nm: Namer, ind: str, out: list[str]) -> None:
    if isinstance(s, For):
        out.append(ind + _loop_head(s, nm))
        _lines(s.body, nm, ind + "    ", out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _lines(x, nm, ind, out)
    elif isinstance(s, BufferStore):
        idx = ", ".join(expr_str(i, nm) for i in s.indices)
        out.append(f"{ind}{s.buffer.name}[{idx}] = {expr_str(s.value, nm)}")
    elif isinstance(s, Block):
        ivs = ", ".join(
            f"{nm(iv.var)}={iv.kind}({expr_str(b, nm)})"
            for iv, b in zip(s.iter_vars, s.bindings, strict=True)
        )
        out.append(f'{ind}with block("{s.name}"{", " if ivs else ""}{ivs}):')
        if s.predicate is not None:
            out.append(f"{ind}    where({expr_str(s.predicate, nm)})")
        if s.init is not None:
            sub: list[str] = []
            _lines(s.init, nm, "", sub)
            if len(sub) == 1:
                out.append(f"{ind}    init: {sub[0]}")
            else:
                out.append(f"{ind}    init:")
                out.extend(f"{ind}        {x}" for x in sub)
        _lines(s.body, nm, ind + "    ", out)
    elif isinstance(s, IfThenElse):
        out.append(f"{ind}if {expr_str(s.cond, nm)}:")
        _lines(s.then, nm, ind + "    ", out)
        if s.else_ is not None:
            out.append(f"{ind}else:")
            _lines(s.else_, nm, ind + "    ", out)
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f"{ind}{b.name} = {_alloc(b)}")
        _lines(s.body, nm, ind, out)
    else:
        raise TypeError(f"cannot print {type(s).__name__}")


def _alloc(b: Buffer) -> str:
    align = "" if b.align is None else f", align={b.align}"
    return f"alloc({b.dtype}{list(b.shape)}, scope={b.scope!r}{align})"


def stmt_str(s: Stmt, namer: Namer | None = None) -> str:
    out: list[str] = []
    _lines(s, namer or Namer(), "", out)
    return "\n".join(out)


# Opens the line naming a function's marked weights (part of its structural hash: the
# text must not change).
WEIGHTS_LINE = "# weights, packed once:"


def func_str(f: PrimFunc, canonical: bool = False) -> str:
    nm = Namer(canonical)
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.params)
    out = [f"def {f.name}({params}):"]
    if f.weights:
        out.append(f"    {WEIGHTS_LINE} {', '.join(f.params[i].name for i in f.weights)}")
    for b in f.alloc_buffers:
        out.append(f"    {b.name} = {_alloc(b)}")
    _lines(f.body, nm, "    ", out)
    return "\n".join(out)
