"""The backward's lines (ncdc.grad.tape): fresh names, one line per distinct operation,
result axes as the inference gives them, zeros and arrangement by a binary map's order."""

from __future__ import annotations

from ncdc.grad.tape import Line, Tape


def test_a_line_is_written_once_and_names_are_fresh() -> None:
    t = Tape({"X": ("m", "n"), "dX": ()})
    a = t.emit("exp", ("X",), "dX")
    assert a == "dX_1" and t.emit("exp", ("X",), "dX") == a and len(t.lines) == 1


def test_result_axes_follow_the_inference() -> None:
    t = Tape({"A": ("m", "k"), "B": ("n", "k"), "v": ("n",)})
    assert t.axes[t.emit("contract", ("A", "B"), "c", over=("k",))] == ("m", "n")
    assert t.axes[t.emit("sum", ("A",), "s", over="k")] == ("m",)
    assert t.axes[t.emit("mul", ("v", "A"), "w")] == ("n", "m", "k")


def test_arrange_permutes_and_broadcasts_by_adding_zeros() -> None:
    t = Tape({"G": ("n",)})
    out = t.arrange("G", ("m", "n"), "bf16")
    assert t.axes[out] == ("m", "n")
    assert [line.text() for line in t.lines][-1] == f"{out} = add(zero, G, dtype=bf16)"
    assert t.arrange(out, ("m", "n"), "bf16") == out


def test_numbers_and_lists_are_spelled_as_a_spec_writes_them() -> None:
    line = Line("Y", "sum", ("X",), (("over", ("m", "n")), ("dtype", "fp32")))
    assert line.text() == "Y = sum(X, over=[m, n], dtype=fp32)"
    assert Line("Y", "mul", ("X", 0.5)).text() == "Y = mul(X, 0.5)"
    assert Line("Y", "add", ("X", 1.0)).renamed({"X": "Z"}).text() == "Y = add(Z, 1)"
