"""ncdc.load on host arrays (ncdc/api/kernel.py): the kernel ncdc compile builds, emulated,
equal to the float64 reference; sizes bound from shapes and built once; every wrong array
one ArrayError naming it. The GPU path is tests/api/test_runs.py; torch tests/test_torch.py.
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import ncdc
from ncdc.api import kernel as kernel_module
from ncdc.errors import ArrayError
from ncdc.language.load import load_diagram
from ncdc.verify.reference import evaluate
from ncdc.verify.run import compare
from tests import support

SOFTMAX = str(support.DIAGRAMS / "softmax.yaml")
MATMUL = str(support.DIAGRAMS / "matmul.yaml")
ROWSTATS = str(support.SPECS / "rowstats_two_outputs.yaml")


def rng() -> np.random.Generator:
    return np.random.default_rng(np.random.default_rng().integers(2**31))


def check_against_reference(
    spec: str, inputs: dict, outputs: dict, sums: dict | None = None,
    softmaxes: dict | None = None,
) -> None:  # fmt: skip
    """Each output within its dtype's tolerance of the float64 reference (`sums`: the
    contractions a kernel sums on tensor cores short of fp32, summed alike; `softmaxes`:
    those it rounds tile by tile for the product after them, rounded alike)."""
    shapes = {a: n for name, x in inputs.items() for a, n in zip(
        load_diagram(spec).tensor(name).axes, np.shape(x), strict=True)}  # fmt: skip
    d = load_diagram(spec, shapes)
    values = {name: np.asarray(x).astype(np.float64) for name, x in inputs.items()}
    want = evaluate(d, values, sums=sums, softmaxes=softmaxes)
    for name, got in outputs.items():
        dtype = d.tensor(name).dtype
        check = compare(name, dtype, np.asarray(got).astype(np.float64), want[name])
        assert check.ok, check


def test_softmax_on_numpy_equals_the_reference() -> None:
    softmax = ncdc.load(SOFTMAX)
    x = rng().standard_normal((3, 65)).astype(ml_dtypes.bfloat16)
    x[1, 7] = np.inf  # a row with an infinity gives NaN, as the reference's does
    y = softmax(x)
    assert y.shape == (3, 65) and y.dtype == ml_dtypes.bfloat16
    check_against_reference(SOFTMAX, {"X": x}, {"Y": y})
    assert np.isnan(y[1].astype(np.float64)).all()


def test_matmul_takes_values_raw_bits_names_and_out() -> None:
    matmul = ncdc.load(MATMUL)
    a = rng().standard_normal((33, 40)).astype(ml_dtypes.bfloat16)
    b = rng().standard_normal((40, 24)).astype(ml_dtypes.bfloat16)
    c = matmul(a, B=b.view(np.uint16))  # bf16 as its raw bits, as CuPy holds it
    check_against_reference(MATMUL, {"A": a, "B": b}, {"C": c})
    out = np.full((33, 24), np.nan, dtype=ml_dtypes.bfloat16)
    again = matmul(B=b, A=a, out=out)
    assert again is out and np.array_equal(out.view(np.uint16), c.view(np.uint16))


def test_two_outputs_come_as_a_tuple_and_out_takes_a_mapping() -> None:
    stats = ncdc.load(ROWSTATS)
    x = rng().standard_normal((5, 37)).astype(np.float32)
    mx, s = stats(x)
    check_against_reference(ROWSTATS, {"X": x}, {"mx": mx, "s": s})
    into = {"s": np.empty(5, np.float32), "mx": np.empty(5, np.float32)}
    got = stats(x, out=into)
    assert got[0] is into["mx"] and got[1] is into["s"]
    assert np.array_equal(into["mx"], mx) and np.array_equal(into["s"], s)


def test_a_size_seen_before_is_not_planned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = []
    original = kernel_module.build
    monkeypatch.setattr(
        kernel_module, "build", lambda *a, **k: builds.append(a[0].axes) or original(*a, **k)
    )
    softmax = ncdc.load(SOFTMAX)
    x = np.ones((3, 65), dtype=ml_dtypes.bfloat16)
    softmax(x)
    softmax(x)
    assert builds == [{"m": 3, "n": 65}]
    softmax(np.ones((2, 65), dtype=ml_dtypes.bfloat16))
    assert builds == [{"m": 3, "n": 65}, {"m": 2, "n": 65}]


def test_source_and_cost_are_what_compile_and_cost_say(tmp_path) -> None:
    k = ncdc.load(SOFTMAX, sizes={"m": 3, "n": 65})
    result = support.ncdc("compile", SOFTMAX, "--set", "m=3", "--set", "n=65", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert k.source == (tmp_path / "softmax.cu").read_text()
    cost = support.ncdc("cost", SOFTMAX, "--set", "m=3", "--set", "n=65", "--format", "json")
    assert k.cost() == json.loads(cost.stdout)
    assert k.plan.kernels[0].candidate == k.at(m=3).plan.kernels[0].candidate


def test_yaml_text_and_a_loaded_diagram_are_specs_too() -> None:
    text = (support.DIAGRAMS / "softmax.yaml").read_text()
    assert ncdc.load(text).inputs == ("X",)
    k = ncdc.load(load_diagram(SOFTMAX), sizes={"m": 2})
    assert k.sizes == {"m": 2, "n": 4096} and k.outputs == ("Y",)
    assert repr(k) == "<ncdc.Kernel softmax(X[m,n] bf16) -> Y>"


def test_a_host_array_of_another_library_comes_through_dlpack() -> None:
    stats = ncdc.load(ROWSTATS)
    x = rng().standard_normal((4, 9)).astype(np.float32)

    class Foreign:  # another library's host array: only the DLPack protocol
        def __dlpack__(self, **kwargs):
            return x.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    mx, _ = stats(Foreign())
    assert np.array_equal(mx, x.max(axis=1))


def error(kernel, *args, **kwargs) -> str:
    with pytest.raises(ArrayError) as e:
        kernel(*args, **kwargs)
    line = e.value.line()
    assert "\n" not in line and isinstance(e.value, ValueError)
    return line


def test_every_wrong_array_is_one_line_naming_it() -> None:
    # refused before anything is planned: no compiler runs
    matmul = ncdc.load(MATMUL)
    a = np.zeros((8, 16), ml_dtypes.bfloat16)
    b = np.zeros((16, 4), ml_dtypes.bfloat16)
    assert error(matmul, a) == (
        "matmul is missing input B (hint: pass A, B in this order, or by name)"
    )
    assert "takes 2 inputs (A, B), found 3" in error(matmul, a, b, b)
    assert "has no input 'b' (hint: did you mean 'B'?)" in error(matmul, a, b=b)
    assert "input A given twice" in error(matmul, a, b, A=a)
    assert error(matmul, a, np.zeros((15, 4), ml_dtypes.bfloat16)) == (
        "input B: axis k (dimension 0) is 15, but input A gives k=16 (hint: inputs that "
        "share an axis have one size along it)"
    )
    assert "input A: expected 2 dimensions [m, k], found shape (16,)" in error(matmul, a[0], b)
    assert "input A: expected bfloat16 or uint16 for bf16, found float32" in error(
        matmul, a.astype(np.float32), b
    )
    assert "input B is not contiguous" in error(matmul, a, np.zeros((4, 16), ml_dtypes.bfloat16).T)
    assert "expected an array, found a list" in error(matmul, [[1.0]], b)
    assert "output C: expected shape (8, 4) [m, n], found (4, 8)" in error(
        matmul, a, b, out=np.zeros((4, 8), ml_dtypes.bfloat16)
    )
    assert "stream= is for GPU arrays" in error(ncdc.load(ROWSTATS), np.ones((2, 3), np.float32),
                                                stream=7)  # fmt: skip


def test_the_cpu_backend_refuses_gpu_arrays_and_bad_backends(monkeypatch) -> None:
    from tests.api.fakes import fake_gpu

    with fake_gpu(monkeypatch) as gpu:
        k = ncdc.load(ROWSTATS, backend="cpu")
        x = gpu.asarray(np.ones((2, 3), np.float32))
        assert "backend 'cpu' runs on host arrays; the inputs are on cuda:0" in error(k, x)
    with pytest.raises(ArrayError, match="unknown backend 'gpu'"):
        ncdc.load(ROWSTATS, backend="gpu")


def test_a_gather_on_numpy_reads_the_rows_and_refuses_an_index_out_of_range() -> None:
    from ncdc.errors import IndexRangeError

    embed = ncdc.load(str(support.SPECS / "gather_embedding_odd.yaml"))
    table = rng().standard_normal((101, 130)).astype(ml_dtypes.bfloat16)
    ids = np.array([0, 100, 7, 7], dtype=np.int32)
    y = embed(table, ids)
    assert np.array_equal(np.asarray(y, dtype=np.float32), table[ids].astype(np.float32))
    with pytest.raises(IndexRangeError, match=r"index ids\[1\] = 101 is out of range"):
        embed(table, np.array([0, 101, 7, 7], dtype=np.int32))


def test_a_grouped_gemm_on_numpy_runs_each_expert_on_its_rows() -> None:
    """The mixture of experts' grouped GEMM from a program: rows gathered by token, each run
    of them times its expert's weights (11 experts, one with no rows, rows after the last
    run), against NumPy; offsets out of order are refused naming the entry."""
    from ncdc.errors import IndexRangeError

    moe = ncdc.load(str(support.SPECS / "moe_grouped_odd.yaml"))
    r = rng()
    x = r.standard_normal((61, 72)).astype(ml_dtypes.bfloat16)
    w = r.standard_normal((11, 88, 72)).astype(ml_dtypes.bfloat16)
    rows = r.integers(0, 61, size=93).astype(np.int32)
    ends = np.array([9, 9, 10, 25, 40, 41, 60, 70, 80, 85, 90], dtype=np.int32)
    got = np.asarray(moe(x, rows, ends, w), dtype=np.float64)
    want = np.zeros((93, 88))
    for e, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
        h = x[rows[start:end]].astype(np.float64) @ w[e].astype(np.float64).T
        want[start:end] = h / (1 + np.exp(-h))
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()
    assert not got[90:].any()  # rows after the last run: silu(0)
    with pytest.raises(IndexRangeError, match=r"offsets ends go down at group 3 \(10 then 8\)"):
        moe(x, rows, np.array([9, 9, 10, 8, 40, 41, 60, 70, 80, 85, 90], np.int32), w)
