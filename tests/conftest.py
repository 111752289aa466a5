import os
import tempfile

import pytest

# Compiled kernels go to a per-session cache so tests never depend on a user's cache.
os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="tt-cache-"))


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)


@pytest.fixture
def drawn_sources():
    """A function ``(func, spaces, seeds)``: the C of the programs drawn from each design
    space with seeds ``0 .. seeds - 1`` (the default post-processors), every one built
    and checked against the reference on the same random inputs."""
    import numpy as np

    import tensortune as tt
    from tensortune.reference import check_close, evaluate, random_inputs
    from tensortune.space import PostOrderApply, sample

    def run(func, spaces, seeds: int) -> list[str]:
        gen = PostOrderApply.default(tt.Target.host())
        ins = random_inputs(func)
        want = evaluate(func, ins)[0]
        out = []
        for space in spaces:
            for seed in range(seeds):
                sch = sample(func, space, seed, gen.postprocs)
                if sch is None:
                    continue
                kernel = tt.build(sch)
                check_close(kernel(*[np.copy(x) for x in ins]), want)
                out.append(kernel.source)
        return out

    return run
