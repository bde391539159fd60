"""The memory graph (ncdc.model.graph): tensors placed on levels, operations in kernels that
end where a result is saved."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.model.graph import ON_CHIP, build_graph, graph_to_dict, oversized
from tests import support


def test_fused_intermediates_stay_on_chip_and_saved_ones_go_to_the_top() -> None:
    hw = load_hardware("h200")
    fused = build_graph(load_diagram("diagrams/attention.yaml"), hw)
    assert len(fused.kernels) == 1
    assert fused.tensors["S"].home == ON_CHIP and fused.tensors["O"].home == "hbm"
    unfused = build_graph(load_diagram("diagrams/attention_unfused.yaml"), hw)
    assert len(unfused.kernels) == 3 and unfused.tensors["S"].home == "hbm"
    k0 = unfused.kernels[0]
    assert k0.outputs == ("S",) and "S" in unfused.kernels[1].inputs


def test_the_graph_as_json() -> None:
    data = graph_to_dict(build_graph(load_diagram("diagrams/softmax.yaml"), load_hardware("a100")))
    assert data["format"] == "ncdc.graph/1" and data["levels"][0]["name"] == "hbm"
    assert [k["name"] for k in data["kernels"]] == ["softmax"]


def test_a_source_the_kernel_also_reads_whole_is_not_gathered_only():
    # the fused cross-entropy: the label's logit comes from the row the log-sum-exp reads
    d = load_diagram("diagrams/cross_entropy.yaml")
    (kernel,) = build_graph(d, load_hardware("h200")).kernels
    assert kernel.inputs == ("Z", "label") and kernel.gathered_only == frozenset()
    (emb,) = build_graph(load_diagram("diagrams/embedding.yaml"), load_hardware("h200")).kernels
    assert emb.gathered_only == {"E"}


TRAP = support.UNBUILDABLE / "outer_product_over_hbm.yaml"


def test_a_tensor_larger_than_hbm_is_named_with_its_size_and_the_capacity() -> None:
    # D is 8192 * 8192 * 4096 = 2^38 bf16 values, 2^39 B = 512 GiB; the h200's HBM is
    # 141e9 B = 131.32 GiB (its profile), the napkin machine's top level 1 TiB
    d = load_diagram(TRAP)
    assert oversized(build_graph(d, load_hardware("h200"))) == (
        "D (bf16 [m, n, k] = 8192 x 8192 x 4096) is 512.00 GiB, more than the 131.32 GiB "
        "of hbm on h200",
    )
    assert oversized(build_graph(d, load_hardware("napkin"))) == ()
    small = load_diagram(TRAP, {"k": 64})  # 8 GiB
    assert oversized(build_graph(small, load_hardware("h200"))) == ()


def test_tensors_that_fit_one_by_one_but_not_together_are_named_together() -> None:
    # X, Y and Z are 2^17 x 2^16 fp32 each: 32 GiB, under the a100's 80e9 B = 74.51 GiB,
    # but 96 GiB together
    text = """ncdc: 1
name: three
axes: {m: 131072, n: 65536}
inputs:
  X: {axes: [m, n], dtype: fp32}
ops:
  - Y = exp(X)
  - Z = neg(X)
outputs: [Y, Z]
"""
    (line,) = oversized(build_graph(load_diagram_text(text), load_hardware("a100")))
    assert line == "X, Y, Z together are 96.00 GiB, more than the 74.51 GiB of hbm on a100"
