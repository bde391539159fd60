"""Row-wise kernels on the CPU emulator against float64 NumPy, and NVRTC compiles."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram, load_diagram_text
from ncdc.plan.search import plan_diagram
from ncdc.render import render_plan
from ncdc.verify.reference import make_inputs, round_to
from ncdc.verify.run import run_diagram
from tests import support
from tests.runtime_sizes import run_at_sizes

H200 = load_hardware("h200")
TOL = {"bf16": 1e-2, "fp32": 1e-5}


def spec(op: str, dtype: str, extra_inputs: str = "") -> str:
    return f"""
ncdc: 1
name: rw
axes: {{m: 3, n: 8}}
inputs: {{X: {{axes: [m, n], dtype: {dtype}}}{extra_inputs}}}
ops: ["{op}"]
outputs: [Y]
"""


OPS = {
    "softmax": ("Y = softmax(X, over=n)", ""),
    "layernorm": (
        "Y = layernorm(X, over=n, weight=W, bias=B, eps=1e-5)",
        ", W: {axes: [n], dtype: DT}, B: {axes: [n], dtype: DT}",
    ),
    "rmsnorm": ("Y = rmsnorm(X, over=n, weight=W, eps=1e-6)", ", W: {axes: [n], dtype: DT}"),
    "sum": ("Y = sum(X, over=n)", ""),
    "max": ("Y = max(X, over=n)", ""),
    "mean": ("Y = mean(X, over=n)", ""),
    "log_softmax": ("Y = log_softmax(X, over=n)", ""),
    "logsumexp": ("Y = logsumexp(X, over=n)", ""),
}


def launch_sizes(
    text: str, plan_sizes: dict, sizes: dict, inputs: dict | None = None, tiles: dict | None = None
):
    """Render at `plan_sizes`, run at `sizes` (sizes are runtime parameters): one build
    serves every row length. Returns (outputs as float64, float64 reference)."""
    got, expected, _ = run_at_sizes(text, plan_sizes, sizes, inputs, tiles)
    return got, expected


def run(text: str, sizes: dict, inputs: dict | None = None, tiles: dict | None = None):
    return launch_sizes(text, sizes, sizes, inputs, tiles)


def check(got: np.ndarray, want: np.ndarray, dtype: str) -> float:
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN where the reference has none"
    err = np.abs(got - want) / (np.abs(want) + 1e-2)
    return float(np.nanmax(err)) if err.size else 0.0


CASES = [(k, dt) for k in ("softmax", "layernorm", "rmsnorm") for dt in ("bf16", "fp32")]
CASES += [("sum", "fp32"), ("max", "bf16"), ("mean", "fp32")]
CASES += [("log_softmax", "fp32"), ("log_softmax", "bf16"), ("logsumexp", "fp32")]


@pytest.mark.parametrize("kind, dtype", CASES)
def test_rowwise_matches_numpy(kind: str, dtype: str) -> None:
    # One build (planned for rows of 1000: one warp, 4 runs of 8 per thread) runs every
    # length, vector and scalar paths alike; the grid-stride loop covers any row count.
    op, extra = OPS[kind]
    text = spec(op, dtype, extra.replace("DT", dtype))
    for m, n in [(3, 1), (17, 7), (3, 64), (17, 65), (3, 129), (3, 1000)]:
        got, want = launch_sizes(text, {"m": 3, "n": 1000}, {"m": m, "n": n}, tiles={"m": 2})
        err = check(got["Y"], want["Y"], dtype)
        assert err < TOL[dtype], (kind, dtype, m, n, err)


def test_long_rows_take_the_two_pass_path() -> None:
    # Planned for rows of 64 (one warp holds a row), run on rows of 5000: the row no longer
    # fits in registers and is read twice (online softmax, Welford layernorm).
    for kind in ("softmax", "layernorm", "rmsnorm", "max", "mean", "log_softmax", "logsumexp"):
        op, extra = OPS[kind]
        text = spec(op, "fp32", extra.replace("DT", "fp32"))
        d = load_diagram_text(text, sizes={"m": 3, "n": 5000})
        values = make_inputs(d, seed=3)
        values["X"] = round_to(values["X"] + 100.0, "fp32")  # a large mean must not cancel
        got, want = launch_sizes(text, {"m": 3, "n": 64}, {"m": 3, "n": 5000}, values, {"m": 1})
        assert np.nanmax(np.abs(got["Y"] - want["Y"]) / (np.abs(want["Y"]) + 1.0)) < 1e-4, kind


def test_softmax_edge_rows() -> None:
    text = spec("Y = softmax(X, over=n)", "fp32")
    x = np.random.default_rng(0).standard_normal((4, 9))
    x[0] = -np.inf  # every key masked: zeros, not NaN
    x[1] *= 1e4  # huge logits stay finite
    x[2, 3] = np.nan  # NaN is never hidden
    got, want = run(text, {"m": 4, "n": 9}, inputs={"X": round_to(x, "fp32")})
    y = got["Y"]
    assert np.all(y[0] == 0.0)
    assert np.all(np.isfinite(y[1])) and abs(y[1].sum() - 1.0) < 1e-5
    assert np.all(np.isnan(y[2]))
    assert check(y[3], want["Y"][3], "fp32") < 1e-5


def test_max_reduction_propagates_nan() -> None:
    x = np.random.default_rng(1).standard_normal((3, 70))
    x[1, 69] = np.nan
    got, _ = run(spec("Y = max(X, over=n)", "fp32"), {"m": 3, "n": 70}, inputs={"X": x})
    assert np.isnan(got["Y"][1]) and not np.isnan(got["Y"][[0, 2]]).any()


def test_fused_chain_around_a_reduction() -> None:
    text = """
ncdc: 1
name: chain
axes: {b: 2, m: 3, n: 33}
inputs: {X: {axes: [b, m, n], dtype: bf16}, S: {axes: [m], dtype: fp32}, G: {axes: [n], dtype: bf16}}
ops: ["A = mul(X, G)", "P = softmax(A, over=n)", "Y = mul(P, S)"]
outputs: [Y]
"""
    reduction = """
ncdc: 1
name: chain_sum
axes: {b: 2, m: 3, n: 33}
inputs: {X: {axes: [b, m, n], dtype: bf16}, S: {axes: [m], dtype: fp32}}
ops: ["A = square(X)", "T = mean(A, over=n)", "R = add(T, S)", "Y = rsqrt(R)"]
outputs: [Y]
"""
    for source in (text, reduction):
        d = load_diagram_text(source)
        result = run_diagram(d, render_plan(plan_diagram(d, H200)))
        assert result.ok, result


def test_unfused_attention_softmax_runs_small() -> None:
    # The middle kernel of attention_unfused: rows (b, h, q), row axis x, bf16.
    plan = plan_diagram(load_diagram("diagrams/attention_unfused.yaml"), H200)
    (kp,) = [k for k in plan.kernels if k.family.name == "rowwise"]
    assert kp.family.axes("rows") == ("b", "h", "q") and kp.family.axes("row") == ("x",)
    text = """
ncdc: 1
name: scores
axes: {b: 2, h: 3, q: 5, x: 4096}
inputs: {S: {axes: [b, h, q, x], dtype: bf16}}
ops: ["P = softmax(S, over=x)"]
outputs: [P]
"""
    for x in (33, 96):
        got, want = launch_sizes(text, {"b": 2, "h": 3, "q": 5, "x": 4096},
                                 {"b": 2, "h": 3, "q": 5, "x": x})  # fmt: skip
        assert check(got["P"], want["P"], "bf16") < 1e-2


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm", "attention_unfused"])
def test_full_size_compiles_without_spills(name: str) -> None:
    from ncdc.backends.nvrtc import compile_cuda
    from ncdc.backends.targets import plan_for_arch

    for arch in ("sm_80", "sm_90a"):
        # what `ncdc compile --arch` builds: on sm_80 the kernels sm_90a alone runs fall back
        plan, _, _ = plan_for_arch(load_diagram(f"diagrams/{name}.yaml"), H200, None, arch)
        module = render_plan(plan)
        kernels = [launch.kernel for launch in module.launches if "_rowwise_" in launch.kernel]
        assert kernels
        compiled = compile_cuda(module.source, arch, name=f"{name}.cu", line_origin=module.origin)
        for k in kernels:
            spills = compiled.resources[k].spill_stores_bytes
            assert spills == 0, (k, arch)


@pytest.mark.parametrize("n", [1000, 1001, 130])
def test_rmsnorm_issues_the_traffic_the_model_counts(n: int) -> None:
    # X and Y once, and the weight once per block (staged in shared memory, read by every
    # row of the block), which is what the model counts: once per group of rows. Rows of
    # odd length keep vector loads, aligned to each row's start.

    from ncdc.verify.run import run_spec

    spec = support.DIAGRAMS / "rmsnorm.yaml"
    outcome = run_spec(spec, H200, sizes={"m": 64, "n": n})
    assert outcome.result.ok
    issued = outcome.result.bytes_read + outcome.result.bytes_written
    assert issued == outcome.predicted_bytes


LONG_ROWS = [32000, 128256, 262144]


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda.bindings missing")
@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm", "vocab_cross_entropy"])
def test_vocabulary_rows_compile_without_spills(name: str) -> None:
    # Rows longer than a 1024-thread group holds in 16 values a thread are streamed in two
    # passes, and the kernel carries only that path: nothing of the row stays in registers.
    from ncdc.backends.nvrtc import compile_cuda

    for n in LONG_ROWS:
        sizes = {"t": 4096, "v": n} if name.startswith("vocab") else {"m": 4096, "n": n}
        plan = plan_diagram(load_diagram(f"diagrams/{name}.yaml", sizes), H200)
        module = render_plan(plan)
        (kernel,) = [launch.kernel for launch in module.launches]
        assert kernel.endswith("_p2"), kernel
        for arch in ("sm_80", "sm_90a"):
            compiled = compile_cuda(module.source, arch, name=f"{name}.cu")
            assert compiled.resources[kernel].spill_stores_bytes == 0, (name, n, arch)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm"])
def test_rows_of_262147_values_run_in_two_passes_and_are_priced_so(name: str) -> None:
    # An odd length above 2^18: the second pass reads X again, and the model counts it
    # (Candidate.rereads), so what the kernel issues is what ncdc cost prices.

    from ncdc.verify.run import run_spec

    spec = support.DIAGRAMS / f"{name}.yaml"
    outcome = run_spec(spec, H200, sizes={"m": 2, "n": 262147})
    assert outcome.result.ok, outcome.result.checks
    assert outcome.module.launches[0].kernel.endswith("_p2")
    issued = outcome.result.bytes_read + outcome.result.bytes_written
    assert issued == outcome.predicted_bytes


def test_vocab_cross_entropy_is_one_pass_over_128k_logits() -> None:
    # logsumexp over a 128,257-token row (odd, above Llama 3's 128,256): the streamed
    # kernel's online max and sum read each logit once, which is what the model counts.

    from ncdc.verify.run import run_spec

    spec = support.DIAGRAMS / "vocab_cross_entropy.yaml"
    outcome = run_spec(spec, H200, sizes={"t": 3, "v": 128257})
    assert outcome.result.ok, outcome.result.checks
    assert outcome.module.launches[0].kernel.endswith("_p2")
    issued = outcome.result.bytes_read + outcome.result.bytes_written
    assert issued == outcome.predicted_bytes == 3 * 128257 * 2 + 3 * 4


def test_log_softmax_and_logsumexp_of_masked_and_huge_rows() -> None:
    x = np.random.default_rng(1).standard_normal((3, 11))
    x[0] = -np.inf  # every entry masked: logsumexp -inf, log-softmax NaN (as the reference)
    x[1] *= 1e4  # huge logits stay finite
    for op in ("Y = log_softmax(X, over=n)", "Y = logsumexp(X, over=n)"):
        got, want = run(spec(op, "fp32"), {"m": 3, "n": 11}, inputs={"X": round_to(x, "fp32")})
        assert np.array_equal(np.isnan(got["Y"]), np.isnan(want["Y"])), op
        ok = ~np.isnan(want["Y"])
        assert np.allclose(got["Y"][ok], want["Y"][ok], rtol=1e-5, atol=1e-3), op


def test_a_scalar_output_runs_and_is_checked() -> None:
    # max |X| over a vector: a 0-d output, which ncdc run allocates, fills and compares.

    from ncdc.verify.run import run_spec

    spec = support.SPECS / "amax_vector_bf16.yaml"
    for n in (1001, 7):
        outcome = run_spec(spec, H200, sizes={"n": n})
        (check,) = outcome.result.checks
        assert check.ok and check.unexpected_nan == 0, check


COLUMN_SOFTMAX = """
ncdc: 1
name: colsm
axes: {m: 37, n: 130}
inputs: {X: {axes: [m, n], dtype: fp32}}
ops: ["Y = softmax(X, over=m)"]
outputs: [Y]
"""

TOTAL_SUM = """
ncdc: 1
name: total
axes: {m: 37, n: 130}
inputs: {X: {axes: [m, n], dtype: fp32}}
ops: ["s = sum(X, over=[m, n])"]
outputs: [s]
"""


def _runs(text: str) -> None:
    d = load_diagram_text(text)
    result = run_diagram(d, render_plan(plan_diagram(d, H200)), backend="cpu", seed=2)
    assert result.ok, result.checks


def test_a_row_op_over_a_leading_axis_and_a_whole_tensor_sum_run() -> None:
    # Softmax over m, which is not last in X, and a sum to a scalar over both axes: the
    # reduction family runs both as written, and the layouts once asked for still run.
    for text in (COLUMN_SOFTMAX, TOTAL_SUM, COLUMN_SOFTMAX.replace("axes: [m, n]", "axes: [n, m]")):
        _runs(text)
