"""``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` at inference, unrolled over the example's
(static) sequence length into the graph's ops, from the initial state given (or zeros):
per layer and direction, one dense of every time step's input at once, then per step
one dense of the hidden state, the gates sliced from it, and their element-wise update
(and an LSTM's ``proj_size`` projection of its new hidden state).
The steps' hidden-state products are one task of weight T (the same function each
step), and the gates' arithmetic fuses into their products.

Example:
    >>> graph = from_torch(nn.Sequential(nn.LSTM(8, 16)).eval(), torch.randn(5, 2, 8))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .ir import GraphError
from .torch_functions import TensorRef, axis_slice
from .torch_shapes import _permuted

if TYPE_CHECKING:
    from .from_torch import _Importer as Importer


def _step_of(s: Importer, x: TensorRef, t: int, w: str) -> TensorRef:
    """Time step ``t`` of ``x`` [T, B, F]: [B, F]."""
    shape = s.shape(x)
    return s.op("slice", [x.name], w, index=(("i", t),) + tuple(("s", 0, 1, n)
                                                                for n in shape[1:]))


def _cell(s: Importer, kind: str, xg: TensorRef, h: TensorRef, c: TensorRef | None,
          w_hh: Any, b_hh: Any, hidden: int, w: str, nonlinearity: str = "tanh",
          w_hr: Any = None) -> tuple[TensorRef, TensorRef | None]:
    """One step: the input's gate values ``xg`` [B, G * H] (bias included) and the state
    ``h`` (and ``c``) to the new state; an LSTM with ``proj_size`` projects its new
    ``h`` by ``w_hr`` [P, H] (no bias)."""
    hg = s.linear(h, w_hh, b_hh, w)

    def gate(src: TensorRef, k: int) -> TensorRef:
        return axis_slice(s, src, -1, k * hidden, hidden, w)

    def op(name: str, *ins: TensorRef) -> TensorRef:
        return s.op(name, [i.name for i in ins], w)
    if kind == "LSTM":                                   # gates i, f, g, o
        pre = op("add", xg, hg)
        i, f = op("sigmoid", gate(pre, 0)), op("sigmoid", gate(pre, 1))
        g, o = op("tanh", gate(pre, 2)), op("sigmoid", gate(pre, 3))
        assert c is not None
        c2 = op("add", op("mul", f, c), op("mul", i, g))
        h2 = op("mul", o, op("tanh", c2))
        return (h2 if w_hr is None else s.linear(h2, w_hr, None, w)), c2
    if kind == "RNN":                                    # h' = tanh or relu of the sum
        return op(nonlinearity, op("add", xg, hg)), None
    # GRU: gates r, z, n; n = tanh(x_n + r * (W_hn h + b_hn)); h' = n + z * (h - n)
    r = op("sigmoid", op("add", gate(xg, 0), gate(hg, 0)))
    z = op("sigmoid", op("add", gate(xg, 1), gate(hg, 1)))
    n = op("tanh", op("add", gate(xg, 2), op("mul", r, gate(hg, 2))))
    return op("add", n, op("mul", z, op("sub", h, n))), None


def _initial(s: Importer, kind: str, n: Any, state: tuple[int, int], cell: tuple[int, int],
             w: str) -> Callable[[int], tuple[TensorRef, TensorRef | None]]:
    """The initial (h, c) of layer-and-direction ``k`` (c None but for an LSTM), of
    shapes ``state`` [B, H] (or [B, P] with ``proj_size``) and ``cell`` [B, H]: slice k
    of the call's ``hx`` (``(h_0, c_0)`` for an LSTM, [layers * directions, B, ...]
    each), or zeros when the call gives none."""
    hx = s.arg(n.args[1]) if len(n.args) > 1 else s.arg(n.kwargs.get("hx"))
    if hx is None:
        zeros = TensorRef(s.g.const("h0", np.zeros(state, "float32")))
        zc = zeros if cell == state else TensorRef(s.g.const("c0", np.zeros(cell, "float32")))
        return lambda k: (zeros, zc if kind == "LSTM" else None)   # a GRU has no cell
    # (PyTorch's example run has checked the state's shapes by now.)
    refs = [TensorRef(s.tensor(v, w)) for v in (hx if kind == "LSTM" else [hx])]
    return lambda k: (_step_of(s, refs[0], k, w),
                      _step_of(s, refs[1], k, w) if kind == "LSTM" else None)


def recurrent(s: Importer, n: Any, m: Any, w: str) -> list[Any]:
    """The graph values of an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` call: ``[output,
    (h_n, c_n)]`` or ``[output, h_n]``, as PyTorch returns them."""
    kind = type(m).__name__
    x = s.arg(n.args[0])
    shape = s.shape(x)
    if len(shape) != 3:
        raise GraphError(f"{w}: {kind} on {list(shape)}: batched 3-d inputs only")
    if m.batch_first:
        x = _permuted(s, x, (1, 0, 2), w)
    steps, batch = s.shape(x)[:2]
    hidden, dirs = m.hidden_size, 2 if m.bidirectional else 1
    out_size = getattr(m, "proj_size", 0) or hidden     # h's size: projected or not
    initial = _initial(s, kind, n, (batch, out_size), (batch, hidden), w)
    last_h: list[TensorRef] = []
    last_c: list[TensorRef] = []
    for layer in range(m.num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            weights = [getattr(m, f"{p}{sfx}", None) for p in ("weight_ih", "weight_hh",
                                                               "bias_ih", "bias_hh",
                                                               "weight_hr")]
            xg = s.linear(x, weights[0], weights[2], w)        # every step at once
            h, c = initial(layer * dirs + d)
            hs: list[TensorRef] = [h] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                h, c = _cell(s, kind, _step_of(s, xg, t, w), h, c, weights[1], weights[3],
                             hidden, w, getattr(m, "nonlinearity", "tanh"), weights[4])
                hs[t] = h
            seq = [s.reshape(hh, (1, batch, out_size), w).name for hh in hs]
            outs.append(s.op("concat", seq, w, axis=0) if steps > 1 else TensorRef(seq[0]))
            last_h.append(h)
            if c is not None:
                last_c.append(c)
        x = outs[0] if dirs == 1 else s.op("concat", [o.name for o in outs], w, axis=2)
    out = _permuted(s, x, (1, 0, 2), w) if m.batch_first else x

    def stacked(states: list[TensorRef], size: int) -> TensorRef:
        parts = [s.reshape(v, (1, batch, size), w).name for v in states]
        return s.op("concat", parts, w, axis=0) if len(parts) > 1 else TensorRef(parts[0])
    if kind == "LSTM":
        return [out, [stacked(last_h, out_size), stacked(last_c, hidden)]]
    return [out, stacked(last_h, hidden)]
