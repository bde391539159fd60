"""The attention family (ncdc.families.attention.family): the kernels it composes and which
a diagram gets."""

from __future__ import annotations

from ncdc.families import classify_kernel
from ncdc.families.attention.family import FAMILY
from ncdc.families.attention.splitk import is_split
from ncdc.families.attention.wgmma import is_wgmma
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.graph import build_graph
from ncdc.model.streaming import streamed_axes
from ncdc.model.structure import KernelModel


def _candidates(name: str, profile: str, sizes: dict[str, int]) -> list:
    d = load_diagram(f"diagrams/{name}.yaml", sizes)
    hw = load_hardware(profile)
    kernel = build_graph(d, hw).kernels[0]
    family = classify_kernel(d, kernel)
    assert family.name == FAMILY.name
    return FAMILY.candidates(KernelModel(d, kernel), family, hw, streamed_axes(d, kernel), {})


def test_hopper_offers_both_orders_and_ampere_only_mma_sync() -> None:
    sizes = {"b": 2, "h": 8, "q": 2048, "x": 2048}
    hopper = _candidates("attention", "h200", sizes)
    assert any(is_wgmma(c) for c in hopper) and any(not is_wgmma(c) for c in hopper)
    assert not any(is_wgmma(c) for c in _candidates("attention", "a100", sizes))


def test_a_grid_too_small_for_the_gpu_adds_split_key_candidates() -> None:
    small = _candidates("cross_attention", "h200", {"b": 1, "q": 77, "x": 4096})
    assert any(is_split(c) for c in small)
    large = _candidates("attention", "h200", {"b": 4, "h": 16, "q": 4096, "x": 4096})
    assert not any(is_split(c) for c in large)


def test_a_short_query_axis_is_the_decode_family() -> None:
    d = load_diagram("diagrams/decode_attention.yaml")
    kernel = build_graph(d, load_hardware("h200")).kernels[0]
    assert classify_kernel(d, kernel).name == "decode_attention"
