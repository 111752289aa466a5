"""The emitted C declares what it uses of the C library instead of including its headers
(codegen/c.py, ``HEADER``). That must not change a kernel: each source here is built
with the declarations and with the system headers in their place, and the two shared
libraries must disassemble to the same instructions. Every function the kernels call
must be declared: the builds treat an implicit declaration as an error."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

import tensortune as tt
from tensortune import te
from tensortune.codegen import Target
from tensortune.codegen.c_header import HEADER
from tensortune.search.search_strategy import SearchContext
from tensortune.space import PostOrderApply

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")

SYSTEM = "".join(f"#include <{h}>\n"
                 for h in ("stdint.h", "stdlib.h", "string.h", "math.h", "time.h"))
DECLARED = HEADER[:HEADER.index("static inline")]   # the part the system headers replace


def _instructions(source: str, out: Path) -> str:
    t = Target.host()
    subprocess.run([t.cc, *t.flags, "-std=gnu99", "-Werror=implicit-function-declaration",
                    "-shared", "-fPIC", "-o", str(out), "-x", "c", "-", "-lm"],
                   input=source, text=True, check=True, capture_output=True)
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(out)],
                         capture_output=True, text=True, check=True).stdout
    return "\n".join(dis.splitlines()[2:])      # past the line naming the file


def _same_code(source: str, tmp_path: Path) -> None:
    assert DECLARED in source
    declared = _instructions(source, tmp_path / "declared.so")
    included = _instructions(source.replace(DECLARED, SYSTEM), tmp_path / "included.so")
    assert "<tt_kernel>:" in declared
    assert declared == included


MATH = {"exp": te.exp, "log": te.log, "sqrt": te.sqrt, "tanh": te.tanh, "erf": te.erf,
        "fabs": te.abs}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vector", [False, True])
def test_every_math_call_compiles_to_the_same_code(dtype, vector, tmp_path):
    n = 64
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: te.pow(A[i], A[i]) + sum(
        (f(A[i]) for f in MATH.values()), A[i] / 3), name="B")
    # A float's floor division is emitted as floor(), its remainder as fmod().
    C = te.compute((n,), lambda i: B[i] // 2.0 + B[i] % 3.0, name="C")
    sch = tt.Schedule(te.create_func([A, C]))
    if vector:
        (i,) = sch.get_loops(sch.get_block("C"))
        sch.vectorize(sch.split(i, [None, 16])[1])
    source = tt.build(sch).source
    body = source.split("int32_t tt_kernel(")[1]
    for name in [*MATH, "pow"]:
        fn = name + ("f" if dtype == "float32" else "")
        assert f"{fn}(" in body or f"tt_v{name}_" in body, name
    assert "floor(" in body and "fmod(" in body
    _same_code(source, tmp_path)


@pytest.mark.parametrize("name", ["gmm", "c2d", "smx", "lnm", "convlayer"])
def test_drawn_programs_compile_to_the_same_code(name, tmp_path):
    target = Target.host()
    func = tt.workloads.get(name)
    gen = PostOrderApply.default(target)
    ctx = SearchContext(func, gen.generate(func), gen, set(), random.Random(1))
    drawn = [c for c in ctx.draw_fresh(6) if c is not None][:2]
    assert drawn
    for c in drawn:
        _same_code(tt.build(c.sch).source, tmp_path)
