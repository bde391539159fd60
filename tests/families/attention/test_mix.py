"""The attention family's loop-mix estimates (ncdc.families.attention.mix)."""

from __future__ import annotations

import pytest

from ncdc.families.attention.mix import FA3_FIXED, fa3_mix, masked_share, plan_masked_share
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.launch import Candidate, Family, LaunchShape
from ncdc.plan.search import plan_diagram


def test_the_masked_share_counts_the_diagonal_and_tail_chunks() -> None:
    # 4 tiles of 64 queries over 4 chunks of 64 keys, causal: tile t visits t + 1 chunks, the
    # last of them masked: 4 masked of 10 visits
    assert masked_share(256, 256, 64, 64, 0) == pytest.approx(4 / 10)
    assert masked_share(256, 256, 64, 64, None) == 0.0  # no mask, no tail
    assert masked_share(256, 250, 64, 64, None) == 1 / 4  # the x tail, every tile


def test_a_plan_s_masked_share_reads_its_own_tiles() -> None:
    d = load_diagram("diagrams/attention_causal.yaml", {"b": 1, "h": 1, "q": 256, "x": 256})
    kp = plan_diagram(d, load_hardware("a100"), {"q": 64, "x": 64}).kernels[0]
    assert plan_masked_share(kp, d.axes) == pytest.approx(4 / 10)


def test_an_fa3_key_tile_is_its_wgmmas_softmax_and_turns() -> None:
    family = Family("attention", {"d": ("d",), "d_v": ("d",), "q": ("q",), "x": ("x",)})
    c = Candidate({}, {}, {}, {}, (("wgmma", 1), ("s_x", 128)),
                  (LaunchShape((1, 1, 1), (384, 1, 1)),))  # fmt: skip
    mix = fa3_mix(family, c, {"d": 128}, "bf16")
    assert mix.classes["tensor"] == 128 // 16 + 128 // 16  # S = Q K^T, then P V
    assert mix.classes["mufu"] == 128 // 2 + 2  # an exponential per score a thread holds
    assert mix.classes["barrier"] == FA3_FIXED["barrier"]
    assert mix.tensor_flops == 2 * 16 * 128 * (128 + 128)
