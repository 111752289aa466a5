import os
import tempfile

import pytest

# Compiled kernels go to a per-session cache so tests never depend on a user's cache.
os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="tt-cache-"))


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)
