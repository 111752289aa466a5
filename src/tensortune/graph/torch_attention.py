"""Attention as ``from_torch`` imports it: ``F.scaled_dot_product_attention`` (bool,
float or causal masks; grouped heads) and ``nn.MultiheadAttention`` (self- and
cross-attention, key padding and attention masks), written with the graph's matmul,
softmax and layout ops so they fuse and tune like the rest.

Example:
    >>> LAYER_FUNCS["scaled_dot_product_attention"] is sdpa    # as torch_layers maps it
    True
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .ir import GraphError
from .torch_functions import TensorRef, Unsupported, _kw, axis_slice, to_numpy
from .torch_shapes import _permuted, _swap_last

if TYPE_CHECKING:
    from .from_torch import _Importer as Importer


def attention(s: Importer, q: Any, key: Any, v: Any, mask: Any, causal: bool,
              scale: float | None, w: str) -> TensorRef:
    """softmax(q k^T * scale + mask) v over the last two axes: a bool mask (or causal)
    keeps where true, a float mask is added (as is a graph value ``TensorRef``, which is
    taken as a float mask)."""
    qs, ks = s.shape(q), s.shape(key)
    scores = s.op("matmul", [s.tensor(q, w), _permuted(s, key, _swap_last(len(ks)), w).name], w)
    scores = s.op("scalar", [scores.name], w, fn="mul",
                  value=float(scale) if scale is not None else 1.0 / math.sqrt(qs[-1]))
    if causal:
        mask = s.torch.ones(qs[-2], ks[-2], dtype=s.torch.bool).tril()
    if isinstance(mask, TensorRef):
        scores = s.op("add", [scores.name, mask.name], w)
    elif mask is not None:
        m = s.arg(mask)
        if _is_bool(s, mask, m):
            scores = s.op("where", [s.tensor(m, w), scores.name, s.tensor(-math.inf, w)], w)
        else:
            scores = s.op("add", [scores.name, s.tensor(m, w)], w)
    probs = s.op("softmax", [scores.name], w, axis=-1)
    return s.op("matmul", [probs.name, s.tensor(v, w)], w)


def _is_bool(s: Importer, arg: Any, val: Any) -> bool:
    """Whether a mask argument (``val``, what ``s.arg`` made of ``arg``: a constant
    tensor, or a graph value whose example run gives its dtype) is a bool one."""
    dtype = val.dtype if isinstance(val, s.torch.Tensor) else s.values[arg.name].dtype
    return bool(dtype == s.torch.bool)


def sdpa(s: Importer, a: list[Any], k: dict[str, Any], w: str) -> TensorRef:
    if float(s.arg(_kw(a, k, 4, "dropout_p", 0.0))) > 0:
        raise GraphError(f"{w}: attention with dropout_p > 0 drops at random; pass 0 at "
                         "inference")
    qs, ks = s.shape(a[0]), s.shape(a[1])
    key, value = a[1], a[2]
    if qs[:-2] != ks[:-2]:
        group = qs[-3] // ks[-3] if len(qs) >= 3 and len(ks) == len(qs) and ks[-3] else 0
        if not (bool(s.arg(_kw(a, k, 7, "enable_gqa", False))) and qs[:-3] == ks[:-3]
                and group * ks[-3] == qs[-3]):
            raise GraphError(f"{w}: attention with {list(qs)} queries and {list(ks)} keys "
                             "(grouped heads need enable_gqa=True and a whole number of "
                             "query heads per key head)")
        key, value = (_grouped(s, x, group, w) for x in (a[1], a[2]))
    return attention(s, a[0], key, value, _kw(a, k, 3, "attn_mask", None),
                     bool(s.arg(_kw(a, k, 5, "is_causal", False))),
                     s.arg(_kw(a, k, 6, "scale", None)), w)


def _grouped(s: Importer, x: Any, group: int, w: str) -> TensorRef:
    """Keys or values [..., H, S, D] with each head repeated ``group`` times in place
    (head h serves query heads h * group to h * group + group - 1, as PyTorch's
    ``enable_gqa``): [..., H * group, S, D]."""
    shape = s.shape(x)
    lead, heads = shape[:-3], shape[-3]
    one = s.reshape(x, (*lead, heads, 1, *shape[-2:]), w)
    wide = s.op("broadcast", [one.name], w, shape=(*lead, heads, group, *shape[-2:]))
    return s.reshape(wide, (*lead, heads * group, *shape[-2:]), w)


def multihead(s: Importer, n: Any, m: Any, w: str) -> list[Any]:
    """``nn.MultiheadAttention`` at inference: projections, heads, attention, output
    projection; its averaged weights are an error where they are read."""
    q, key, v = (n.args + (None, None))[:3] if len(n.args) >= 3 else (
        n.args[0], n.kwargs.get("key"), n.kwargs.get("value"))
    if m.in_proj_weight is None or m.bias_k is not None:
        raise GraphError(f"{w}: MultiheadAttention with separate key/value sizes or "
                         "add_bias_kv is not supported")
    shape = s.shape(q)
    if len(shape) != 3:
        raise GraphError(f"{w}: MultiheadAttention on {list(shape)}: batched 3-d inputs only")
    h, e = m.num_heads, m.embed_dim
    wq, wk, wv = to_numpy(m.in_proj_weight).reshape(3, e, e)
    bq, bk, bv = (to_numpy(m.in_proj_bias).reshape(3, e) if m.in_proj_bias is not None
                  else (None,) * 3)

    def project(x: Any, weight: np.ndarray, bias: Any) -> TensorRef:
        return s.linear(x if m.batch_first else _permuted(s, x, (1, 0, 2), w), weight, bias, w)

    def heads(y: TensorRef, part: int = 0) -> TensorRef:
        b, length, width = s.shape(y)
        if width != e:        # one of the self-attention's three: its slice of columns
            y = axis_slice(s, y, -1, part * e, e, w)
        return _permuted(s, s.reshape(y, (b, length, h, e // h), w), (0, 2, 1, 3), w)
    if q is key is v:
        # Self-attention: one projection to q, k and v together (one product of three
        # times the width, rather than three), its columns sliced apart.
        qkv = project(q, to_numpy(m.in_proj_weight), None if m.in_proj_bias is None else
                      to_numpy(m.in_proj_bias))
        parts = [heads(qkv, i) for i in range(3)]
    else:
        parts = [heads(project(x, wx, bx)) for x, wx, bx in ((q, wq, bq), (key, wk, bk),
                                                              (v, wv, bv))]
    o = attention(s, parts[0], parts[1], parts[2], _mha_mask(s, n, s.shape(parts[0]), w),
                  False, None, w)
    b, _, length, _ = s.shape(o)
    o = s.reshape(_permuted(s, o, (0, 2, 1, 3), w), (b, length, e), w)
    o = s.linear(o, m.out_proj.weight, m.out_proj.bias, w)
    if not m.batch_first:
        o = _permuted(s, o, (1, 0, 2), w)
    return [o, Unsupported(f"{w}: MultiheadAttention's attention weights are not supported; "
                           "pass need_weights=False and read only the output")]


def _mha_mask(s: Importer, n: Any, qshape: tuple[int, ...], w: str) -> TensorRef | None:
    """``nn.MultiheadAttention``'s ``key_padding_mask`` [B, S] and ``attn_mask`` [L, S] or
    [B * heads, L, S] as one float mask added to the scores [B, heads, L, S]; a bool one
    is true where a query may not look (the opposite of scaled_dot_product_attention's)."""
    b, h, length, _ = qshape
    found: list[str] = []
    for name, pos in (("key_padding_mask", 3), ("attn_mask", 5)):
        arg = n.kwargs.get(name, n.args[pos] if len(n.args) > pos else None)
        if arg is None:
            continue
        val = s.arg(arg)
        ref = TensorRef(s.tensor(val, w))
        if _is_bool(s, arg, val):
            ref = s.op("where", [ref.name, s.tensor(-math.inf, w), s.tensor(0.0, w)], w)
        shape = s.shape(ref)
        if name == "key_padding_mask":
            ref = s.reshape(ref, (b, 1, 1, shape[-1]), w)
        elif len(shape) == 3:
            ref = s.reshape(ref, (b, h, length, shape[-1]), w)
        found.append(ref.name)
    if not found:
        return None
    return TensorRef(found[0]) if len(found) == 1 else s.op("add", found, w)
