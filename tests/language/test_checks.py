"""The small checks of reading a spec (ncdc.language.checks): one line each, with the YAML path."""

from __future__ import annotations

import pytest

from ncdc.errors import SpecError
from ncdc.language.checks import Checks
from ncdc.language.yamlsrc import read_yaml_text


@pytest.fixture
def checks() -> Checks:
    return Checks(read_yaml_text("axes: {m: 4}\nvalue: 1\n", "t.yaml"))


@pytest.mark.parametrize("value", [True, float("inf"), float("nan"), 10**400, "1"])
def test_a_number_is_finite_and_not_a_boolean(checks: Checks, value: object) -> None:
    with pytest.raises(SpecError, match="expected a (finite )?number"):
        checks.number(value, ("value",), "eps")


@pytest.mark.parametrize("value", [1e308, -3.5e38, 2**200])
def test_a_constant_beyond_fp32_is_refused(checks: Checks, value: float) -> None:
    # Issue 31: a constant of 1e308 passed `check`, and every output it touched was inf.
    with pytest.raises(SpecError, match="beyond the range of fp32") as e:
        checks.number(value, ("value",), "operand")
    assert "hint: scale the inputs" in e.value.line()
    assert checks.number(3.4e38, ("value",), "operand") == 3.4e38
    # an operand that may be infinite (a mask's where(K, S, -inf)) stays allowed
    assert checks.number(float("-inf"), ("value",), "operand", infinite=True) == float("-inf")


def test_an_unknown_axis_or_dtype_names_the_choices(checks: Checks) -> None:
    with pytest.raises(SpecError, match="declared axes are m") as e:
        checks.known_axis("n", {"m": 4}, ("axes",))
    assert e.value.where == "t.yaml:1: axes"
    with pytest.raises(SpecError, match="did you mean 'bf16'"):
        checks.dtype("bf61", ("value",))
