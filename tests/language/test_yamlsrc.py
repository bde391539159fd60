"""Reading a spec: regular files only, the size checked before reading, never more of a
file echoed than the offending line; plain decimal numbers; YAML-special words as names
get a "quote it" hint; user text is never markup or emoji; validation is linear."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ncdc.errors import SpecError
from ncdc.language.load import load_diagram, load_diagram_text
from tests import support
from tests.support import SOFTMAX, assert_error, ncdc

GOOD = Path(SOFTMAX).read_text()


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result: list[BaseException | None] = []

    def load():
        try:
            load_diagram(fifo)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            result.append(e)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=5)
    if worker.is_alive():  # unblock the reader so the test process can exit
        with open(fifo, "w"):
            pass
        pytest.fail("reading a FIFO hung")
    assert isinstance(result[0], SpecError) and "named pipe" in str(result[0])


def test_a_symlink_to_dev_zero_is_refused(tmp_path):
    link = tmp_path / "spec.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(SpecError, match="character device"):  # said before any read
        load_diagram(link)


def test_a_large_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(16 << 30)  # 16 GiB, sparse: reading it would take seconds and the memory
    with pytest.raises(SpecError, match="bytes; expected a diagram under"):  # by its size
        load_diagram(big)


def test_a_spec_linked_to_a_secret_echoes_at_most_a_line(tmp_path):
    secret = tmp_path / "shadow"
    lines = [f"user{i}:$6$secret{i}secret{i}secret{i}secret:19000:0:99999:7:::" for i in range(5)]
    secret.write_text("\n".join(lines) + "\n")
    link = tmp_path / "spec.yaml"
    link.symlink_to(secret)
    result = ncdc("check", str(link))
    assert result.returncode == 2
    # The offending (first) line may be quoted, cut short; no other line of the file.
    assert not any(f"user{i}" in result.stderr or f"secret{i}" in result.stderr
                   for i in range(1, 5))  # fmt: skip
    assert all(len(line) < 400 for line in result.stderr.splitlines())


@pytest.mark.parametrize(
    ("size", "reads_as"), [("010", 8), ("0x10", 16), ("1:30", 90), ("1_024", 1024), ("0b101", 5)]
)
def test_sizes_are_plain_decimal(size, reads_as):
    text = GOOD.replace("m: 16384", f"m: {size}")
    assert text != GOOD
    with pytest.raises(SpecError) as e:
        load_diagram_text(text, "s.yaml")
    assert "plain decimal" in e.value.line() and "axes.m" in e.value.line()


def test_a_quoted_or_decimal_size_is_read_as_written():
    assert load_diagram_text(GOOD.replace("m: 16384", "m: 10"), "s.yaml").axes["m"] == 10


@pytest.mark.parametrize("word", ["NULL", "on", "no", "Yes", "~", "off"])
def test_yaml_special_words_as_names_say_quote_it(word):
    as_output = GOOD.replace("outputs: [Y]", f"outputs: [{word}]")
    assert as_output != GOOD
    with pytest.raises(SpecError) as e:
        load_diagram_text(as_output, "s.yaml")
    assert "quote it" in e.value.line() and f"'{word}'" in e.value.line()
    as_key = GOOD.replace("X: {axes", f"{word}: {{axes")
    with pytest.raises(SpecError) as e:
        load_diagram_text(as_key, "s.yaml")
    assert "quote it" in e.value.line()


def test_user_text_is_never_markup_or_emoji(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD.replace("doc:", "doc: ':x: [bold]loud[/bold] :thumbs_up:'\n#", 1))
    assert spec.read_text() != GOOD
    shown = ncdc("show", str(spec))
    assert shown.returncode == 0, shown.stderr
    assert ":x:" in shown.stdout and "[bold]loud[/bold]" in shown.stdout
    assert "\u274c" not in shown.stdout
    bad = tmp_path / "b.yaml"
    bad.write_text(GOOD.replace("name: softmax", "name: ':x:[red]'"))
    err = assert_error(ncdc("show", str(bad)), 2)
    assert ":x:[red]" in err and "\u274c" not in err


def chain(n: int) -> str:
    ops = "\n".join(f"  - Y{i} = relu(Y{i - 1})" for i in range(2, n + 1))
    return (
        "ncdc: 1\nname: chain\naxes: {m: 64, n: 64}\ninputs:\n  X: {axes: [m, n], dtype: fp32}\n"
        f"ops:\n  - Y1 = relu(X)\n{ops}\noutputs: [Y{n}]\n"
    )


def test_validation_is_linear_in_the_ops():
    """3,000 ops were 24 s (quadratic); ten times the ops now make about ten times the
    Python calls, not a hundred (counted: no wall-clock bound)."""
    small_text, large_text = chain(300), chain(3000)
    d, big = load_diagram_text(small_text, "c.yaml"), load_diagram_text(large_text, "c.yaml")
    assert len(d.ops) == 300 and len(big.ops) == 3000
    small = support.python_calls(load_diagram_text, small_text, "c.yaml")
    large = support.python_calls(load_diagram_text, large_text, "c.yaml")
    assert large < 12 * small, (small, large)  # 10x the ops: linear, not 100x


def test_checking_a_long_diagram_is_linear_too():
    """`ncdc check` also builds the memory graph, which asks for tensors by name per op."""
    from ncdc.hardware.load import load_hardware
    from ncdc.model.graph import build_graph

    hw = load_hardware("h200")
    small, large = (load_diagram_text(chain(n), "c.yaml") for n in (300, 3000))
    calls = [support.python_calls(build_graph, d, hw) for d in (small, large)]
    assert calls[1] < 12 * calls[0], calls  # it was quadratic: 100x


def test_ops_out_of_order_keep_the_pass_order():
    text = GOOD.replace("  - Y = softmax(X, over=n)", "  - Y = exp(Z)\n  - Z = relu(X)")
    text = text.replace("outputs: [Y]", "outputs: [Y]")
    assert [op.out for op in load_diagram_text(text, "s.yaml").ops] == ["Z", "Y"]


@pytest.mark.parametrize("value", ["!!float", "!!float ''", "!!int", "!!int x", "!!bool maybe",
                                   "!!float [1]", "!!binary zz"])  # fmt: skip
def test_an_explicit_tag_that_does_not_read_is_one_line(value):
    """`!!float` with no value was an IndexError inside PyYAML (found by the fuzz tests)."""
    text = GOOD.replace("axes: [m, n]", f"axes: [{value}]", 1)
    assert text != GOOD
    with pytest.raises(SpecError) as info:
        load_diagram_text(text, "t.yaml")
    assert "\n" not in info.value.line() and "t.yaml" in info.value.line()
