"""Index maps for ``transform_layout``: a function from old indices to new ones, kept in
traces as the text of a Python lambda and parsed back without ``eval``.

Example:
    >>> im = IndexMap.parse(lambda k, j: (j // 32, k, j % 32), 2)
    >>> im.text
    'lambda k, j: (j // 32, k, j % 32)'
    >>> IndexMap.parse(im.text, 2).text == im.text
    True
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ScheduleError
from ..tir.expr import BinOp, Expr, IntImm, Var, binary, const
from ..tir.printer import Namer, expr_str

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


@dataclass(frozen=True)
class IndexMap:
    params: list[Var]
    results: list[Expr]
    text: str

    @staticmethod
    def parse(fn: Callable[..., Any] | str, ndim: int) -> IndexMap:
        if isinstance(fn, str):
            params, results = _parse_text(fn)
        else:
            names = list(inspect.signature(fn).parameters)
            params = [Var(n) for n in names]
            out = fn(*params)
            results = [const(x) for x in (out if isinstance(out, (tuple, list)) else (out,))]
        if len(params) != ndim:
            raise ScheduleError(f"transform_layout: the index map takes {len(params)} indices "
                                f"but the buffer has {ndim} dimensions")
        nm = Namer()
        for p in params:
            nm(p)
        body = ", ".join(expr_str(r, nm) for r in results)
        comma = "," if len(results) == 1 else ""
        comma = "," if len(results) == 1 else ""
        text = f"lambda {', '.join(nm(p) for p in params)}: ({body}{comma})"
        return IndexMap(params, results, text)


def _parse_text(text: str) -> tuple[list[Var], list[Expr]]:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ScheduleError(f"transform_layout: cannot parse index map {text!r}: {e}") from e
    if not isinstance(node, ast.Lambda):
        raise ScheduleError(f"transform_layout: index map must be a lambda, got {text!r}")
    params = [Var(a.arg) for a in node.args.args]
    env = {p.name: p for p in params}

    def conv(n: ast.AST) -> Expr:
        if isinstance(n, ast.Name) and n.id in env:
            return env[n.id]
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return IntImm(n.value)
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return binary(_OPS[type(n.op)], conv(n.left), conv(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return binary("-", IntImm(0), conv(n.operand))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in ("min", "max") and len(n.args) == 2:
            return BinOp(n.func.id, conv(n.args[0]), conv(n.args[1]), "int32")
        raise ScheduleError(f"transform_layout: unsupported syntax in index map {text!r}: "
                            f"{ast.dump(n)[:60]}")

    body = node.body
    items = body.elts if isinstance(body, ast.Tuple) else [body]
    return params, [conv(x) for x in items]
