import os
import sys
import tempfile
from pathlib import Path

import pytest

# The benchmark schedules are tested too: make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Compiled kernels go to a per-session cache so tests never depend on a user's cache.
os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="tt-cache-"))


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)
