"""The kernel cache stays within its limit: pruning drops the least recently used kernels
(source and library together), never one used in the last minutes, and the temporary
files of builds killed long ago; a cache hit counts as a use; a tuning run prunes when
it ends; the CLI reports and clears the cache."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import tensortune as tt
from tensortune.cli import main
from tensortune.codegen import Target
from tensortune.codegen.compile import compile_source, default_cache_dir
from tensortune.codegen.kernel_cache import (
    DEFAULT_MAX_MB,
    MAX_MB_ENV,
    CacheUsage,
    clear,
    max_bytes,
    prune,
    usage,
)
from tensortune.errors import TensorTuneError

DAY = 86400.0


def _entry(cache: Path, key: str, size: int, age_s: float, library: bool = True) -> None:
    """A cached kernel ``key`` of ``size`` bytes a file, last used ``age_s`` ago."""
    when = time.time() - age_s
    for suffix in (".c", ".so") if library else (".c",):
        path = cache / f"{key}{suffix}"
        path.write_bytes(os.urandom(size))
        os.utime(path, (when, when))


def test_prune_drops_the_least_recently_used_first(tmp_path):
    for i, age in enumerate([5 * DAY, 1 * DAY, 3 * DAY, 2 * DAY]):
        _entry(tmp_path, f"k{i}", 1000, age)
    _entry(tmp_path, "failed", 1000, 4 * DAY, library=False)   # a source that did not build
    (tmp_path / "notes.txt").write_text("not the cache's")
    assert usage(tmp_path) == CacheUsage(5, 9000)
    gone = prune(tmp_path, 5000)
    # 9000 bytes over 5000: the oldest (k0, 5 days) and then "failed" (4 days) and k2
    # (3 days) go; k3 and k1 stay.
    assert gone.entries == 3 and gone.bytes == 5000
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["k1.c", "k1.so", "k3.c", "k3.so", "notes.txt"]


def test_prune_keeps_what_was_used_lately_even_over_the_limit(tmp_path):
    _entry(tmp_path, "old", 1000, DAY)
    _entry(tmp_path, "new", 1000, 60.0)
    gone = prune(tmp_path, 0)
    assert gone.entries == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.c", "new.so"]
    assert clear(tmp_path).entries == 1 and not list(tmp_path.iterdir())


def test_prune_removes_stale_temporary_libraries_only(tmp_path):
    stale, fresh = tmp_path / "tmpabc.so", tmp_path / "tmpdef.so"
    stale.write_bytes(b"x" * 10)
    fresh.write_bytes(b"x" * 10)
    old = time.time() - DAY
    os.utime(stale, (old, old))
    prune(tmp_path, 1 << 30)
    assert not stale.exists() and fresh.exists()


def test_a_cache_hit_counts_as_a_use(tmp_path):
    src = "int tt_kernel(float* a) { a[0] = 2.0f; return 0; }\n"
    lib = compile_source(src, Target.host(), tmp_path)
    old = time.time() - DAY
    os.utime(lib, (old, old))
    assert compile_source(src, Target.host(), tmp_path) == lib
    assert time.time() - lib.stat().st_mtime < 60
    assert prune(tmp_path, 0, keep_recent_s=3600).entries == 0


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(MAX_MB_ENV, raising=False)
    assert max_bytes() == DEFAULT_MAX_MB << 20
    monkeypatch.setenv(MAX_MB_ENV, "1.5")
    assert max_bytes() == 3 << 19
    for bad in ("lots", "-1", "nan"):
        monkeypatch.setenv(MAX_MB_ENV, bad)
        with pytest.raises(TensorTuneError, match=MAX_MB_ENV):
            max_bytes()


def test_a_tuning_run_prunes_the_cache_when_it_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(MAX_MB_ENV, "0")
    cache = default_cache_dir()
    cache.mkdir(parents=True)
    _entry(cache, "stale", 1000, DAY)
    func = tt.workloads.get("gmm", small=True)
    res = tt.tune(func, trials=3, database=str(tmp_path / "t.db"), strategy="replay", seed=2,
                  retime_top=0)
    names = {p.name for p in cache.iterdir()}
    assert "stale.c" not in names and "stale.so" not in names
    # This run's kernels were used minutes ago at most: they stay, and the best loads.
    assert any(n.endswith(".so") for n in names)
    assert res.kernel is not None


def test_the_cli_reports_and_clears_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(MAX_MB_ENV, raising=False)
    cache = default_cache_dir()
    cache.mkdir(parents=True)
    _entry(cache, "a", 2048, DAY)
    _entry(cache, "b", 2048, 2 * DAY)
    assert main(["cache"]) == 0
    assert f"{cache}: 2 kernels" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "deleted 2 kernels" in out and f"{cache}: 0 kernels" in out
    monkeypatch.setenv(MAX_MB_ENV, "many")
    assert main(["cache"]) == 2
    assert MAX_MB_ENV in capsys.readouterr().err


def test_the_cache_dir_can_be_named(tmp_path, monkeypatch):
    from tensortune.codegen.compile import CACHE_DIR_ENV

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert default_cache_dir() == tmp_path / "xdg" / "tensortune" / "kernels"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    lib = compile_source("int tt_probe(void) { return 7; }\n", tt.Target.host())
    assert lib.parent == tmp_path / "mine" and lib.exists()
