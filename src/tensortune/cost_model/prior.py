"""The bundled prior: programs measured by tensortune's benchmark suite, shipped with the
package so that a first tuning run on a new machine does not start blind.

Each row is one measured program of one suite workload: its feature vector and its
throughput normalised by the best of that workload in the same run (failures 0). Before
a tuning run has measured anything, its cost model ranks nothing and the first batch is
a random draw; ``tune``'s transfer model (``search.transfer.transfer_model``) trains on the
user's own records of other workloads when the database holds enough of them, and on
these rows otherwise. Rows of the workload being tuned (by structural hash or by name)
are left out, so the prior brings what other workloads teach, and the suite's tuning
curves measure exactly what a user's first run gets.

There is one file per SIMD width, ``prior_256.npz`` (an AVX2 machine) and
``prior_512.npz`` (an AVX-512 one), each from one reference machine (the file names
it), and a run uses the file of its target's width or none: the best tiles of one width
are not those of the other: on the AVX-512 host of 2026-11-24, C2D's best after 16
trials read 1.24x lower with the AVX2 prior than with the AVX-512 one (three seeds,
RESULTS). A later feature set (another length) makes a file unused until it is
rebuilt with ``benchmarks/make_prior.py``.

Example:
    >>> rows = bundled_rows(exclude_names={"gmm"}, path=prior_file(32))
    >>> None if rows is None else rows[0].shape     # (programs, FEATURES)
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from .cost_model import LGBMModel, normalized_throughput
from .features import FEATURES


def prior_file(vector_bytes: int) -> Path:
    """The bundled file for targets whose widest vector is ``vector_bytes`` bytes."""
    return Path(__file__).with_name(f"prior_{8 * vector_bytes}.npz")


PRIOR_FILE = prior_file(32)   # the AVX2 file, the default of the functions below


def _bundle(path: Path) -> tuple[np.ndarray, ...] | None:
    """The file's arrays (x, y, workload, name), read once per version of the file; None
    when there is no file or it holds another feature set."""
    if not path.exists():
        return None
    st = path.stat()
    return _read(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=4)
def _read(path: Path, _mtime: int, _size: int) -> tuple[np.ndarray, ...] | None:
    with np.load(path) as z:
        x, y, wl, names = z["x"], z["y"], z["workload"], z["name"]
    if x.ndim != 2 or x.shape[1] != FEATURES:
        return None
    return x, y, wl, names


def bundled_rows(exclude_hashes: frozenset[str] | set[str] = frozenset(),
                 exclude_names: frozenset[str] | set[str] = frozenset(),
                 path: Path = PRIOR_FILE) -> tuple[np.ndarray, np.ndarray] | None:
    """(features, normalised throughput) of the bundled programs outside the excluded
    workloads; None when there is no file or it holds another feature set."""
    arrays = _bundle(path)
    if arrays is None:
        return None
    x, y, wl, names = arrays
    keep = ~(np.isin(wl, sorted(exclude_hashes)) | np.isin(names, sorted(exclude_names)))
    if not keep.any():
        return None
    return x[keep].astype(np.float64), y[keep].astype(np.float64)


def prior_model(exclude_hashes: frozenset[str], exclude_names: frozenset[str],
                vector_bytes: int = 32, path: Path | None = None) -> LGBMModel | None:
    """A model trained on the bundled rows outside the excluded workloads. Used only to
    predict, never updated, so it is shared: cached by the exclusions the bundle actually
    holds, so that tuning a model's many subgraphs (none of them a suite workload) trains
    it once, not once per task (0.7 s each). None without a file for ``vector_bytes``.
    ``path``: another prior file instead (``benchmarks/first_batch.py`` scores one)."""
    path = path or prior_file(vector_bytes)
    arrays = _bundle(path)
    if arrays is None:
        return None
    _, _, wl, names = arrays
    return _trained(path, frozenset(exclude_hashes) & frozenset(wl.tolist()),
                    frozenset(exclude_names) & frozenset(names.tolist()))


@lru_cache(maxsize=8)
def _trained(path: Path, exclude_hashes: frozenset[str], exclude_names: frozenset[str]
             ) -> LGBMModel | None:
    rows = bundled_rows(exclude_hashes, exclude_names, path)
    if rows is None or len(rows[0]) < 32:
        return None
    model = LGBMModel()
    model.update(*rows)
    return model


def write_prior(groups: list[tuple[str, str, list[tuple[list[float], float]]]],
                machine: str, path: Path = PRIOR_FILE) -> int:
    """Write the bundled file from groups ``(workload hash, name, [(features, latency)])``,
    each normalised by its own best (one group per workload and tuning run); rows with
    another feature length are dropped. Returns the rows written."""
    xs: list[list[float]] = []
    ys: list[float] = []
    wls: list[str] = []
    names: list[str] = []
    for wl, name, recs in groups:
        recs = [(f, lat) for f, lat in recs if len(f) == FEATURES]
        if not recs:
            continue
        xs += [f for f, _ in recs]
        ys += list(normalized_throughput([lat for _, lat in recs]))
        wls += [wl] * len(recs)
        names += [name] * len(recs)
    np.savez_compressed(path, x=np.asarray(xs, np.float32), y=np.asarray(ys, np.float32),
                        workload=np.asarray(wls), name=np.asarray(names),
                        machine=np.asarray(machine))
    return len(xs)
