"""ncdc.verify.data: a run on the user's arrays (`ncdc run --inputs`) and its outputs kept
(`--save`): names, shapes and dtypes checked, no pickle, no file of the user's replaced."""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest

from ncdc.errors import UsageError
from ncdc.language.load import load_diagram
from ncdc.verify.data import _ours, input_values, read_arrays, save_outputs, saved_dtype
from ncdc.verify.reference import round_to
from tests import support


@pytest.fixture
def matmul():
    return load_diagram(support.DIAGRAMS / "matmul.yaml", {"m": 5, "n": 3, "k": 7})


def _arrays(d, rng):
    return {t.name: rng.standard_normal([d.axes[a] for a in t.axes]) for t in d.inputs}


def test_inputs_come_in_inputs_order_rounded_to_their_dtype(tmp_path, matmul) -> None:
    a = _arrays(matmul, np.random.default_rng(0))
    path = tmp_path / "in.npz"
    np.savez(path, B=a["B"], A=a["A"])
    arrays = read_arrays(path, matmul)
    assert list(arrays) == [t.name for t in matmul.inputs]
    values = input_values(path, matmul, arrays)
    for t in matmul.inputs:
        assert values[t.name].dtype == np.float64
        assert np.array_equal(values[t.name], round_to(a[t.name], t.dtype))


@pytest.mark.parametrize("form", ["ml_dtypes", "bits", "float32"])
def test_bf16_inputs_may_be_values_bits_or_ml_dtypes_arrays(tmp_path, form) -> None:
    d = load_diagram(support.DIAGRAMS / "softmax.yaml", {"m": 3, "n": 9})
    assert d.inputs[0].dtype == "bf16"
    x = np.random.default_rng(2).standard_normal((3, 9)).astype(ml_dtypes.bfloat16)
    saved = {"ml_dtypes": x, "bits": x.view(np.uint16), "float32": x.astype(np.float32)}[form]
    np.savez(tmp_path / "x.npz", X=saved)
    got = input_values(tmp_path / "x.npz", d, read_arrays(tmp_path / "x.npz", d))["X"]
    assert np.array_equal(got, x.astype(np.float64))


def test_wrong_names_shapes_and_types_are_one_line_each(tmp_path, matmul) -> None:
    a = _arrays(matmul, np.random.default_rng(1))
    np.savez(tmp_path / "extra.npz", **a, Bee=a["B"])
    with pytest.raises(UsageError, match="array 'Bee' is not an input of matmul"):
        read_arrays(tmp_path / "extra.npz", matmul)
    np.savez(tmp_path / "missing.npz", A=a["A"])
    with pytest.raises(UsageError, match="no array for input B"):
        read_arrays(tmp_path / "missing.npz", matmul)
    np.savez(tmp_path / "shape.npz", A=a["A"].T, B=a["B"])
    with pytest.raises(
        UsageError, match=r"array 'A' has shape \(7, 5\); input A\[m, k\] is \(5, 7\)"
    ):
        input_values(tmp_path / "shape.npz", matmul, read_arrays(tmp_path / "shape.npz", matmul))
    np.savez(tmp_path / "text.npz", A=np.full((5, 7), "x"), B=a["B"])
    with pytest.raises(UsageError, match="array 'A' is <U1"):
        input_values(tmp_path / "text.npz", matmul, read_arrays(tmp_path / "text.npz", matmul))


def test_pickled_arrays_and_other_files_are_refused_unread(tmp_path, matmul) -> None:
    np.savez(tmp_path / "obj.npz", A=np.array([{"x": 1}], dtype=object), B=np.zeros((7, 3)))
    with pytest.raises(UsageError, match="without pickle"):
        read_arrays(tmp_path / "obj.npz", matmul)
    (tmp_path / "notes.npz").write_text("not a zip")
    with pytest.raises(UsageError, match="not an .npz"):
        read_arrays(tmp_path / "notes.npz", matmul)


def test_outputs_are_saved_exactly_and_marked(tmp_path, matmul) -> None:
    out = tmp_path / "out.npz"
    c = round_to(np.random.default_rng(3).standard_normal((5, 3)), matmul.tensor("C").dtype)
    save_outputs(out, matmul, {"C": c})
    with np.load(out, allow_pickle=False) as data:
        assert sorted(data.files) == ["C", "ncdc"]
        assert data["C"].dtype == saved_dtype(matmul.tensor("C").dtype)
        assert np.array_equal(data["C"].astype(np.float64), c)
        mark = json.loads(str(data["ncdc"]))
    assert mark["diagram"] == "matmul" and mark["axes"] == {"m": 5, "n": 3, "k": 7}
    save_outputs(out, matmul, {"C": c * 0})  # a file ncdc wrote is replaced
    with np.load(out) as data:
        assert not data["C"].any()


def test_a_file_ncdc_did_not_write_is_never_replaced(tmp_path, matmul) -> None:
    mine = tmp_path / "results.npz"
    np.savez(mine, C=np.ones((5, 3)))
    before = mine.read_bytes()
    with pytest.raises(UsageError, match="was not written by ncdc run --save"):
        save_outputs(mine, matmul, {"C": np.zeros((5, 3))})
    assert mine.read_bytes() == before


def test_saved_dtypes_hold_every_value() -> None:
    assert saved_dtype("bf16") == np.float32 and saved_dtype("fp8_e4m3") == np.float32
    assert saved_dtype("fp16") == np.float16 and saved_dtype("int32") == np.int32


def test_an_inputs_file_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    # Issue 31: every file ncdc reads goes through one guarded reader; np.load of a FIFO
    # blocked forever.
    path = tmp_path / "in.npz"
    os.mkfifo(path)
    with pytest.raises(UsageError, match="in.npz: expected an .npz file, found a named pipe"):
        read_arrays(path, load_diagram(support.SOFTMAX))
    assert not _ours(path)  # nor is it taken for a file ncdc saved


def test_an_npy_file_is_refused_as_one_line(tmp_path, matmul) -> None:
    np.save(tmp_path / "a.npy", np.zeros((5, 7), np.float32))
    with pytest.raises(UsageError, match="holds one array with no name"):
        read_arrays(tmp_path / "a.npy", matmul)
    # --save onto an .npy ncdc did not write: refused, the file kept
    with pytest.raises(UsageError, match="was not written by ncdc run --save"):
        save_outputs(tmp_path / "a.npy", matmul, {"C": np.zeros((5, 3))})
    assert np.load(tmp_path / "a.npy").shape == (5, 7)
