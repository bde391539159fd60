"""`ncdc run DIR/<name>.cu --inputs in.npz --save out.npz` for every kind of kernel: each
family's kernel is compiled as `ncdc compile` writes it (the three files), read back from its
`.json` alone (launches, tensor maps, clusters, workspaces, fixed sizes), run on the CPU
emulator on the user's arrays, and its saved outputs compared here with the float64
reference of those same arrays. Sizes are small and odd: every tile has a tail.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ncdc.backends.compile import compile_plan
from ncdc.backends.outputs import write_outputs
from ncdc.families.base import Candidate
from ncdc.families.gemm.splitk import is_splitk
from ncdc.families.gemm.wgmma import is_wgmma
from ncdc.grad.choose import choose_pair
from ncdc.hardware.load import load_hardware
from ncdc.hardware.machine import Hardware
from ncdc.language.diagram import Diagram
from ncdc.language.load import load_diagram
from ncdc.plan.feedback import kernel_alternatives
from ncdc.plan.search import plan_diagram, plan_from_candidates
from ncdc.verify.reference import evaluate, make_inputs
from ncdc.verify.run import compare, run_spec
from tests import support
from tests.support import ncdc

pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")

H200 = load_hardware("h200")
Pick = Callable[[Candidate], bool] | None


@dataclasses.dataclass(frozen=True)
class Case:
    """A library diagram at small sizes; `pick` forces the first candidate it accepts (the
    kinds the model picks only at sizes too large to emulate); `kernels` are fragments the
    kernel names must hold, one per launch."""

    spec: str
    sizes: dict[str, int]
    kernels: tuple[str, ...]
    pick: Pick = None
    sms: int = 0  # a profile cut to this many SMs (persistent and clustered grids)
    grad: str = ""  # "backward" or "deterministic": the backward ncdc grad derives instead


def _cluster2(c: Candidate) -> bool:
    return is_wgmma(c) and c.param("cluster") == 2


def _split(c: Candidate) -> bool:
    return is_splitk(c) and c.splits >= 2


CASES = {
    "gemm mma.sync": Case("matmul", {"m": 100, "n": 72, "k": 40}, ("_gemm_bf16_",)),
    "gemm split-k": Case("mlp", {"m": 40, "n": 72, "k": 300}, ("_gemm_", "_merge"), _split),
    "gemm wgmma, cluster of 2": Case(
        "batched_matmul", {"b": 2, "m": 300, "n": 72, "k": 296}, ("_c2_sm90a",), _cluster2, 4
    ),
    "gemm int8": Case("int8_matmul", {"m": 70, "n": 72, "k": 64}, ("_gemm_int8_",)),
    "gemv": Case("gemv", {"k": 200, "n": 72}, ("_gemv_",)),
    "attention, FlashAttention-2 order": Case(
        "attention_causal",
        {"b": 1, "h": 2, "q": 100, "x": 100},
        ("_attention_bf16_q",),
        lambda c: not is_wgmma(c),
    ),
    "attention, FlashAttention-3 order with the log-sum-exp": Case(
        "attention_lse", {"b": 1, "h": 1, "q": 130, "x": 150}, ("_attention_wgmma_",), is_wgmma
    ),
    "decode attention, split keys": Case(
        "decode_attention", {"b": 1, "h": 2, "x": 300}, ("_decode_attention_", "_decode_merge_")
    ),
    "rowwise, integer labels": Case("cross_entropy", {"t": 9, "v": 70}, ("_rowwise_",)),
    "reduce over columns": Case("column_softmax", {"m": 70, "n": 9}, ("_reduce_",)),
    "elementwise gather": Case("embedding", {"t": 9, "v": 20, "d": 24}, ("_elementwise_",)),
    "row stages, layernorm's backward": Case(
        "layernorm", {"m": 37, "n": 130}, ("_rowstages_", "_store", "_reduce_"), grad="backward"
    ),
    "scatter-add, an embedding's backward": Case(
        "embedding", {"t": 33, "v": 20, "d": 24}, ("_scatter_", "_store"), grad="backward"
    ),
    "scan by columns, in chunks": Case(
        "ssm_chunk_cumsum",
        {"b": 1, "c": 3, "l": 201, "h": 5},
        ("_scan_columns_", "_scan_columns_"),
        lambda c: c.param("chunks") > 1,
    ),
    "scan by rows after a saved log-sum-exp": Case(
        "top_p_mask",
        {"b": 3, "v": 1100},
        ("_rowwise_", "_scan_rows_"),
    ),
    "select, the top 8 experts and their gates": Case(
        "moe_router",
        {"t": 37, "e": 70, "j": 8},
        ("_select_top8_", "_rowwise_"),
    ),
    "select, an argmax by several warps per row": Case(
        "greedy_sample",
        {"b": 3, "v": 1500},
        ("_select_top1_",),
        lambda c: c.param("row_threads") > 32,
    ),
    "elementwise, a roll and a sign (RoPE)": Case(
        "rope", {"b": 1, "s": 9, "h": 3, "d": 128}, ("_elementwise_",)
    ),
    "elementwise, shifts along the sequence (a causal convolution)": Case(
        "causal_conv1d", {"b": 2, "s": 37, "c": 24}, ("_elementwise_",)
    ),
    "attention with a bias gathered by T5's position buckets": Case(
        "t5_relative_attention",
        {"b": 1, "h": 2, "q": 70, "x": 90, "d": 64},
        ("_elementwise_", "_scores"),
    ),
    "attention with RoPE computed as Q and K load, angles gathered by position": Case(
        "rope_attention",
        {"b": 1, "s": 37, "x": 37, "g": 2, "r": 2, "p": 64},
        ("_attention_bf16_",),
    ),
    "decode attention through a block table of 16-row pages": Case(
        "paged_decode_attention",
        {"b": 2, "g": 2, "r": 2, "x": 40, "page": 12, "n": 3},
        ("_page16", "_decode_merge_"),
    ),
    "attention backward, dQ by atomics": Case(
        "attention_causal",
        {"b": 1, "h": 2, "q": 100, "x": 90, "d": 64},
        ("_rowwise_", "_attention_backward_", "_attention_backward_"),
        grad="backward",
    ),
    "attention backward, grouped-query heads, dQ in a second pass": Case(
        "gqa_attention",
        {"b": 1, "g": 1, "r": 2, "q": 70, "x": 90, "d": 64},
        ("_rowwise_", "_grouped_dqpass", "_grouped_dqpass_dq"),
        grad="deterministic",
    ),
    "three kernels, intermediates in memory": Case(
        "swiglu_mlp", {"m": 40, "d": 72, "f": 40}, ("_0_G_gemm", "_1_H_gemm", "_2_Y_gemm")
    ),
}


def compile_case(case: Case, out: Path) -> tuple[Diagram, Path]:
    """Compile the case as `ncdc compile` does (the compiler's feedback included) into
    `out`; the diagram and the `.cu` written."""
    hw = _cut(H200, case.sms) if case.sms else H200
    diagram = load_diagram(support.DIAGRAMS / f"{case.spec}.yaml", case.sizes)
    if case.grad:
        schedule = dataclasses.replace(diagram.schedule, deterministic=case.grad == "deterministic")
        diagram = choose_pair(dataclasses.replace(diagram, schedule=schedule), hw).pair.backward
    plan = plan_diagram(diagram, hw)
    if case.pick is not None:
        picks = [
            kp.candidate for kp in kernel_alternatives(plan, 0, 5000)
            if kp.candidate is not None and case.pick(kp.candidate)
        ]  # fmt: skip
        assert picks, f"no candidate of {case.spec} at {case.sizes} is the kind asked"
        plan = plan_from_candidates(diagram, hw, [picks[0]])
    write_outputs(compile_plan(plan, hw.arch), out)
    return diagram, out / f"{diagram.name}.cu"


def _cut(hw: Hardware, sms: int) -> Hardware:
    return dataclasses.replace(hw, limits=dataclasses.replace(hw.limits, sms=sms))


def save_inputs(diagram: Diagram, path: Path, seed: int) -> dict[str, np.ndarray]:
    """Fresh inputs as a user saves them (real values; integers as int32), and their values."""
    values = make_inputs(diagram, seed)
    stored: dict[str, Any] = {}
    for t in diagram.inputs:
        integer = t.dtype.startswith(("int", "uint"))
        stored[t.name] = values[t.name].astype(np.int32 if integer else np.float32)
    np.savez(path, **stored)
    return values


def check_saved(diagram: Diagram, saved: Path, values: dict[str, np.ndarray]) -> None:
    want = evaluate(diagram, values)
    with np.load(saved) as data:
        assert sorted(n for n in data.files if n != "ncdc") == sorted(diagram.outputs)
        for name in diagram.outputs:
            got = data[name].astype(np.float64)
            c = compare(name, diagram.tensor(name).dtype, got, want[name])
            assert c.ok, c


@pytest.mark.parametrize("label", sorted(CASES))
def test_a_compiled_kernel_of_every_kind_runs_from_its_cu(tmp_path, label):
    case = CASES[label]
    diagram, cu = compile_case(case, tmp_path / "out")
    meta = json.loads(cu.with_suffix(".json").read_text())
    names = [k["name"] for k in meta["kernels"]]
    assert len(names) == len(case.kernels), names
    for name, fragment in zip(names, case.kernels, strict=True):
        assert fragment in name, (fragment, name)
    seed = int(np.random.default_rng().integers(1 << 30))
    values = save_inputs(diagram, tmp_path / "in.npz", seed)
    outcome = run_spec(cu, H200, backend="cpu", inputs=tmp_path / "in.npz",
                       save=tmp_path / "outputs.npz")  # fmt: skip
    assert outcome.result.ok, [c for c in outcome.result.checks if not c.ok]
    assert outcome.diagram.axes == diagram.axes  # the .json's fixed sizes
    check_saved(diagram, tmp_path / "outputs.npz", values)


def test_the_command_runs_a_split_key_decode_on_the_users_arrays(tmp_path):
    """The same through `ncdc run`: two kernels and the partials' workspace from the .json."""
    diagram, cu = compile_case(CASES["decode attention, split keys"], tmp_path)
    values = save_inputs(diagram, tmp_path / "in.npz", seed=3)
    result = ncdc("run", str(cu), "--inputs", str(tmp_path / "in.npz"), "--save",
                  str(tmp_path / "o.npz"), "--format", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] and data["axes"] == dict(diagram.axes)
    check_saved(diagram, tmp_path / "o.npz", values)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, **{t.name: np.zeros((2, 3), np.float32) for t in diagram.inputs})
    support.assert_error(
        ncdc("run", str(cu), "--inputs", str(wrong)), 2, contains="has shape (2, 3)"
    )


def test_a_kernel_compiled_from_text_or_an_edited_file_runs_as_compiled(tmp_path):
    """The .json keeps the spec that was compiled: the user's file where it still says so,
    else the diagram written out (a spec given as text, a file edited after loading)."""
    from ncdc.language.load import load_diagram_text

    text = (support.DIAGRAMS / "softmax.yaml").read_text()
    from_text = load_diagram_text(text, "<string>", {"m": 3, "n": 40})
    write_outputs(compile_plan(plan_diagram(from_text, H200), H200.arch), tmp_path / "a")
    meta = json.loads((tmp_path / "a" / "softmax.json").read_text())
    assert "name: softmax" in meta["spec_text"] and meta["spec_text"] != text
    assert run_spec(tmp_path / "a" / "softmax.cu", H200, backend="cpu").result.ok

    spec = tmp_path / "mine.yaml"
    spec.write_text(text)
    mine = load_diagram(spec, {"m": 3, "n": 40})
    write_outputs(compile_plan(plan_diagram(mine, H200), H200.arch), tmp_path / "b")
    assert json.loads((tmp_path / "b" / "softmax.json").read_text())["spec_text"] == text
    spec.write_text(text.replace("softmax(X, over=n)", "log_softmax(X, over=n)"))  # edited
    write_outputs(compile_plan(plan_diagram(mine, H200), H200.arch), tmp_path / "c")
    kept = json.loads((tmp_path / "c" / "softmax.json").read_text())["spec_text"]
    assert "log_softmax" not in kept and "softmax(X, over=n)" in kept
