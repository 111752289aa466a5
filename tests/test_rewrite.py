"""The stride-phase rewrite: equal results on random inputs for random transposed-conv
shapes, 4x fewer multiply-adds at stride 2, and tuning through it."""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.rewrite import shared_operand, stride_phase
from tensortune.tir.analysis import flop_count


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(C=st.integers(1, 4), K=st.integers(1, 4), H=st.integers(1, 6), W=st.integers(1, 6),
       R=st.integers(1, 5), stride=st.integers(1, 3), data=st.data())
def test_rewrite_preserves_meaning(C, K, H, W, R, stride, data):
    p = data.draw(st.integers(0, R - 1))
    assume(min(H, W) - 1 >= 0 and (min(H, W) - 1) * stride - 2 * p + R > 0)  # output
    f = tt.workloads.get("t2d", C=C, K=K, H=H, W=W, R=R, stride=stride, p=p)
    g = stride_phase(f)
    if stride == 1:
        assert g is None  # nothing is zero-inserted
        return
    if g is None:  # only when some outputs meet no kernel tap (R < stride)
        assert R < stride
        return
    assert 'block("dilate_pad"' not in str(g)
    ins = random_inputs(f, seed=C * 7 + K)
    check_close(evaluate(g, ins)[0], evaluate(f, ins)[0])
    # The zero products are gone: stride^2 fewer multiply-adds when R divides evenly.
    if R % stride == 0:
        assert flop_count(g) * stride * stride == flop_count(f)


def test_phases_of_the_suite_t2d():
    g = stride_phase(tt.workloads.get("t2d"))
    assert g is not None
    text = str(g)
    # Stride 2, even kernel and output: the phases are two spatial axes of one block
    # whose buffer has the output's layout.
    assert 'block("conv_phases"' in text and "x_pad = alloc(float32[1, 64, 30, 30]" in text
    assert "conv_phases = alloc(float32[1, 32, 28, 2, 28, 2]" in text
    # Stride 3: the first tap is not affine in the phase: one block per phase.
    g3 = stride_phase(tt.workloads.get("t2d", C=4, K=4, H=5, W=5, R=6, stride=3, p=1))
    assert g3 is not None and str(g3).count('block("conv_p') == 9
    assert stride_phase(tt.workloads.get("c2d")) is None


def test_tune_and_compile_use_the_rewrite(tmp_path):
    f = tt.workloads.get("t2d", small=True)
    res = tt.tune(f, trials=4, database=tmp_path / "t.db", seed=0)
    assert 'block("conv_phases"' in str(res.func)
    ins = random_inputs(f)
    want = evaluate(f, ins)[0]
    check_close(res.kernel(*ins), want)
    check_close(tt.compile(f, database=tmp_path / "t.db")(*ins), want)
    plain = tt.tune(f, trials=2, database=tmp_path / "p.db", seed=0, rewrite=False)
    assert 'block("dilate_pad"' in str(plain.func)


def _lse_scaled(M: int, N: int, transposed: bool):
    """sum_j exp(X) and a later stage that computes the same exp (possibly with its axes
    swapped in the output) times a log: a second costly shape for the rewrite."""
    from tensortune import te
    X = te.placeholder((M, N), name="X")
    j = te.reduce_axis(N, name="j")
    s = te.compute((M,), lambda i: te.sum(te.exp(X[i, j] * 0.5), axis=j), name="s")
    if transposed:
        Y = te.compute((N, M), lambda n, i: te.exp(X[i, n] * 0.5) * te.log(s[i]), name="Y")
    else:
        Y = te.compute((M, N), lambda i, n: te.exp(X[i, n] * 0.5) / s[i] + te.exp(X[i, n]),
                       name="Y")
    return te.create_func([X, Y], name="lse")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 9), N=st.integers(1, 40), kind=st.sampled_from(["smx", "t", "lse"]))
def test_shared_operand_preserves_meaning(M, N, kind):
    f = tt.workloads.get("smx", M=M, N=N) if kind == "smx" else _lse_scaled(M, N, kind == "t")
    g = shared_operand(f)
    assert g is not None
    text = str(g)
    # The costly term is computed once: one exp in the new stage (plus, in "lse", the
    # other exp that is a different term and stays where it was).
    assert text.count("exp(") == (2 if kind == "lse" else 1)
    ins = random_inputs(f, seed=M * 41 + N)
    check_close(evaluate(g, ins)[0], evaluate(f, ins)[0])
    k = tt.build(g)
    check_close(k(*ins), evaluate(f, ins)[0])


def test_shared_operand_leaves_other_funcs_alone():
    # Layer norm's shared terms are cheap subtractions; a matmul has no costly call.
    for name in ("lnm", "gmm", "c2d", "nrm"):
        assert shared_operand(tt.workloads.get(name)) is None
    # An exp summed but never computed again: nothing to share.
    from tensortune import te
    X = te.placeholder((4, 8), name="X")
    j = te.reduce_axis(8, name="j")
    s = te.compute((4,), lambda i: te.sum(te.exp(X[i, j]), axis=j), name="s")
    Y = te.compute((4, 8), lambda i, n: te.exp(X[i, n] * 2.0) / s[i], name="Y")
    assert shared_operand(te.create_func([X, Y], name="f")) is None


def test_tuned_softmax_computes_exp_once(tmp_path):
    f = tt.workloads.get("smx", M=16, N=64)
    res = tt.tune(f, trials=4, database=tmp_path / "s.db", seed=0)
    assert 'block("exp_rowsum"' in str(res.func)
    # AutoInline kept the exp stage (inlined, both consumers would evaluate it).
    sch = tt.Schedule(res.func)
    res.trace.apply(sch)
    assert 'block("exp_rowsum"' in str(sch.func) and str(sch.func).count("exp(") == 1
    ins = random_inputs(f)
    want = evaluate(f, ins)[0]
    check_close(res.kernel(*ins), want)
    check_close(tt.compile(f, database=tmp_path / "s.db")(*ins), want)
