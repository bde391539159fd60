"""The diagram language: valid specs parse to the right shapes; every kind of bad spec
gives exactly one line naming file, line, YAML path, what was expected and found, and a hint.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ncdc.errors import SpecError
from ncdc.language.load import load_diagram_text
from tests import support

ROOT = support.ROOT

BASE = """ncdc: 1
name: mm
axes: {m: 64, n: 32, k: 16}
inputs:
  A: {axes: [m, k], dtype: bf16}
  B: {axes: [k, n], dtype: bf16}
ops:
  - C = contract(A, B, over=k)
outputs: [C]
"""

# Each bad spec is the small matmul above with one thing broken.
CASES = {
    "not_a_mapping": "- 1\n- 2\n",
    "malformed_yaml": BASE.replace("axes: {m: 64, n: 32, k: 16}", "axes: {m: 64, n: 32, k: 16"),
    "unknown_top_key": BASE + "schedul: {}\n",
    "missing_outputs": BASE.replace("outputs: [C]\n", ""),
    "wrong_version": BASE.replace("ncdc: 1", "ncdc: 2"),
    "name_not_identifier": BASE.replace("name: mm", "name: my-kernel"),
    "name_reserved": BASE.replace("name: mm", "name: class"),
    "name_injection": BASE.replace("name: mm", "name: 'x; system(\"rm -rf /\")'"),
    "axis_size_zero": BASE.replace("k: 16", "k: 0"),
    "axis_size_negative": BASE.replace("m: 64", "m: -4"),
    "axis_size_text": BASE.replace("m: 64", "m: big"),
    "axis_size_float": BASE.replace("m: 64", "m: 6.5"),
    "axis_size_huge": BASE.replace("m: 64", "m: 99999999999"),
    "unknown_axis_in_input": BASE.replace("A: {axes: [m, k]", "A: {axes: [m, kk]"),
    "repeated_axis": BASE.replace("A: {axes: [m, k]", "A: {axes: [m, m]"),
    "unknown_dtype": BASE.replace(
        "A: {axes: [m, k], dtype: bf16}", "A: {axes: [m, k], dtype: bfloat16}"
    ),
    "input_unknown_key": BASE.replace(
        "A: {axes: [m, k], dtype: bf16}", "A: {axes: [m, k], dtype: bf16, layout: row}"
    ),
    "input_missing_dtype": BASE.replace("A: {axes: [m, k], dtype: bf16}", "A: {axes: [m, k]}"),
    "unknown_operation": BASE.replace("contract(A, B, over=k)", "matmul(A, B)"),
    "unparsable_op": BASE.replace("C = contract(A, B, over=k)", "C := contract(A, B)"),
    "bad_character": BASE.replace("C = contract(A, B, over=k)", "C = contract(A, B, over=k) + 1"),
    "unknown_tensor": BASE.replace("contract(A, B, over=k)", "contract(A, Bt, over=k)"),
    "contract_axis_missing": BASE.replace("over=k", "over=m"),
    "contract_ambiguous": BASE.replace("B: {axes: [k, n]", "B: {axes: [m, k, n]").replace(
        ", over=k", ""
    ),
    "wrong_operand_count": BASE.replace("contract(A, B, over=k)", "contract(A, over=k)"),
    "unknown_keyword": BASE.replace("over=k", "over=k, alpha=2"),
    "softmax_needs_over": BASE.replace(
        "  - C = contract(A, B, over=k)\n", "  - C = contract(A, B, over=k)\n  - D = softmax(C)\n"
    ).replace("outputs: [C]", "outputs: [D]"),
    "softmax_axis_not_in_tensor": BASE.replace(
        "  - C = contract(A, B, over=k)\n",
        "  - C = contract(A, B, over=k)\n  - D = softmax(C, over=k)\n",
    ).replace("outputs: [C]", "outputs: [D]"),
    "cycle": BASE.replace(
        "  - C = contract(A, B, over=k)\n", "  - C = add(D, A)\n  - D = exp(C)\n"
    ).replace("  B: {axes: [k, n], dtype: bf16}\n", ""),
    "self_cycle": BASE.replace("  - C = contract(A, B, over=k)\n", "  - C = add(C, A)\n").replace(
        "  B: {axes: [k, n], dtype: bf16}\n", ""
    ),
    "defined_twice": BASE.replace(
        "  - C = contract(A, B, over=k)\n", "  - C = contract(A, B, over=k)\n  - C = exp(C)\n"
    ),
    "unused_input": BASE.replace("inputs:\n", "inputs:\n  Z: {axes: [m], dtype: fp32}\n"),
    "dead_result": BASE.replace(
        "  - C = contract(A, B, over=k)\n", "  - C = contract(A, B, over=k)\n  - E = exp(C)\n"
    ),
    "output_not_computed": BASE.replace("outputs: [C]", "outputs: [C, D]"),
    "output_is_input": BASE.replace("outputs: [C]", "outputs: [C, A]"),
    "empty_outputs": BASE.replace("outputs: [C]", "outputs: []"),
    "duplicate_key": BASE.replace("ncdc: 1\n", "ncdc: 1\nname: again\n"),
    "alias": BASE.replace(
        "A: {axes: [m, k], dtype: bf16}", "A: &a {axes: [m, k], dtype: bf16}"
    ).replace("B: {axes: [k, n], dtype: bf16}", "B: *a"),
    "trailing_scale_not_contract": BASE.replace(
        "  - C = contract(A, B, over=k)\n", "  - D = contract(A, B, over=k)\n  - C = exp(D) * 2\n"
    ),
    "scale_not_result_axes": BASE.replace("over=k)", "over=k, scale=A)"),
    "schedule_unknown_key": BASE + "schedule: {tile: {m: 16}}\n",
    "schedule_group_and_stream": BASE + "schedule: {group: [k], stream: [k]}\n",
    "schedule_tile_too_big": BASE + "schedule: {tiles: {m: 128}}\n",
    "schedule_tile_zero": BASE + "schedule: {tiles: {m: 0}}\n",
    "schedule_deterministic_text": BASE + "schedule: {deterministic: yes please}\n",
    "materialize_output": BASE + "schedule: {materialize: [C]}\n",
    "causal_same_axes": BASE.replace(
        "  - C = contract(A, B, over=k)\n",
        "  - D = contract(A, B, over=k)\n  - C = causal(D, query=m, key=m)\n",
    ),
    "norm_weight_axes": BASE.replace(
        "  - C = contract(A, B, over=k)\n",
        "  - D = contract(A, B, over=k)\n  - C = rmsnorm(D, over=n, weight=A)\n",
    ),
    "op_not_text": BASE.replace("  - C = contract(A, B, over=k)\n", "  - [C, contract]\n"),
}

EXPECTED = {
    "not_a_mapping": "spec.yaml:1: expected a mapping of diagram keys, found a list (hint: start with `ncdc: 1` and `name:`)",
    "malformed_yaml": "spec.yaml:4: malformed YAML: expected ',' or '}', but got ':' (hint: check indentation, colons and brackets on that line)",
    "unknown_top_key": "spec.yaml:10: schedul: unknown key 'schedul'; expected one of axes, doc, inputs, name, ncdc, ops, outputs, schedule (hint: did you mean 'schedule'?)",
    "missing_outputs": "spec.yaml:1: missing key 'outputs' (hint: add `outputs:`; see docs/diagram-language.md)",
    "wrong_version": "spec.yaml:1: ncdc: expected format version 1, found 2 (hint: write `ncdc: 1`)",
    "name_not_identifier": "spec.yaml:2: name: expected a diagram name made of letters, digits and '_' starting with a letter, found 'my-kernel' (hint: e.g. `Q`, `scores`, `d_head`)",
    "name_reserved": "spec.yaml:2: name: diagram name 'class' is reserved in generated C++ (hint: e.g. 'class_')",
    "name_injection": "spec.yaml:2: name: expected a diagram name made of letters, digits and '_' starting with a letter, found 'x; system(\"rm -rf /\")' (hint: e.g. `Q`, `scores`, `d_head`)",
    "axis_size_zero": "spec.yaml:3: axes.k: expected a size from 1 to 2147483647 for 'k', found 0",
    "axis_size_negative": "spec.yaml:3: axes.m: expected a size from 1 to 2147483647 for 'm', found -4",
    "axis_size_text": "spec.yaml:3: axes.m: expected a whole number as the size of 'm', found the text 'big' (hint: e.g. `q: 4096`)",
    "axis_size_float": "spec.yaml:3: axes.m: expected a whole number as the size of 'm', found the number 6.5 (hint: e.g. `q: 4096`)",
    "axis_size_huge": "spec.yaml:3: axes.m: expected a size from 1 to 2147483647 for 'm', found 99999999999",
    "unknown_axis_in_input": "spec.yaml:5: inputs.A.axes[1]: unknown axis 'kk'; declared axes are m, n, k (hint: did you mean 'k'?)",
    "repeated_axis": "spec.yaml:5: inputs.A.axes: expected distinct axes, found ['m', 'm'] (hint: a tensor has each axis once)",
    "unknown_dtype": "spec.yaml:5: inputs.A.dtype: unknown dtype 'bfloat16'; expected one of fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int32 (hint: write 'bf16')",
    "input_unknown_key": "spec.yaml:5: inputs.A.layout: unknown key 'layout'; expected one of axes, doc, dtype, expected",
    "input_missing_dtype": "spec.yaml:5: inputs.A: missing key 'dtype' (hint: add `dtype:`; see docs/diagram-language.md)",
    "unknown_operation": "spec.yaml:8: ops[0]: unknown operation 'matmul'; expected one of abs, add, and, argmax, argmin, cast, causal, contract, cos, cummax, cummin, cumsum, div, eq, erf, exp, floor, gather, ge, gelu, gt, index, layernorm, le, log, log_softmax, logsumexp, lt, max, mean, min, mul, ne, neg, not, or, permute, recip, relu, rmsnorm, roll, rsqrt, scatter_add, shift, sigmoid, silu, sin, slice, softmax, sqrt, square, sub, sum, tanh, topk, varlen, where, window (hint: write contract(A, B, over=k): a product summed over the named axis k)",
    "unparsable_op": "spec.yaml:8: ops[0]: cannot parse 'C := contract(A, B)': expected '=', found ':' (hint: write e.g. 'C = contract(A, B, over=k)')",
    "bad_character": "spec.yaml:8: ops[0]: unexpected character '+' at column 28 of 'C = contract(A, B, over=k) + 1' (hint: operations look like 'Y = gelu(X)')",
    "unknown_tensor": "spec.yaml:8: ops[0]: unknown tensor 'Bt' in 'C = contract(A, Bt, over=k)' (hint: did you mean 'B'?)",
    "contract_axis_missing": "spec.yaml:8: ops[0]: contract over 'm', but B has axes ['k', 'n'] (hint: both operands need the axis)",
    "contract_ambiguous": "spec.yaml:8: ops[0]: contract of A and B shares axes ['m', 'k']; expected 'over=' to say which are summed (hint: e.g. contract(A, B, over=k))",
    "wrong_operand_count": "spec.yaml:8: ops[0]: contract expects 2 operand(s), found 1: 'C = contract(A, over=k)'",
    "unknown_keyword": "spec.yaml:8: ops[0]: contract has no argument 'alpha'; expected dtype, offsets, over, scale",
    "softmax_needs_over": "spec.yaml:9: ops[1]: softmax needs 'over=' (hint: e.g. P = softmax(S, over=x))",
    "softmax_axis_not_in_tensor": "spec.yaml:9: ops[1]: softmax over 'k', but C has axes ['m', 'n'] (hint: choose one of m, n)",
    "cycle": "spec.yaml:7: ops[0]: operations depend on each other in a cycle: C -> D -> C (hint: a result cannot feed its own inputs)",
    "self_cycle": "spec.yaml:7: ops[0]: operations depend on each other in a cycle: C -> C (hint: a result cannot feed its own inputs)",
    "defined_twice": "spec.yaml:9: ops[1]: 'C' is defined twice (hint: give each result its own name)",
    "unused_input": "spec.yaml:5: inputs.Z: input 'Z' is never used (hint: remove it or use it in an operation)",
    "dead_result": "spec.yaml:8: ops: result 'E' (line 9) is computed but never used (hint: list it under outputs or remove it)",
    "output_not_computed": "spec.yaml:9: outputs[1]: output 'D' is not computed by any operation; results are C (hint: add an operation that computes it)",
    "output_is_input": "spec.yaml:9: outputs[1]: output 'A' is an input; expected a computed result (hint: outputs are results of ops)",
    "empty_outputs": "spec.yaml:9: outputs: expected at least one output, found none",
    "duplicate_key": "spec.yaml:3: name: duplicate key 'name' (hint: each key may appear once)",
    "alias": "spec.yaml:5: inputs.B: YAML anchors and aliases are not supported in diagrams (hint: write the value out in full)",
    "trailing_scale_not_contract": "spec.yaml:9: ops[1]: a trailing '* 2' is only allowed on contract (hint: scale in an op of its own: mul(X, 2))",
    "scale_not_result_axes": "spec.yaml:8: ops[0]: scale A has axes ['m', 'k']; expected a scalar or axes of the result ['m', 'n'] (hint: per tensor `axes: []`, per row or column `axes: [m]`)",
    "schedule_unknown_key": "spec.yaml:10: schedule.tile: unknown key 'tile'; expected one of deterministic, group, materialize, stream, tiles (hint: did you mean 'tiles'?)",
    "schedule_group_and_stream": "spec.yaml:10: schedule: axis 'k' is both grouped and streamed (hint: an axis is either grouped or streamed)",
    "schedule_tile_too_big": "spec.yaml:10: schedule.tiles.m: tile 128 is larger than axis 'm' (64) (hint: use at most 64)",
    "schedule_tile_zero": "spec.yaml:10: schedule.tiles.m: expected a positive whole tile size, found 0",
    "schedule_deterministic_text": "spec.yaml:10: schedule.deterministic: expected true or false, found 'yes please' (hint: deterministic: true asks for sums in one order, the same bits every run)",
    "materialize_output": "spec.yaml:10: schedule.materialize[0]: 'C' is not an intermediate result, and this diagram has none (hint: materialize names intermediates, or outputs that later ops read)",
    "causal_same_axes": "spec.yaml:9: ops[1]: causal needs two different axes for query and key",
    "norm_weight_axes": "spec.yaml:9: ops[1]: weight A has axes ['m', 'k']; expected only the normalised axes ['n']",
    "op_not_text": "spec.yaml:8: ops[0]: expected an operation like 'Y = exp(X)', found a list (hint: quote it if it contains a colon)",
}


def test_table_is_complete():
    assert CASES.keys() == EXPECTED.keys()
    assert len(CASES) >= 25


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_spec_message(name):
    with pytest.raises(SpecError) as info:
        load_diagram_text(CASES[name], "spec.yaml")
    assert info.value.line() == EXPECTED[name]
    assert "\n" not in info.value.line()


def test_base_spec_is_valid():
    d = load_diagram_text(BASE)
    assert d.tensor("C").axes == ("m", "n")
    assert d.ops[0].reduced == ("k",)


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ncdc", *args], capture_output=True, text=True, cwd=cwd
    )


def test_check_library_passes():
    result = run_cli("check", "diagrams")
    assert result.returncode == 0, result.stderr
    count = len(list((ROOT / "diagrams").glob("*.yaml")))  # every library diagram builds
    assert count >= 14 and f"{count} of {count} specs valid" in result.stderr


def test_check_reports_each_bad_file_on_one_line(tmp_path):
    (tmp_path / "good.yaml").write_text(BASE)
    (tmp_path / "bad1.yaml").write_text(CASES["unknown_operation"])
    (tmp_path / "bad2.yaml").write_bytes(b"ncdc: 1\nname: \xff\n")
    result = run_cli("check", str(tmp_path))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2
    assert "unknown operation 'matmul'" in errors[0]
    assert "expected UTF-8 text, found byte 0xff" in errors[1]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["unknown_axis_in_input", "cycle", "alias", "malformed_yaml"])
def test_cli_bad_spec_is_one_line_exit_2(tmp_path, name):
    spec = tmp_path / "spec.yaml"
    spec.write_text(CASES[name])
    result = run_cli("show", str(spec))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(CASES["unknown_operation"])
    result = run_cli("show", str(spec), "--debug")
    assert result.returncode != 0
    assert "Traceback" in result.stderr
