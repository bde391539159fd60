"""The library kernels `ncdc bench` times beside ncdc's (ncdc.measure.baselines)."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

from ncdc.language.load import load_diagram
from ncdc.measure import bench
from ncdc.measure.baselines import (
    attention_shape,
    baseline_kind,
    gemm_shape,
    row_shape,
    run_baselines,
)
from tests.measure.fakes import DIAGRAMS, H200, FakeCupy, plan_of


def test_baseline_is_chosen_by_structure_not_name():
    assert baseline_kind(plan_of("matmul")) == "gemm"
    assert baseline_kind(plan_of("batched_matmul")) == "gemm"
    assert baseline_kind(plan_of("attention")) == "attention"
    assert baseline_kind(plan_of("attention_unfused")) == "attention"  # three kernels
    assert baseline_kind(plan_of("decode_attention")) == "attention"
    assert baseline_kind(plan_of("softmax")) == "rowwise"


def test_baseline_shapes():
    g = gemm_shape(plan_of("batched_matmul"))
    assert (g.batch, g.m, g.n, g.k, g.dtype) == (16, 2048, 2048, 2048, "bf16")
    gqa = attention_shape(load_diagram(DIAGRAMS / "gqa_attention.yaml"))
    # [b, g, r] query heads over [b, g] key/value heads: 4*8*4 = 128 over 4*8 = 32.
    assert (gqa.q_heads, gqa.kv_heads, gqa.queries, gqa.keys, gqa.d, gqa.d_v) == (
        128, 32, 4096, 4096, 128, 128,
    )  # fmt: skip
    assert math.isclose(gqa.scale, 0.08838834764831845) and not gqa.causal
    assert attention_shape(load_diagram(DIAGRAMS / "attention_causal.yaml")).causal
    r = row_shape(plan_of("layernorm"))
    assert (r.rows, r.n, r.op.fn) == (16384, 4096, "layernorm")


def test_fp8_baseline_without_torch_is_skipped_with_a_reason(monkeypatch):
    """Control flow only: no PyTorch, so the fp8 GEMM baseline is skipped, and the copy
    ceiling still runs (on the fake clock)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    cupy = FakeCupy()
    plan = plan_of("fp8_matmul")
    out = run_baselines(plan, cupy, bench.make_timer(cupy, H200, 1.0, 1.0))
    assert out[0].timing is None and "PyTorch" in out[0].skipped
    copy = out[-1]
    assert copy.name == "copy (device to device)" and copy.timing is not None
    assert copy.bytes_moved == 2 * (plan.top_bytes // 2)


def test_a_shape_the_baselines_cannot_read_is_a_skip_not_a_failed_bench():
    """Control flow only: a plan with an attention kernel whose operations are not
    contract-softmax-contract. Reading its shape raised outside the skip handling and
    stopped the whole bench; now it is one skipped baseline and the copy still runs."""
    cupy = FakeCupy()
    real = plan_of("matmul")
    plan = SimpleNamespace(
        kernels=[SimpleNamespace(family=SimpleNamespace(name="attention"))],
        graph=real.graph, top_bytes=real.top_bytes,
    )  # fmt: skip
    out = run_baselines(plan, cupy, bench.make_timer(cupy, H200, 1.0, 1.0))
    assert [b.name for b in out] == ["sdpa", "copy (device to device)"]
    assert out[0].timing is None and "not an attention diagram" in out[0].skipped
    assert out[1].timing is not None


class FakeMatrix:
    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def astype(self, dtype: str) -> FakeMatrix:
        return self


def test_unbatched_cupy_gemm_baseline_is_two_dimensional(monkeypatch):
    """Control flow only: without PyTorch the GEMM baseline is `cupy.matmul` in fp16. CuPy 14
    runs a 3-D fp16 matmul in fp32 on upcast copies (cupy/cupy#10317), so an unbatched
    problem must be 2-D to time fp16 cuBLAS; a batched one stays 3-D."""
    from ncdc.measure.baselines import _gemm

    monkeypatch.setitem(sys.modules, "torch", None)
    shapes = []
    cupy = SimpleNamespace(
        float16="float16", float32="float32",
        random=SimpleNamespace(standard_normal=lambda shape, dtype: FakeMatrix(shape)),
        matmul=lambda a, b: shapes.append((a.shape, b.shape)),
    )  # fmt: skip
    for name, want in [
        ("matmul", ((4096, 4096), (4096, 4096))),
        ("batched_matmul", ((16, 2048, 2048), (16, 2048, 2048))),
    ]:
        ((label, fn),) = _gemm(cupy, gemm_shape(plan_of(name)))
        fn()
        assert label == "cuBLAS fp16 (cupy.matmul)" and shapes.pop() == want
