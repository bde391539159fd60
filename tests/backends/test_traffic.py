"""What an emulated kernel moves (ncdc.backends.traffic), beside what the model predicts."""

from __future__ import annotations

import pytest

from ncdc.hardware.load import load_hardware
from ncdc.verify.run import run_spec
from tests import support

ROOT = support.ROOT


H200 = load_hardware("h200")


@pytest.mark.parametrize(
    "spec, sizes, tiles",
    [
        # Every byte the kernel loads or stores is one the model counts at the L2 -> SMEM
        # boundary: at multiples of the tiles,
        ("attention", {"b": 1, "h": 2, "q": 128, "x": 256, "d": 64}, {"q": 64, "x": 128}),
        ("matmul", {"m": 128, "n": 128, "k": 128}, {"m": 64, "n": 64, "k": 32}),
        # Tails: a tile past the edge loads only up to it (the rest is zero-filled), and the
        # model counts each tile cut at the edge at the boundaries below device memory.
        ("matmul", {"m": 130, "n": 66, "k": 70}, {"m": 64, "n": 64, "k": 32}),
        ("attention", {"b": 1, "h": 2, "q": 100, "x": 200, "d": 64}, {"q": 64, "x": 128}),
    ],
)
def test_emulated_traffic_matches_the_model(spec, sizes, tiles):
    outcome = run_spec(ROOT / f"diagrams/{spec}.yaml", H200, sizes=sizes, tiles=tiles)
    assert outcome.result.ok
    issued = outcome.result.bytes_read + outcome.result.bytes_written
    assert outcome.boundary == "l2->smem"
    assert issued == pytest.approx(outcome.predicted_bytes, rel=0.01)
