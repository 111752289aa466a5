"""OuterReduction: a reduction over the outer axis of its input forks a space whose
output run sits in the lanes below the reduction loop; draws of it are exact on random
shapes, and the rule leaves row reductions and tiled blocks alone."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.reference import check_close, evaluate, random_inputs
from tensortune.space import OuterReduction, PostOrderApply, sample

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")


def _colsum(B: int, M: int, N: int, mean: bool):
    A = te.placeholder((B, M, N), name="A")
    i = te.reduce_axis(M, name="i")
    S = te.compute((B, N), lambda b, j: te.sum(A[b, i, j], axis=i), name="S")
    if not mean:
        return te.create_func([A, S], name="colsum")
    O = te.compute((B, N), lambda b, j: S[b, j] * (1.0 / M), name="O")
    return te.create_func([A, O], name="colmean")


def test_the_fork_puts_the_output_run_in_the_lanes_below_the_reduction():
    f = _colsum(1, 256, 64, mean=False)
    sch = tt.Schedule(f)
    got = OuterReduction(lanes=LANES).apply(sch, sch.get_block("S"))
    assert len(got) == 2
    text = str(got[1].func)
    assert "S_local = alloc(" in text and 'block("S_init"' in text
    # The reduction loop encloses the run of the output it accumulates.
    assert text.index("for i in range(256)") < text.index('with block("S", ')
    tiled = sample(f, got[1].trace, seed=0,
                   postprocs=PostOrderApply.default(TARGET).postprocs)
    assert tiled is not None and "vectorized(" in str(tiled.func)


def test_row_reductions_and_tiled_blocks_are_left_alone():
    rule = OuterReduction(lanes=LANES)
    for name, block in (("smx", "rowmax"), ("smx", "rowsum"), ("lnm", "mean"),
                        ("nrm", "sumsq"), ("gmm", "C")):
        f = tt.workloads.get(name)
        sch = tt.Schedule(f)
        if block not in sch.block_names():
            continue
        assert len(rule.apply(sch, sch.get_block(block))) == 1, (name, block)
    sch = tt.Schedule(_colsum(1, 256, 8, mean=False))   # a run shorter than a vector
    assert len(rule.apply(sch, sch.get_block("S"))) == 1


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 3), M=st.integers(1, 40), N=st.integers(16, 150),
       mean=st.booleans(), seed=st.integers(0, 1000))
def test_draws_of_the_forked_space_are_exact(B, M, N, mean, seed):
    f = _colsum(B, M, N, mean)
    gen = PostOrderApply.default(TARGET)
    x = random_inputs(f, seed=seed)
    want = evaluate(f, x)[0]
    forked = [t for t in gen.generate(f) if "S_local" in str(sample(f, t, seed=0).func)]
    assert forked
    # A draw may be rejected (a run of 77 is no whole number of vectors: VerifyRegisterTile
    # counts it lane by lane); some draw of the fork is not.
    drawn = [d for d in (sample(f, forked[0], seed + k, gen.postprocs) for k in range(8))
             if d is not None]
    assert drawn
    for d in drawn[:2]:
        check_close(tt.build(d)(*[np.copy(a) for a in x]), want)
