"""JSON and YAML parsed within bounds: the nesting depth and the number of values are
checked before any parser recurses, and a number must be one a figure can be.

Python's `json` and PyYAML's composer recurse once per nesting level, so a file of 200,000
`[` ends in a RecursionError (or, in C, a crash) after seconds of work; `10**400` parses to
an integer no float holds and `1e400` to infinity. Here a JSON text's depth is counted
from its brackets (outside strings) before it is parsed, and PyYAML's composer counts its
own depth as it descends (`BoundedLoader`), so a deep document is refused after reading
only as many events as the limit. Each refusal is one `error` (an NcdcError subclass the
caller picks) naming the file.

    >>> parse_json('{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    >>> parse_json("[" * 100 + "]" * 100, "deep.json")
    Traceback (most recent call last):
    ...
    ncdc.errors.FileError: deep.json: JSON nested deeper than 64 levels
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from ncdc.errors import FileError, NcdcError, excerpt
from ncdc.files import read_regular

JSON_DEPTH = 64  # ncdc's own JSON files nest 6 levels deep at most
JSON_VALUES = 1_000_000
JSON_DIGITS = 30  # an integer of more digits (10**30 is 2**100) is no count ncdc writes
YAML_DEPTH = 32  # the longest YAML path (a top-level key's value is at depth 1)
YAML_NODES = 200_000

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class _Refused(Exception):
    """A number the parser's hooks refuse (turned into the caller's error)."""


def _integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > JSON_DIGITS:
        raise _Refused(f"expected a whole number of at most {JSON_DIGITS} digits, found one "
                       f"of {digits}")  # fmt: skip
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"expected a finite number, found {excerpt(text, 30)}")
    return value


def _constant(text: str) -> float:
    raise _Refused(f"expected a number, found {text} (not JSON)")


def json_shape(text: str) -> tuple[int, int]:
    """(deepest nesting, number of containers and separators) of a JSON text, counted
    from its brackets and commas outside strings, without parsing it.

        >>> json_shape('{"a": [1, "]]", [2]]}')
        (3, 8)
    """
    bare = _STRING.sub('""', text)
    brackets = _NOT_BRACKET.sub("", bare)
    deepest = max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)
    return deepest, len(brackets) + bare.count(",")


def parse_json(
    text: str, source: str, *, error: type[NcdcError] = FileError, depth: int = JSON_DEPTH
) -> Any:
    """`json.loads(text)`, refused (as `error`) when nested deeper than `depth`, holding
    more than JSON_VALUES values, or holding NaN, an infinity, a float beyond float64 or an
    integer of more than JSON_DIGITS digits."""
    deepest, values = json_shape(text)
    if deepest > depth:
        raise error(f"JSON nested deeper than {depth} levels", where=source)
    if values > JSON_VALUES:
        raise error(f"JSON of more than {JSON_VALUES} values", where=source)
    try:
        return json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except _Refused as e:
        raise error(str(e), where=source) from None
    except json.JSONDecodeError as e:
        raise error(f"not valid JSON: {e.msg} (line {e.lineno})", where=source) from None
    except RecursionError:  # not reached below JSON_DEPTH; kept so no traceback escapes
        raise error(f"JSON nested deeper than {depth} levels", where=source) from None


def read_json(
    path: Path, limit: int, *, what: str = "a JSON file", error: type[NcdcError] = FileError
) -> Any:
    """A JSON file read with `read_regular` (regular, at most `limit` bytes), UTF-8, and
    parsed by `parse_json`. OSError (missing, unreadable) is the caller's to report."""
    raw = read_regular(path, limit, what=what, error=error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"expected UTF-8 text, found byte 0x{raw[e.start]:02x} at offset {e.start}",
            where=str(path),
        ) from None
    return parse_json(text, str(path), error=error)


class YamlLimit(yaml.MarkedYAMLError):
    """A YAML document nested deeper, or holding more nodes, than its loader allows."""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose composer refuses a node deeper than `max_depth` (the
    root is depth 0, a top-level key's value depth 1) or the `max_nodes`-th node, before
    it descends into it: the composer is PyYAML's only recursive stage (its scanner and
    parser keep explicit stacks)."""

    max_depth = YAML_DEPTH
    max_nodes = YAML_NODES

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = -1  # the root is composed at depth 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > self.max_depth or self._nodes > self.max_nodes:
                what = (
                    f"nesting deeper than {self.max_depth} levels"
                    if self._depth > self.max_depth
                    else f"more than {self.max_nodes} values"
                )
                raise YamlLimit(problem=what, problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
