"""Overlap as structure for warp-specialised kernels (ncdc.model.cost.pipeline_time and
pingpong_time): the limits each must reach, computed from the functions themselves."""

from __future__ import annotations

import pytest

from ncdc.model.overlap import (
    SATURATION_WARPS,
    latency_efficiency,
    overlap_compute,
    pingpong_time,
    pipeline_time,
)


def test_a_pipeline_runs_at_its_slower_side_once_it_has_two_buffers():
    # Per tile, the time tends to max(load, compute) as the tiles grow (the fill and drain
    # are one load and one compute); with one buffer the two sides serialise.
    for load, compute in ((1.0, 3.0), (3.0, 1.0), (2.0, 2.0)):
        per_tile = pipeline_time(10_000, 2, load, compute) / 10_000
        assert per_tile == pytest.approx(max(load, compute), rel=1e-3)
        assert pipeline_time(10, 1, load, compute) == pytest.approx(10 * (load + compute))
        # more stages never slow it down, and a single tile is one load then one compute
        assert pipeline_time(10, 4, load, compute) <= pipeline_time(10, 2, load, compute)
        assert pipeline_time(1, 3, load, compute) == load + compute


def test_ping_pong_hides_the_softmax_that_one_warpgroup_serialises():
    # One warpgroup alone runs MMAs then its softmax (overlap_compute with one stream: the
    # sum). A ping-pong pair hides a softmax up to the MMA's length entirely; beyond it,
    # the pair is bound by (mma + softmax) / 2 a tile.
    tiles, mma = 1000, 1.0
    for softmax in (0.33, 1.0, 2.0):
        alone = tiles * overlap_compute({"tensor": mma, "cuda": softmax}, True, 1)
        pair = pingpong_time(tiles, mma, softmax)
        assert alone == pytest.approx(tiles * (mma + softmax))
        expected = tiles * max(mma, (mma + softmax) / 2)
        assert pair == pytest.approx(expected, rel=2 / tiles)
        assert pair < alone


def test_warp_specialised_overlap_is_bounded_by_the_issue_rate():
    # Producer, consumers and the ping-pong pair all issue from the same SM schedulers.
    assert pipeline_time(100, 3, 1.0, 1.0, issue_s=1.5) == pytest.approx(150.0)
    assert pingpong_time(100, 1.0, 0.5, issue_s=1.5) == pytest.approx(150.0)


def test_latency_efficiency():
    # Little's law: a unit reaches its peak once SATURATION_WARPS warps per SM are in
    # flight; below that, in proportion.
    assert SATURATION_WARPS == 8
    assert [latency_efficiency(w) for w in (1, 4, 8, 32)] == [0.125, 0.5, 1.0, 1.0]
