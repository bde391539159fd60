"""Grouped contractions (`contract(X, W, over=k, offsets=ends)`, a mixture of experts'
grouped GEMM) and the gather of A's rows fused into a GEMM's loads, on the CPU emulator at
odd sizes against the float64 reference: empty groups, a group of one row, rows after the
last group, more groups than a warp scans at once, every operand layout, fp32 on CUDA
cores and int8 weights; offsets out of order or past the rows and a row index out of range
are refused naming the entry; the model counts what the kernel reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ncdc.errors import IndexRangeError, SpecError
from ncdc.families.gemm.core import read_operands, row_tiles
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram_text
from ncdc.model.geometry import grouped_rows
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import make_inputs
from ncdc.verify.run import run_diagram, run_spec

HW = load_hardware("h200")


def grouped(
    *, t: int = 77, e: int = 5, k: int = 40, n: int = 56, dtype: str = "bf16", w: str = "",
    x_axes: str = "[t, k]", w_axes: str = "[e, k, n]", gather: int = 0, after: str = "",
    expected: str = "",
) -> str:  # fmt: skip
    """X (or X gathered to `gather` rows by `rows`) times W in runs the offsets `ends` end,
    then the ops `after` (on Y, the last one the output)."""
    sizes = f"t: {t}, e: {e}, k: {k}, n: {n}" + (f", r: {gather}" if gather else "")
    lines = ["  - Xs = gather(X, rows, axis=t)"] if gather else []
    lines.append(f"  - Y = contract({'Xs' if gather else 'X'}, W, over=k, offsets=ends)")
    lines += [f"  - {line}" for line in after.split(";") if line]
    out = lines[-1].split("=")[0].strip(" -")
    return f"""
ncdc: 1
name: moe
axes: {{{sizes}}}
inputs:
  X: {{axes: {x_axes}, dtype: {dtype}}}
  W: {{axes: {w_axes}, dtype: {w or dtype}}}
  ends: {{axes: [e], dtype: int32{expected}}}
{"  rows: {axes: [r], dtype: int32}" if gather else ""}
ops:
{chr(10).join(lines)}
outputs: [{out}]
""".replace("\n\n", "\n")


def run(text: str, tiles: dict[str, int] | None = None, inputs: dict | None = None):
    d = load_diagram_text(text, sizes={})
    module = render_plan(plan_diagram(d, HW, tiles=tiles or {}))
    return d, module, run_diagram(d, module, backend="cpu", inputs=inputs)


@pytest.mark.parametrize(
    "case, kw, tiles, suffix",
    [
        # rows gathered from the tokens, silu after: one kernel, A's rows through the index
        ("bf16, gathered rows", dict(gather=93, t=61, after="Z = silu(Y)"), {}, "_g"),
        # 70 groups: the warp walks the offsets 32 at a time, three chunks
        ("fp16, 70 groups", dict(t=700, e=70, k=24, n=40, dtype="fp16"), {"t": 32}, ""),
        # fp32 on CUDA cores, several tiles a group
        ("fp32, CUDA cores", dict(t=150, dtype="fp32"), {"t": 32, "n": 32}, ""),
        # A m-contiguous, B k-contiguous (out by in, as nn.Linear stores it)
        ("A m-contiguous", dict(x_axes="[k, t]", w_axes="[e, n, k]"), {}, ""),
        # int8 weights widened to bf16 in the main loop, gathered rows, tiles of 32 rows
        ("int8 weights", dict(w="int8", gather=70, after="Z = mul(Y, 0.01)"), {"r": 32}, "_g"),
    ],
)
def test_grouped_gemms_run_as_the_reference(case, kw, tiles, suffix) -> None:
    d, module, result = run(grouped(**kw), tiles)
    assert len(module.launches) == 1, module.launches  # the gather fused, no copy of X
    name = module.launches[0].kernel
    assert "_gemm_" in name and "wgmma" not in name and name.endswith(suffix), name
    assert result.ok, result.checks


def test_random_offsets_leave_empty_groups_a_group_of_one_row_and_rows_after_the_last() -> None:
    d = load_diagram_text(grouped(), sizes={})
    ends = make_inputs(d, 0)["ends"]
    runs = np.diff(np.concatenate([[0], ends]))
    assert runs[1] == 0 and runs[2] == 1 and ends[-1] < 77 and np.all(runs >= 0), ends


@pytest.mark.parametrize(
    "ends, rows",
    [
        ([0, 0, 0, 0, 0], "every row after the last group: the epilogue of an empty sum"),
        ([77, 77, 77, 77, 77], "every row in the first group"),
        ([13, 26, 39, 52, 77], "no row after the last group"),
    ],
)
def test_edges_of_the_offsets(ends, rows) -> None:
    text = grouped(after="Z = add(Y, 1.5)")
    d = load_diagram_text(text, sizes={})
    inputs = {**make_inputs(d, 1), "ends": np.array(ends, dtype=np.float64)}
    _, _, result = run(text, {"t": 32}, inputs)
    assert result.ok, (rows, result.checks)


@pytest.mark.parametrize(
    "ends, message",
    [
        ([10, 30, 20, 61, 70], r"offsets ends go down at group 2 \(30 then 20\)"),
        ([10, 30, 40, 61, 80], r"offsets ends reach 80 at group 4, past t = 77"),
        ([-3, 30, 40, 61, 70], r"offsets ends go down at group 0 \(0 then -3\)"),
    ],
)
def test_offsets_out_of_order_or_past_the_rows_are_refused(ends, message) -> None:
    d = load_diagram_text(grouped(), sizes={})
    inputs = {**make_inputs(d, 0), "ends": np.array(ends, dtype=np.float64)}
    module = render_plan(plan_diagram(d, HW, tiles={"t": 32}))
    with pytest.raises(IndexRangeError, match=message + r": Y = contract\(X, W, over=k, "
                       r"offsets=ends\) splits the 77 rows of t into runs in order"):  # fmt: skip
        run_diagram(d, module, backend="cpu", inputs=inputs)


def test_a_row_index_out_of_range_is_refused() -> None:
    d = load_diagram_text(grouped(gather=50, t=20), sizes={})
    inputs = make_inputs(d, 0)
    inputs["rows"][33] = 20
    module = render_plan(plan_diagram(d, HW))
    with pytest.raises(IndexRangeError, match=r"index rows\[33\] = 20 is out of range: Xs = "
                       r"gather\(X, rows, axis=t\) selects among 0 .. 19"):  # fmt: skip
        run_diagram(d, module, backend="cpu", inputs=inputs)


def test_the_grid_covers_any_offsets_and_the_model_counts_the_tiles_the_runs_take() -> None:
    d = load_diagram_text(grouped(expected=", expected: [10, 30, 30, 61, 70]"), sizes={})
    plan = plan_diagram(d, HW, tiles={"t": 32})
    kp = plan.kernels[0]
    assert kp.candidate is not None
    # 5 groups and the rows after them, each up to 31 rows more than whole tiles
    assert kp.candidate.main.grid[1] == (77 + 6 * 31) // 32 == 8
    groups = grouped_rows(d, kp.kernel)
    assert groups is not None and groups.counts == (10, 20, 0, 31, 9) and groups.tail == 7
    assert groups.tiles(32) == 4 and groups.used == 4  # the rows after the last only store
    assert row_tiles(d, read_operands(kp.family, kp.kernel, d), 32) == 8


def test_the_model_counts_what_the_kernel_reads(tmp_path: Path) -> None:
    """With the offsets the model is told (`expected`), the emulator's global traffic is
    the model's across L2 -> shared memory: each tile its group's rows and weights."""
    for text, ends in (
        (grouped(expected=", expected: [10, 30, 30, 61, 70]"), [10, 30, 30, 61, 70]),
        (grouped(gather=93, t=61, expected=", expected: [0, 40, 41, 80, 93]"),
         [0, 40, 41, 80, 93]),
    ):  # fmt: skip
        spec = tmp_path / "moe.yaml"
        spec.write_text(text)
        d = load_diagram_text(text, sizes={})
        values = make_inputs(d, 2)
        arrays = {
            name: np.asarray(v, dtype=np.int32 if name in ("ends", "rows") else np.float32)
            for name, v in values.items()
        }
        arrays["ends"] = np.array(ends, dtype=np.int32)
        np.savez(tmp_path / "in.npz", **arrays)
        outcome = run_spec(spec, HW, backend="cpu", inputs=tmp_path / "in.npz")
        assert outcome.result.ok, outcome.result.checks
        issued = outcome.result.bytes_read + outcome.result.bytes_written
        assert 0.9 < issued / outcome.predicted_bytes < 1.1, (issued, outcome.predicted_bytes)


def test_the_weights_of_an_unused_group_are_not_counted_from_device_memory() -> None:
    def top(expected: str) -> int:
        d = load_diagram_text(grouped(t=4096, e=8, k=512, n=512, expected=expected), sizes={})
        kernel = plan_diagram(d, HW).kernels[0]
        return next(t.bytes for t in kernel.transfers if t.upper == "hbm")

    slice_bytes = 512 * 512 * 2
    all_used = top(", expected: [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]")
    two_used = top(", expected: [0, 0, 0, 2048, 2048, 2048, 2048, 4096]")
    # six slices fewer; the offsets, which every block reads, a few bytes either way
    assert abs(all_used - two_used - 6 * slice_bytes) <= 8 * 4 * 8


@pytest.mark.parametrize(
    "op, message",
    [
        ("Y = contract(X, W, over=k, offsets=nope)", "expected an offsets tensor"),
        ("Y = contract(X, W, over=k, offsets=fends)", "fends is fp32 over"),
        ("Y = contract(W, X, over=k, offsets=ends)", "W has the groups' axis 'e'; a grouped"),
        ("Y = contract(X, V, over=k, offsets=ends)", "offsets ends is over 'e', which V"),
        ("Y = contract(B, W, over=k, offsets=ends)", "along one axis of B that W lacks"),
    ],
)
def test_grouped_contractions_refuse_what_they_cannot_mean(op, message) -> None:
    text = (
        "ncdc: 1\nname: t\naxes: {t: 10, s: 3, e: 4, k: 8, n: 6}\ninputs:\n"
        "  X: {axes: [t, k], dtype: bf16}\n  W: {axes: [e, k, n], dtype: bf16}\n"
        "  V: {axes: [k, n], dtype: bf16}\n  B: {axes: [s, t, k], dtype: bf16}\n"
        "  ends: {axes: [e], dtype: int32}\n  fends: {axes: [e], dtype: fp32}\n"
        f"ops:\n  - {op}\n  - Z = add(ends, fends)\n  - U = add(X, B)\n  - R = add(V, W)\n"
        "outputs: [Y, Z, U, R]\n"
    )
    with pytest.raises(SpecError, match=message):
        load_diagram_text(text, sizes={})


@pytest.mark.parametrize(
    "expected, message",
    [
        ("[10, 5, 20, 30, 40]", r"expected offsets of ends go down at group 1 \(10 then 5\)"),
        ("[10, 20, 30, 40, 90]", r"expected offsets of ends reach 90 at group 4, past t = 77"),
    ],
)
def test_expected_offsets_are_checked(expected, message) -> None:
    with pytest.raises(SpecError, match=message):
        load_diagram_text(grouped(expected=f", expected: {expected}"), sizes={})


def test_the_rows_gradient_is_a_grouped_contraction_and_the_weights_one_is_refused() -> None:
    from ncdc.grad.derive import derive
    from ncdc.grad.pair import every_way, make_pair
    from tests.grad.helpers import compare

    d = load_diagram_text(grouped(t=9, e=3, k=4, n=5, dtype="fp32", after="Z = tanh(Y)"),
                          sizes={})  # fmt: skip
    with pytest.raises(SpecError, match="the gradient of the grouped weights W of Y"):
        derive(d)
    backward = derive(d, wrt=("X",))
    assert any(dict(line.keywords).get("offsets") == "ends" for line in backward.lines)
    for ways in every_way(d, backward):
        errors = compare(d, make_pair(d, backward, ways))
        assert set(errors) == {"X"} and max(errors.values()) < 1e-8, (ways, errors)
