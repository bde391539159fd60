"""ncdc.torch: a diagram as a torch custom op, on CPU tensors (the emulated kernel; the GPU
runs in scripts/device-check): its results against the float64 reference, its schema and
fake checked by torch.library.opcheck, torch.compile with no graph break, one name one op.

These tests need PyTorch (`make test-torch` installs it in .venv-torch); without it they
are skipped.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ncdc  # noqa: E402
import ncdc.torch as ncdc_torch  # noqa: E402
from ncdc.errors import ArrayError, UsageError  # noqa: E402
from tests import support  # noqa: E402
from tests.api.test_kernel import check_against_reference, rng  # noqa: E402

SOFTMAX = support.SOFTMAX
ROWSTATS = str(support.SPECS / "rowstats_two_outputs.yaml")
DEQUANT = str(support.SPECS / "ew_dequant_fp8.yaml")


@pytest.fixture(scope="module")
def softmax():
    return ncdc_torch.op(SOFTMAX, name="ncdc_test::softmax")


def _bf16(shape) -> torch.Tensor:
    return torch.from_numpy(rng().standard_normal(shape).astype(np.float32)).to(torch.bfloat16)


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def test_the_op_runs_the_kernel_on_cpu_tensors(softmax) -> None:
    x = _bf16((3, 77))
    y = softmax(x)
    assert y.dtype == torch.bfloat16 and y.shape == (3, 77)
    check_against_reference(SOFTMAX, {"X": _numpy(x)}, {"Y": _numpy(y)})
    assert torch.equal(torch.ops.ncdc_test.softmax(x), y)  # reachable through torch.ops


def test_opcheck_finds_the_schema_fake_and_dispatch_consistent(softmax) -> None:
    torch.library.opcheck(softmax, (_bf16((2, 40)),))


def test_two_outputs_come_back_as_a_tuple_and_fp8_inputs_as_torch_dtypes() -> None:
    stats = ncdc_torch.op(ROWSTATS, name="ncdc_test::rowstats")
    d = ncdc.load(ROWSTATS).diagram
    x = torch.from_numpy(rng().standard_normal((5, 31)).astype(np.float32)).to(
        getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[d.inputs[0].dtype])
    )
    got = stats(x)
    assert isinstance(got, tuple) and len(got) == len(d.outputs)
    check_against_reference(
        ROWSTATS, {"X": _numpy(x)}, dict(zip(d.outputs, map(_numpy, got), strict=True))
    )

    dequant = ncdc_torch.op(DEQUANT, name="ncdc_test::dequant")
    xq = torch.from_numpy(rng().standard_normal((4, 130)).astype(np.float32)).to(
        torch.float8_e4m3fn
    )
    s = torch.tensor(0.5)
    y = dequant(xq, s)
    want = torch.clamp(xq.to(torch.float32) * 0.5, min=0)
    assert torch.equal(y, want)  # fp8 -> fp32 times a power of two is exact


def test_torch_compile_traces_it_with_no_graph_break(softmax) -> None:
    x = _bf16((4, 50))
    f = torch.compile(lambda t: softmax(t * 2) + 1, fullgraph=True, backend="aot_eager")
    assert torch.equal(f(x), softmax(x * 2) + 1)
    y = f(_bf16((6, 50)))  # a new size: retraced through the fake, rebuilt once
    assert y.shape == (6, 50)


def test_torch_compile_with_inductor(softmax) -> None:
    x = _bf16((2, 33))
    f = torch.compile(lambda t: softmax(t).float().sum(dim=1), fullgraph=True)
    assert torch.allclose(f(x), torch.ones(2), atol=0.05)


def test_the_fake_gives_shapes_by_axis_name_and_refuses_a_wrong_rank(softmax) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = softmax(torch.empty(7, 9, dtype=torch.bfloat16))
        assert y.shape == (7, 9) and y.dtype == torch.bfloat16
        with pytest.raises(ArrayError, match=r"expected 2 dimensions \[m, n\]"):
            softmax(torch.empty(7, dtype=torch.bfloat16))


def test_one_name_is_one_op(softmax) -> None:
    assert ncdc.torch.op is ncdc_torch.op  # reachable from import ncdc alone
    assert ncdc_torch.op(SOFTMAX, name="ncdc_test::softmax") is softmax
    with pytest.raises(UsageError, match="already registered for another diagram"):
        ncdc_torch.op(support.MATMUL, name="ncdc_test::softmax")
    with pytest.raises(UsageError, match="expected an operator name 'namespace::name'"):
        ncdc_torch.op(SOFTMAX, name="softmax")


def test_wrong_tensors_are_one_error_each(softmax) -> None:
    with pytest.raises(ArrayError, match="expected torch.bfloat16 for bf16, found torch.float16"):
        softmax(torch.zeros(2, 8, dtype=torch.float16))
    with pytest.raises(ArrayError, match="not contiguous"):
        ncdc.load(SOFTMAX)(_bf16((8, 4)).t())


# ---- the torch export (ncdc compile --emit torch) -------------------------------------

LAUNCH = """
import sys
sys.path.insert(0, sys.argv[1])
import {name} as module
for _ in range(2):
    module.launch({stream}, {addresses}, {workspace})
print(module.WORKSPACE_BYTES)
"""


# a Hopper kernel's tensor maps, and a scatter-add's accumulators set to zero at every call
EXPORTED = {
    "attention_fp8": (support.DIAGRAMS / "attention_fp8.yaml", {"b": 1, "h": 2, "q": 70, "x": 70}),
    "scatter_add_odd": (support.SPECS / "scatter_add_odd.yaml", {}),
}


@pytest.mark.parametrize("name", sorted(EXPORTED))
@pytest.mark.parametrize("version", [13000, 13020])
def test_the_torch_export_launches_what_the_json_describes(tmp_path, version, name) -> None:
    import subprocess
    import sys

    from ncdc.backends import nvrtc
    from ncdc.language.load import load_diagram
    from tests.backends import fakecuda

    if not nvrtc.available() or fakecuda.compiler() is None:
        pytest.skip("needs NVRTC and a C compiler")
    driver = fakecuda.build_driver(tmp_path / "driver")
    spec, sizes = EXPORTED[name]
    out = tmp_path / "out"
    ncdc.compile(str(spec), out=out, sizes=sizes, emit=["torch"])
    meta = fakecuda.read_meta(out, name)
    given = fakecuda.addresses(meta, load_diagram(spec, meta["axes"]))
    script = LAUNCH.format(name=name, stream=fakecuda.STREAM, addresses=given,
                           workspace=fakecuda.WORKSPACE)  # fmt: skip
    log = tmp_path / "driver.log"
    env = fakecuda.environment(driver, log, meta, version)
    ran = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True,
                         env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    fakecuda.check_log(log, meta, given, int(ran.stdout), version, calls=2)
    assert "retain primary context" not in log.read_text()  # the thread's context is used
    # A thread with no current context (none of torch's CUDA calls ran on it yet): the
    # device's primary context is made current, not a launch into no context
    log.unlink()
    ran = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True,
                         env={**env, "FAKE_CUDA_NO_CONTEXT": "1"})  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    lines = log.read_text().splitlines()
    assert "retain primary context of device 0" in lines and "set context 0x2" in lines
    fakecuda.check_log(log, meta, given, int(ran.stdout), version, calls=2)


def test_the_torch_export_is_an_op_with_a_fake(tmp_path, monkeypatch) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ncdc.backends import nvrtc

    if not nvrtc.available():
        pytest.skip("needs NVRTC")
    ncdc.compile(str(support.SPECS / "multi_mlp_two_gemms.yaml"), out=tmp_path, sizes={"m": 24},
                 emit=["torch"])  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__("multi_mlp_two_gemms")
    assert torch.ops.ncdc_export.multi_mlp_two_gemms.default is not None
    shapes = [shape for _, shape, _ in module.INPUTS]
    with FakeTensorMode():
        y = module.op(*(torch.empty(s, dtype=torch.bfloat16) for s in shapes))
        assert y.shape == (24, 1024) and y.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="the sizes it was compiled for"):
            module.op(*(torch.empty(s, dtype=torch.bfloat16) for s in shapes[:-1]),
                      torch.empty(7, dtype=torch.bfloat16))  # fmt: skip
    with pytest.raises(ValueError, match="input X is on cpu"):
        module.op(*(torch.zeros(s, dtype=torch.bfloat16) for s in shapes))


# ---- the backward (grad=None registers it where the diagram has a derivative) ---------


def _autograd_reference(fn, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """The gradients of sum(fn(inputs) * weights) in float64, by torch's own autograd."""
    ref = [t.detach().double().requires_grad_() for t in tensors]
    out = fn(*ref)
    weights = torch.from_numpy(rng().standard_normal(tuple(out.shape)))
    (out * weights).sum().backward()
    return [r.grad for r in ref], weights


def _check_grads(op_, fn, tensors, tolerance: float) -> None:
    """The op's backward (ncdc's kernels, emulated) against torch's float64 autograd."""
    want, weights = _autograd_reference(fn, *tensors)
    got = [t.detach().clone().requires_grad_() for t in tensors]
    (op_(*got).double() * weights).sum().backward()
    for g, w in zip(got, want, strict=True):
        assert g.grad is not None and g.grad.dtype == g.dtype and g.grad.shape == g.shape
        error = (g.grad.double() - w).abs().max() / w.abs().max()
        assert error < tolerance, float(error)


def test_the_softmax_op_has_a_backward_in_eager_and_compiled_code(softmax) -> None:
    x = _bf16((3, 77))
    _check_grads(softmax, lambda t: torch.softmax(t, dim=1), [x], 0.02)
    traced = torch.compile(lambda t: softmax(t).float().sum(), fullgraph=True, backend="aot_eager")
    eager, compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
    softmax(eager).float().sum().backward()
    traced(compiled).backward()
    assert torch.equal(eager.grad, compiled.grad)
    torch.library.opcheck(softmax, (x.clone().requires_grad_(),))


def test_causal_attention_trains_through_ncdcs_backward_kernels() -> None:
    """The backward pair ncdc grad chooses (the forward saves the row log-sum-exp, the
    backward recomputes P), at odd sizes: 37 queries, the last key tile partial."""
    import math

    attention = ncdc_torch.op(support.ROOT / "diagrams/attention_causal.yaml",
                              name="ncdc_test::attention_causal")  # fmt: skip
    q, k, v = (_bf16((1, 2, 37, 128)) for _ in range(3))

    def reference(q_, k_, v_):
        s = q_ @ k_.transpose(-1, -2) / math.sqrt(128)
        keep = torch.ones(37, 37, dtype=torch.bool).tril()
        return torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1) @ v_

    _check_grads(attention, reference, [q, k, v], 0.02)
    assert attention(q, k, v).shape == (1, 2, 37, 128)  # the diagram's output alone


def test_layernorm_gives_the_gradients_of_its_weight_and_bias() -> None:
    layernorm = ncdc_torch.op(support.ROOT / "diagrams/layernorm.yaml", name="ncdc_test::layernorm")
    x, w, b = _bf16((5, 96)), _bf16((96,)), _bf16((96,))

    def reference(x_, w_, b_):
        return torch.nn.functional.layer_norm(x_, (96,), w_, b_, eps=1e-5)

    _check_grads(layernorm, reference, [x, w, b], 0.02)


def test_an_embedding_table_gets_its_rows_gradients_summed() -> None:
    """The backward's scatter-add against torch's embedding backward: rows picked many
    times and rows never picked (zero); the token ids take no gradient."""
    embedding = ncdc_torch.op(support.ROOT / "diagrams/embedding.yaml",
                              name="ncdc_test::embedding")  # fmt: skip
    table = _bf16((11, 24)).requires_grad_()
    ids = torch.from_numpy(rng().integers(0, 7, size=33).astype(np.int32))  # rows 7..10: none
    weights = torch.from_numpy(rng().standard_normal((33, 24)))
    (embedding(table, ids).double() * weights).sum().backward()
    ref = table.detach().double().requires_grad_()
    (torch.nn.functional.embedding(ids.long(), ref) * weights).sum().backward()
    assert table.grad is not None and table.grad.dtype == torch.bfloat16
    error = (table.grad.double() - ref.grad).abs().max() / ref.grad.abs().max()
    assert error < 0.02, float(error)
    assert (table.grad[7:] == 0).all()


def test_a_diagram_without_a_derivative_refuses_its_backward_in_one_line() -> None:
    text = ("ncdc: 1\nname: rounded\naxes: {m: 4, n: 8}\ninputs:\n  X: {axes: [m, n], dtype: fp32}\n"
            "ops:\n  - R = cast(X, to=int8)\n  - Y = cast(R, to=fp32)\noutputs: [Y]\n")  # fmt: skip
    rounded = ncdc_torch.op(text, name="ncdc_test::rounded")
    x = torch.randn(4, 8, requires_grad=True)
    y = rounded(x)  # the forward runs
    with pytest.raises(
        UsageError, match="ncdc_test::rounded has no backward: .*cannot differentiate"
    ):
        y.float().sum().backward()
    with pytest.raises(ncdc.errors.SpecError, match="int8"):
        ncdc_torch.op(text, name="ncdc_test::rounded_grad", grad=True)
    assert not hasattr(ncdc_torch.op(text, name="ncdc_test::rounded_plain", grad=False), "default")


def test_a_router_picks_as_torch_topk_and_its_gates_train() -> None:
    """DeepSeek-V3's router at odd sizes: the experts torch.topk picks (distinct scores, so
    no tie decides), and the gradient of the logits through the gathered affinities."""
    router = ncdc_torch.op(support.ROOT / "diagrams/moe_router.yaml",
                           name="ncdc_test::moe_router", sizes={"j": 8})  # fmt: skip
    logits = torch.from_numpy(rng().standard_normal((37, 70))).float().requires_grad_()
    bias = torch.from_numpy(rng().standard_normal(70) * 0.1).float()
    picks, gates = router(logits, bias)
    want = torch.topk(torch.sigmoid(logits) + bias, 8, dim=-1).indices
    assert picks.dtype == torch.int32 and torch.equal(picks.long(), want)
    affinity = torch.sigmoid(logits.detach().double().requires_grad_())
    chosen = torch.gather(affinity, 1, want)
    reference = chosen / chosen.sum(-1, keepdim=True)
    assert torch.allclose(gates.double(), reference, atol=1e-5)
    weights = torch.from_numpy(rng().standard_normal((37, 8)))
    (gates.double() * weights).sum().backward()
    leaf = logits.detach().double().requires_grad_()
    s = torch.sigmoid(leaf)
    c = torch.gather(s, 1, want)
    ((c / c.sum(-1, keepdim=True)) * weights).sum().backward()
    assert logits.grad is not None
    assert torch.allclose(logits.grad.double(), leaf.grad, atol=1e-5)


def test_rope_and_a_running_sum_match_torch() -> None:
    """RoPE by a roll and a sign against rotate_half; a running sum against torch.cumsum,
    with its gradient (the running sum of the gradient from the end)."""
    rope = ncdc_torch.op(support.ROOT / "diagrams/rope.yaml", name="ncdc_test::rope")
    x = _bf16((1, 9, 3, 128))
    angles = torch.from_numpy(rng().standard_normal((9, 64))).float()
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1) for f in (torch.cos, torch.sin))
    half = torch.cat([-x[..., 64:], x[..., :64]], dim=-1).float()
    want = x.float() * cos[:, None, :] + half * sin[:, None, :]
    assert torch.allclose(rope(x, cos, sin).float(), want, atol=0.05)
    text = ("ncdc: 1\nname: running\naxes: {m: 3, n: 300}\ninputs:\n  X: {axes: [m, n], dtype: "
            "fp32}\nops:\n  - Y = cumsum(X, over=n)\noutputs: [Y]\n")  # fmt: skip
    running = ncdc_torch.op(text, name="ncdc_test::running")
    x = torch.from_numpy(rng().standard_normal((3, 300))).float().requires_grad_()
    y = running(x)
    assert torch.allclose(y, torch.cumsum(x.detach(), dim=1), atol=1e-4)
    g = torch.from_numpy(rng().standard_normal((3, 300))).float()
    (y * g).sum().backward()
    assert x.grad is not None
    assert torch.allclose(x.grad, torch.flip(torch.cumsum(torch.flip(g, [1]), 1), [1]), atol=1e-4)


def test_rope_attention_and_a_paged_decode_match_torchs_attention() -> None:
    """Llama 3's attention with RoPE applied as Q loads (and K rotated by a kernel of its
    own) against rotate_half and torch's scaled_dot_product_attention; a decode step through
    a block table of shuffled pages against the cache gathered by torch first."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sizes = {"b": 1, "s": 37, "x": 37, "g": 2, "r": 2, "p": 64}
    attend = ncdc_torch.op(support.ROOT / "diagrams/rope_attention.yaml",
                           name="ncdc_test::rope_attention", sizes=sizes)  # fmt: skip
    q, k, v = _bf16((1, 37, 2, 2, 128)), _bf16((1, 37, 2, 128)), _bf16((1, 37, 2, 128))
    angles = torch.from_numpy(rng().standard_normal((64, 64))).float()
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1) for f in (torch.cos, torch.sin))
    pos = torch.from_numpy(rng().permutation(64)[:37].astype(np.int32)).reshape(1, 37)

    def rotate(t: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        half = torch.cat([-t[..., 64:], t[..., :64]], dim=-1).float()
        return (t.float() * c + half * s).bfloat16().float()

    c, s = cos[pos[0]], sin[pos[0]]  # [s, d], the same positions for queries and keys
    qr = rotate(q, c[None, :, None, None], s[None, :, None, None])  # [b, s, g, r, d]
    kr = rotate(k, c[None, :, None], s[None, :, None])  # [b, x, g, d]
    want = sdpa(qr.permute(0, 2, 3, 1, 4), kr.permute(0, 2, 1, 3)[:, :, None],
                v.float().permute(0, 2, 1, 3)[:, :, None], is_causal=True)  # fmt: skip
    got = attend(q, k, v, cos, sin, pos, pos)
    assert torch.allclose(got.float(), want.permute(0, 3, 1, 2, 4), atol=0.03)

    paged = ncdc_torch.op(support.ROOT / "diagrams/paged_decode_attention.yaml",
                          name="ncdc_test::paged_decode",
                          sizes={"b": 2, "g": 2, "r": 2, "x": 40, "page": 12, "n": 3})  # fmt: skip
    q1, cache_k, cache_v = (
        _bf16((2, 2, 2, 1, 128)),
        _bf16((12, 16, 2, 128)),
        _bf16((12, 16, 2, 128)),
    )
    table = torch.from_numpy(rng().permutation(12)[:6].astype(np.int32)).reshape(2, 3)
    keys = cache_k[table.long()].reshape(2, 48, 2, 128)[:, :40].float()  # [b, x, g, d]
    values = cache_v[table.long()].reshape(2, 48, 2, 128)[:, :40].float()
    want = sdpa(q1.float().reshape(2, 2, 2, 128), keys.permute(0, 2, 1, 3),
                values.permute(0, 2, 1, 3))  # fmt: skip
    got = paged(q1, cache_k, cache_v, table)
    assert torch.allclose(got.float().reshape(2, 2, 2, 128), want, atol=0.03)


def test_the_grouped_gemm_matches_torch_per_expert() -> None:
    """DeepSeek-V3's routed-expert GEMM at small sizes as a torch op: a router's top-2
    choices sorted by expert give the rows and the offsets (torch.argsort and
    torch.bincount(...).cumsum, as a MoE layer computes them); each expert's rows against
    torch's own product of the gathered tokens and that expert's weights."""
    op = ncdc_torch.op(support.ROOT / "diagrams/moe_grouped_gemm.yaml", name="ncdc_test::moe",
                       sizes={"t": 29, "r": 58, "e": 6, "d": 72, "f": 40})  # fmt: skip
    x, w = _bf16((29, 72)), _bf16((6, 40, 72))
    choice = torch.from_numpy(rng().integers(0, 5, size=(29, 2))).reshape(-1)  # expert 5 unused
    order = torch.argsort(choice, stable=True)
    rows = (order // 2).int()
    ends = torch.bincount(choice, minlength=6).cumsum(0).int()
    got = op(x, rows, ends, w).float()
    start = 0
    for e, end in enumerate(ends.tolist()):
        h = x[rows[start:end].long()].float() @ w[e].float().T
        assert torch.allclose(got[start:end], torch.nn.functional.silu(h), rtol=0.01, atol=0.05), e
        start = end
    assert start == 58
