"""Arrays a run reads and saves (ncdc.check.data): an inputs .npz read through the guarded
reader, one array per input, nothing pickled."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ncdc.check import data
from ncdc.errors import UsageError
from ncdc.language.load import load_diagram
from tests.support import SOFTMAX

DIAGRAM = load_diagram(SOFTMAX, {"m": 4, "n": 64})


def test_an_npz_of_one_array_per_input_is_read(tmp_path):
    path = tmp_path / "in.npz"
    np.savez(path, X=np.ones((4, 64), np.float32))
    arrays = data.read_arrays(path, DIAGRAM)
    assert list(arrays) == ["X"] and arrays["X"].shape == (4, 64)


def test_an_inputs_file_that_is_a_fifo_is_refused_without_hanging(tmp_path):
    # Issue 31: every file ncdc reads goes through one guarded reader; np.load of a FIFO
    # blocked forever.
    path = tmp_path / "in.npz"
    os.mkfifo(path)
    with pytest.raises(UsageError, match="in.npz: expected an .npz file, found a named pipe"):
        data.read_arrays(path, DIAGRAM)
    assert not data._ours(path)  # nor is it taken for a file ncdc saved


def test_an_array_of_another_name_is_refused_with_a_hint(tmp_path):
    path = tmp_path / "in.npz"
    np.savez(path, Y=np.ones((4, 64), np.float32))
    with pytest.raises(UsageError, match="array 'Y' is not an input of softmax"):
        data.read_arrays(path, DIAGRAM)
