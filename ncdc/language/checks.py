"""The small checks every part of reading a spec makes: a YAML path's keys, names, lists,
axes, dtypes and numbers, each failing with one `SpecError` that names the file, the line,
the YAML path, what was expected and what was found, and a hint."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ncdc.errors import SpecError, excerpt
from ncdc.language.dtypes import COMPUTE_DTYPE, DTYPES
from ncdc.language.hints import dtype_hint
from ncdc.language.names import check_identifier
from ncdc.language.text import describe, did_you_mean, listing, shown
from ncdc.language.yamlsrc import YamlDoc, YamlPath


class Checks:
    """The checks on one YAML document (`doc`), each raising at the first problem."""

    def __init__(self, doc: YamlDoc):
        self.doc = doc

    def fail(self, path: YamlPath, message: str, hint: str | None = None) -> SpecError:
        return SpecError(message, where=self.doc.where(path), hint=hint)

    def keys(self, data: dict, path: YamlPath, allowed: set[str], required: Iterable[str]) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(
                    path + (key,),
                    f"unknown key '{excerpt(key)}'; expected one of {listing(sorted(allowed))}",
                    did_you_mean(key, allowed),
                )
        for key in required:
            if key not in data:
                raise self.fail(
                    path, f"missing key '{key}'", f"add `{key}:`; see docs/diagram-language.md"
                )

    def name(self, value: Any, path: YamlPath, what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(
                path,
                f"expected a {what} (an identifier), found {describe(value)}",
                self.doc.quote_hint(path),  # `no` read as False explains itself
            )
        check_identifier(value, what, self.doc.where(path))
        return value

    def mapping(self, value: Any, path: YamlPath, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping of {what}, found {describe(value)}")
        return value

    def name_list(self, value: Any, path: YamlPath, what: str) -> list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of {what}, found {describe(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(
                    path + (i,),
                    f"expected a name in this list of {what}, found {describe(item)}",
                    self.doc.quote_hint(path + (i,)),
                )
        return value

    def known_axis(self, axis: str, axes: Mapping[str, int], path: YamlPath) -> str:
        if axis not in axes:
            raise self.fail(
                path,
                f"unknown axis '{axis}'; declared axes are {listing(axes)}",
                did_you_mean(axis, axes) or "declare it under `axes:`",
            )
        return axis

    # -- sections --------------------------------------------------------------------

    def dtype(self, value: Any, path: YamlPath) -> str:
        if not isinstance(value, str) or value not in DTYPES:
            raise self.fail(
                path,
                f"unknown dtype {shown(value)}; expected one of {listing(DTYPES)}",
                dtype_hint(str(value)) or did_you_mean(str(value), DTYPES),
            )
        return str(value)

    def number(self, value: Any, path: YamlPath, what: str, infinite: bool = False) -> float:
        """A number from the spec: finite, or also `inf` and `-inf` where `infinite` (an
        operand of an elementwise operation: a mask's `where(K, S, -inf)`)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected a number for {what}, found {shown(value)}")
        if isinstance(value, int) and abs(value) > 2**1023:  # float() would overflow
            found = f"a whole number of {value.bit_length()} bits"
            raise self.fail(path, f"expected a finite number for {what}, found {found}")
        if value != value or (not infinite and value in (float("inf"), float("-inf"))):
            raise self.fail(path, f"expected a finite number for {what}, found {value}")
        # A constant becomes a float literal (ncdc.families.codegen.float_literal): one beyond
        # fp32 is an infinity in the kernel, and every output it touches inf.
        largest = DTYPES[COMPUTE_DTYPE].max_value
        if abs(value) > largest and abs(value) != float("inf"):  # an allowed infinity stays one
            raise self.fail(
                path,
                f"{what} {value:g} is beyond the range of {COMPUTE_DTYPE}, the type kernels "
                f"compute in (largest {largest:.8g})",
                "scale the inputs or split the constant between two operations",
            )
        return float(value)
