"""OuterReduction: a reduction over the outer axis of its input forks a space whose
output run sits in the lanes below the reduction loop; draws of it are exact on random
shapes, and the rule leaves row reductions and tiled blocks alone."""

from drawing import exact_draws, jobs_choice
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
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
    forked = [t for t in gen.generate(f) if "S_local" in str(sample(f, t, seed=0).func)]
    assert forked
    # A draw may be rejected (a run of 77 is no whole number of vectors: VerifyRegisterTile
    # counts it lane by lane); some draw of the fork is not.
    assert exact_draws(f, forked[0], seed, tries=8)


def _vecmat(K: int, N: int):
    x = te.placeholder((K,), name="x")
    A = te.placeholder((K, N), name="A")
    k = te.reduce_axis(K, name="k")
    y = te.compute((N,), lambda j: te.sum(x[k] * A[k, j], axis=k), name="y")
    return te.create_func([x, A, y], name="vecmat")


def test_rows_of_a_page_or_longer_also_fork_parts_that_read_the_rows_in_order():
    """A vector-matrix product over 1024 columns (4 KiB rows): a third space, one partial
    output row per part of the reduction, the part loop outermost and the row's columns
    innermost; none for rows of 512 columns, or on one core."""
    def spaces(K: int, N: int, cores: int) -> list:
        sch = tt.Schedule(_vecmat(K, N))
        return OuterReduction(lanes=LANES, cores=cores).apply(sch, sch.get_block("y"))

    got = spaces(64, 1024, 2)
    assert len(got) == 3
    text = str(got[2].func)
    assert 'block("y_rf_init"' in text
    # The part loop, then the reduction loop, then the row's columns.
    assert text.index("for k_0 in range(") < text.index("for k_1 in range(") < \
        text.index("for j in range(1024)")
    assert len(spaces(64, 512, 2)) == 2 and len(spaces(64, 1024, 1)) == 2
    # A reduction that no number of parts per core divides: no third space.
    assert len(spaces(63, 1024, 2)) == 2


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(K=st.integers(1, 24), N=st.integers(1024, 1100), seed=st.integers(0, 1000))
def test_draws_of_the_rows_in_order_space_are_exact(K, N, seed):
    f = _vecmat(2 * K, N)
    gen = PostOrderApply.default(TARGET)
    spaces = [t for t in gen.generate(f) if "y_rf_init" in str(sample(f, t, seed=0).func)]
    if TARGET.cores < 2:
        assert not spaces
        return
    assert spaces
    drawn = exact_draws(f, spaces[0], seed, tries=2)
    assert len(drawn) == 2
    for d in drawn:
        # The parts' partials stay at the root, where the parts run in parallel, unless
        # the draw keeps this small product on one core (0 jobs drawn).
        jobs = jobs_choice(d.trace)
        if d.trace.insts[jobs].attr("candidates")[d.trace.decisions[jobs]]:
            assert "for k_0 in parallel(" in str(d.func)
        else:
            assert "parallel(" not in str(d.func)
