"""One record per operation (ncdc.language.ops): every operation has its signature, its
price, its float64 meaning and its device function, and each layer reads them there."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ncdc.backends import nvrtc
from ncdc.language.ops import KINDS, OPERATIONS, RECORDS, REDUCE_MAX, STRUCTURAL, record
from ncdc.verify import reference

HEADERS = "\n".join(p.read_text() for p in nvrtc.ncdc_include_dir().glob("*.*h"))  # .cuh, .h
ALL = sorted(RECORDS.values(), key=lambda r: (r.kind, r.name))


@pytest.mark.parametrize("rec", ALL, ids=lambda r: f"{r.kind}:{r.name}")
def test_every_record_has_all_four(rec) -> None:
    # signature
    assert rec.kind in KINDS and rec.operands in (1, 2, 3) and rec.required <= rec.keywords
    # price: stated, never a default (an exponential counts on the SFU, not twice)
    assert rec.cuda_flops >= 0 and rec.sfu in (0, 1)
    # float64 meaning: its own function, or its kind's evaluator in the reference
    if rec.kind in STRUCTURAL:
        assert rec.meaning is None
        assert f'op.kind == "{rec.kind}"' in _reference_source()
    else:
        assert callable(rec.meaning)
    # device function: named ncdc::op_<name> in the headers, where the record names one
    if rec.device:
        assert rec.device == f"op_{rec.name}"
        assert re.search(rf"\b{rec.device}\b", HEADERS), f"no {rec.device} in the headers"


def _reference_source() -> str:
    import inspect

    return inspect.getsource(reference)


@pytest.mark.parametrize(
    "name, x, expected",
    [("exp", 0.0, 1.0), ("relu", -1.0, 0.0), ("sigmoid", 0.0, 0.5), ("silu", 0.0, 0.0),
     ("rsqrt", 4.0, 0.5), ("square", -3.0, 9.0), ("gelu", 0.0, 0.0), ("tanh", 0.0, 0.0)],
)  # fmt: skip
def test_unary_meanings_by_hand(name: str, x: float, expected: float) -> None:
    assert record("map", name).meaning(np, np.array([x]))[0] == pytest.approx(expected)


def test_reductions_and_rows_by_hand() -> None:
    x = np.array([[1.0, 2.0, 3.0]])
    assert record("reduce", "sum").meaning(np, x, (1,))[0] == 6.0
    assert REDUCE_MAX.meaning(np, x, (1,))[0] == 3.0
    assert record("reduce", "logsumexp").meaning(np, x, (1,))[0] == pytest.approx(
        np.log(np.exp(x).sum())
    )
    p = record("softmax", "softmax").meaning(np, np.array([[-np.inf, -np.inf]]), (1,))
    assert p.tolist() == [[0.0, 0.0]]  # a fully masked row: zeros, not NaN
    y = record("norm", "rmsnorm").meaning(np, np.array([[3.0, 4.0]]), (1,), 0.0)
    assert y[0] == pytest.approx([3 / np.sqrt(12.5), 4 / np.sqrt(12.5)])


def test_the_spelled_operations_are_the_language() -> None:
    assert "gelu_tanh" not in OPERATIONS  # gelu(X, approximate=tanh)
    assert OPERATIONS["max"].kind == "binary" and REDUCE_MAX.kind == "reduce"
    assert all(r.spelled for r in OPERATIONS.values())


def test_the_model_prices_every_op_from_its_record() -> None:
    # layernorm: 8 CUDA-core FLOPs per value (its record), no SFU
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram
    from ncdc.model.graph import build_graph
    from ncdc.model.structure import KernelModel

    d = load_diagram("diagrams/layernorm.yaml", {"m": 4, "n": 8})
    g = build_graph(d, load_hardware("h200"))
    flops = KernelModel(d, g.kernels[0]).flops_by_unit
    assert flops[("cuda", "fp32")] == 4 * 8 * record("norm", "layernorm").cuda_flops
    assert ("sfu", "exp") not in flops


@pytest.mark.parametrize("rec", [r for r in ALL if r.kind in ("map", "binary")],
                         ids=lambda r: f"{r.kind}:{r.name}")  # fmt: skip
def test_every_map_has_a_derivative_or_says_why_not(rec) -> None:
    # ncdc grad expands the derivative (tests/grad/test_derive.py checks it numerically)
    assert bool(rec.derivative) != bool(rec.no_derivative)
    if rec.derivative:
        assert len(rec.derivative) == rec.operands
        # "" for an operand no gradient flows to (piecewise constant in it), else g times
        assert all(expr == "" or "g" in expr for expr in rec.derivative)


def test_erf_by_hand() -> None:
    assert record("map", "erf").meaning(np, np.array([0.5]))[0] == pytest.approx(0.5204998778)


@pytest.mark.parametrize(
    "name, a, b, expected",
    [("eq", 1.0, 1.0, 1.0), ("ne", np.nan, np.nan, 1.0), ("lt", np.nan, 1.0, 0.0),
     ("le", 2.0, 2.0, 1.0), ("gt", 3.0, 2.0, 1.0), ("ge", 1.0, 2.0, 0.0),
     ("and", 2.0, np.nan, 1.0), ("and", 0.0, 1.0, 0.0), ("or", 0.0, -0.5, 1.0)],
)  # fmt: skip
def test_comparisons_and_logic_by_hand(name: str, a: float, b: float, expected: float) -> None:
    got = record("binary", name).meaning(np, np.array([a]), np.array([b]))[0]
    assert got == expected


def test_where_and_not_by_hand() -> None:
    where = record("binary", "where").meaning
    c = np.array([1.0, 0.0, np.nan])
    assert where(np, c, np.array([5.0] * 3), -np.inf).tolist() == [5.0, -np.inf, 5.0]
    assert record("map", "not").meaning(np, c).tolist() == [0.0, 1.0, 0.0]
    assert record("map", "floor").meaning(np, np.array([-1.5]))[0] == -2.0
