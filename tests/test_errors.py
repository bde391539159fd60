"""Errors as one line with the command line's exit codes (ncdc.errors)."""

from __future__ import annotations

from ncdc import errors


def test_an_error_is_one_line_with_its_place_and_hint() -> None:
    e = errors.SpecError("bad\nthing", where="a.yaml:3", hint="do\nthis")
    assert e.line() == "a.yaml:3: bad thing (hint: do this)"
    assert e.exit_code == errors.EXIT_BAD_INPUT
    assert errors.CompileError("x").exit_code == errors.EXIT_COMPILE_ERROR
    assert errors.NoGpuError("x").exit_code == errors.EXIT_NO_GPU
    assert errors.CheckFailed("x").exit_code == errors.EXIT_CHECK_FAILED


def test_an_excerpt_never_quotes_more_than_a_line() -> None:
    assert errors.excerpt("secret\nmore secrets") == "secret ..."
    assert errors.excerpt("x" * 100, 10) == "x" * 10 + "..."
