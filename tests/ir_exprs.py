"""Hypothesis strategies of integer index expressions over a few variables, shared by
the IR's property tests (test_arith.py, test_tir.py)."""

from hypothesis import strategies as st

from tensortune.tir import Var


def int_exprs(vars_):
    """Random int32 expressions over ``vars_``: + - * min max of subtrees, and // or %
    by small constants."""
    from tensortune.tir.expr import BinOp, IntImm

    leaves = st.one_of(st.sampled_from(vars_), st.integers(-20, 40).map(IntImm))

    def extend(sub):
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), sub, sub)
            .map(lambda t: BinOp(t[0], t[1], t[2], "int32")),
            st.tuples(st.sampled_from(["//", "%"]), sub, st.sampled_from([1, 2, 8, 16, 56]))
            .map(lambda t: BinOp(t[0], t[1], IntImm(t[2]), "int32")))

    return st.recursive(leaves, extend, max_leaves=12)


VARS = [Var("a"), Var("b"), Var("c")]
