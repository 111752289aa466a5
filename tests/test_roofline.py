"""The roofline: which limit binds a function, and the bound it sets."""

import dataclasses

import pytest

import tensortune as tt
from tensortune.codegen import Target
from tensortune.measure.roofline import Roofline, cache_level, footprint
from tensortune.tir.analysis import flop_count


def test_footprint_counts_every_input_and_output_once():
    nrm = tt.workloads.get("nrm")
    assert footprint(nrm) == (8 * 512 * 512 + 8) * 4
    gmm = tt.workloads.get("gmm", M=64, N=32, K=16)
    assert footprint(gmm) == (64 * 16 + 16 * 32 + 64 * 32) * 4


def test_a_norm_is_bound_by_reading_and_a_matmul_by_fmas():
    # NRM: 0.5 FLOP/byte; at 60 GB/s it cannot pass 30 GFLOP/s whatever the FMA peak.
    nrm = Roofline(peak=236.0, bandwidth=60.0, flops=4.19e6, nbytes=8 << 20, level="L3")
    assert nrm.intensity == pytest.approx(4.19e6 / (8 << 20))
    assert nrm.bound == pytest.approx(nrm.intensity * 60.0)
    assert nrm.binding == "read bandwidth (L3)"
    # A kernel twice the least time reads 50%: half the bound's GFLOP/s.
    assert nrm.seconds == pytest.approx(4.19e6 / (nrm.bound * 1e9))
    assert nrm.percent_at(2 * nrm.seconds) == pytest.approx(50.0)
    assert "read bandwidth (L3)" in nrm.describe() and "8.0 MiB" in nrm.describe()
    # GMM 1024^3: 171 FLOP/byte, far right of the ridge.
    gmm = Roofline(peak=236.0, bandwidth=60.0, flops=2.15e9, nbytes=12 << 20)
    assert gmm.bound == 236.0 and gmm.binding == "FMA peak"
    assert gmm.percent_at(2.15e9 / 118.0e9) == pytest.approx(50.0)   # 118 of 236 GFLOP/s
    # At the ridge point both limits are the same number; the peak is named.
    ridge = dataclasses.replace(gmm, flops=236.0 / 60.0 * gmm.nbytes)
    assert ridge.binding == "FMA peak" and ridge.bound == pytest.approx(236.0)


def test_a_function_without_flops_is_bound_by_moving_its_bytes():
    # A transpose of 1 MiB in and 1 MiB out does no arithmetic: its bound is a time (2 MiB
    # at the read bandwidth), and a kernel's share of it is its GB/s over that bandwidth.
    move = Roofline(peak=236.0, bandwidth=100.0, flops=0.0, nbytes=2 << 20, level="L2")
    assert move.bound == 0.0 and move.binding == "read bandwidth (L2)"
    assert move.seconds == pytest.approx((2 << 20) / 100e9)
    latency = (2 << 20) / 40e9          # a kernel that moves the 2 MiB at 40 GB/s
    assert move.percent_at(latency) == pytest.approx(40.0)
    assert move.gbytes_per_s(latency) == pytest.approx(40.0)
    text = move.describe()
    assert "no floating-point work" in text and "2.0 MiB" in text and "L2" in text


def test_cache_level_follows_the_target_caches():
    t = Target(cores=2, l2_bytes=1 << 20, l3_bytes=32 << 20)
    assert cache_level(2 << 20, t) == "L2"           # two cores' L2s together
    assert cache_level((2 << 20) + 4, t) == "L3"
    assert cache_level(32 << 20, t) == "L3"
    assert cache_level((32 << 20) + 4, t) == "memory"


def test_measured_roofline_of_a_small_norm():
    func = tt.workloads.get("nrm")
    roof = Roofline.measure(func, peak=100.0, seconds=0.01)
    assert roof.peak == 100.0 and roof.nbytes == footprint(func)
    assert roof.flops == flop_count(func) and roof.bandwidth > 0
    assert roof.level == cache_level(roof.nbytes, Target.host())
    assert 0 < roof.bound <= 100.0
