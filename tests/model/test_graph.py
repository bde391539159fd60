"""The memory graph (ncdc.model.graph): tensors placed on levels, operations in kernels that
end where a result is saved."""

from __future__ import annotations

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.graph import ON_CHIP, build_graph, graph_to_dict


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
