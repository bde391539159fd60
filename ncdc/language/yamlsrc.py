"""Safe YAML reading that remembers where every value came from.

`yaml.safe_load` forgets line numbers, accepts duplicate keys and expands aliases, which
lets a few lines of "billion laughs" fill memory. Diagrams need none of that, so we walk
the composed node tree ourselves: plain dicts, lists and scalars come out, plus a map from
each YAML path to its line.

    >>> doc = read_yaml_text("a:\\n  b: [1, 2]\\n", "x.yaml")
    >>> doc.data, doc.line(("a", "b", 1))
    ({'a': {'b': [1, 2]}}, 2)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ncdc.bounded import BoundedLoader, YamlLimit
from ncdc.errors import SpecError, excerpt
from ncdc.files import read_regular

MAX_BYTES = 1 << 20  # a diagram is a few hundred lines; a megabyte is already absurd

YamlPath = tuple[str | int, ...]

_CONSTRUCTOR = yaml.constructor.SafeConstructor()


@dataclass(frozen=True)
class YamlDoc:
    """Data read from one YAML source, with the line of each path (1-based)."""

    data: Any
    source: str
    lines: dict[YamlPath, int] = field(default_factory=dict)
    spans: dict[YamlPath, tuple[int, int]] = field(default_factory=dict)
    text: str = ""
    # Plain words YAML 1.1 reads as a boolean or null (`no`, `on`, `NULL`, `~`), by path:
    # where a name was expected, the error says to quote them.
    special: dict[YamlPath, str] = field(default_factory=dict)

    def quote_hint(self, path: YamlPath) -> str | None:
        """ "quote it" when the value at `path` is a word YAML read as a boolean or null."""
        word = self.special.get(path)
        if word is None:
            return None
        return f"YAML reads the bare word {word} as {_special_kind(word)}; quote it: '{word}'"

    def raw(self, path: YamlPath) -> str:
        """The source text of the value at `path`, as written.

        An operation such as `- P = softmax(S, over: x)` is read by YAML as a one-key
        mapping because of its ': '; the raw text gives the line back as the user wrote it.
        """
        start, end = self.spans[path]
        return self.text[start:end]

    def line(self, path: YamlPath) -> int:
        """The line of `path`, or of its closest ancestor that has one."""
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 1)

    def where(self, path: YamlPath) -> str:
        """`file:line: dotted.path` for error messages."""
        dotted = format_path(path)
        loc = f"{self.source}:{self.line(path)}"
        return f"{loc}: {dotted}" if dotted else loc


def format_path(path: YamlPath) -> str:
    """('inputs', 'A', 'axes', 1) -> 'inputs.A.axes[1]'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = excerpt(part, 40)  # a key may be a whole line of whatever the file is
            out += f".{part}" if out else part
    return out


def read_yaml_file(path: Path) -> YamlDoc:
    """Read a YAML file; unreadable, non-UTF-8 or oversized files are SpecErrors.

    Only a regular file is read (a FIFO would hang, `/dev/zero` never ends), and its size
    is checked before reading: the open does not block and at most MAX_BYTES are read.
    """
    try:
        raw = _read_regular(path)
    except FileNotFoundError:
        raise SpecError(
            "no such file", where=str(path), hint="check the path; `ncdc check DIR` finds specs"
        ) from None
    except OSError as e:
        raise SpecError(f"cannot read the file: {e.strerror}", where=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(
            f"expected UTF-8 text, found byte 0x{raw[e.start]:02x} at offset {e.start}",
            where=str(path),
            hint="save the file as UTF-8",
        ) from None
    return read_yaml_text(text, str(path))


def _read_regular(path: Path) -> bytes:
    """The bytes of `path` if it is a regular file of at most MAX_BYTES, else SpecError."""
    return read_regular(
        path, MAX_BYTES, what="a YAML file", noun="a diagram", error=SpecError,
        hint="name a spec file (a symbolic link to one is fine)",
    )  # fmt: skip


def read_yaml_text(text: str, source: str = "<string>") -> YamlDoc:
    """Parse YAML text into plain data plus line numbers (see the module docstring)."""
    try:
        root = yaml.compose(text, Loader=BoundedLoader)
    except YamlLimit as e:  # refused before PyYAML's composer recursed any deeper
        line = e.problem_mark.line + 1 if e.problem_mark else 1
        raise SpecError(str(e.problem), where=f"{source}:{line}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        raise SpecError(
            f"malformed YAML: {excerpt(str(e.problem or e.context))}",
            where=f"{source}:{line}",
            hint="check indentation, colons and brackets on that line",
        ) from None
    except yaml.YAMLError as e:
        raise SpecError(f"malformed YAML: {e}", where=source) from None
    lines: dict[YamlPath, int] = {}
    spans: dict[YamlPath, tuple[int, int]] = {}
    special: dict[YamlPath, str] = {}
    walk = _Walk(lines, spans, special, source, set())
    data = _convert(root, (), walk) if root is not None else None
    return YamlDoc(data=data, source=source, lines=lines, spans=spans, text=text, special=special)


@dataclass(frozen=True)
class _Walk:
    """What `_convert` fills in while it walks one document."""

    lines: dict[YamlPath, int]
    spans: dict[YamlPath, tuple[int, int]]
    special: dict[YamlPath, str]
    source: str
    seen: set[int]


_BOOL_TAG, _NULL_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9]*)")


def _special_kind(word: str) -> str:
    return "nothing (null)" if word in ("~", "") or word.lower() == "null" else "a boolean"


def _convert(node: yaml.Node, path: YamlPath, walk: _Walk) -> Any:
    lines, spans, source, seen = walk.lines, walk.spans, walk.source, walk.seen
    where = f"{source}:{node.start_mark.line + 1}"
    if id(node) in seen:
        raise SpecError(
            "YAML anchors and aliases are not supported in diagrams",
            where=f"{where}: {format_path(path)}",
            hint="write the value out in full",
        )
    lines[path] = node.start_mark.line + 1
    spans[path] = (node.start_mark.index, node.end_mark.index)
    if isinstance(node, yaml.ScalarNode):
        if node.style is None and node.tag in (_BOOL_TAG, _NULL_TAG):
            walk.special[path] = node.value or "~"
        return _scalar(node, where, path)
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        return [_convert(n, path + (i,), walk) for i, n in enumerate(node.value)]
    assert isinstance(node, yaml.MappingNode)
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _scalar(key_node, where, path) if isinstance(key_node, yaml.ScalarNode) else None
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise SpecError(
                "YAML merge keys (<<) are not supported", where=f"{where}: {format_path(path)}"
            )
        if not isinstance(key, str):
            word = getattr(key_node, "value", "")
            special = key_node.tag in (_BOOL_TAG, _NULL_TAG) and key_node.style is None
            raise SpecError(
                f"expected a name as mapping key, found {excerpt(repr(key))}",
                where=f"{source}:{key_node.start_mark.line + 1}: {format_path(path)}",
                hint=(
                    f"YAML reads the bare word {word or '~'} as {_special_kind(word)}; "
                    f"quote it: '{word}'"
                    if special
                    else None
                ),
            )
        if key in out:
            raise SpecError(
                f"duplicate key '{key}'",
                where=f"{source}:{key_node.start_mark.line + 1}: {format_path(path + (key,))}",
                hint="each key may appear once",
            )
        out[key] = _convert(value_node, path + (key,), walk)
    return out


def _scalar(node: yaml.ScalarNode, where: str, path: YamlPath) -> Any:
    _check_number(node, where, path)
    try:
        return _CONSTRUCTOR.construct_object(node, deep=True)
    except Exception as e:  # noqa: BLE001 - text from a spec: no way of failing may escape
        # PyYAML's own constructors trip over explicit tags in their own ways (`!!float`
        # with no value is an IndexError inside it, `!!bool maybe` a KeyError): every way
        # a scalar fails to read is this one line
        raise SpecError(
            f"cannot read the value {excerpt(repr(node.value))}: "
            f"{excerpt(str(getattr(e, 'problem', None) or e))}",
            where=f"{where}: {format_path(path)}",
        ) from None


def _check_number(node: yaml.ScalarNode, where: str, path: YamlPath) -> None:
    """Refuse YAML 1.1's surprising numbers: `010` is 8, `0x10` 16, `1:30` 90, `1_000`
    1000. An integer is written in plain decimal; a quoted value is text, as written."""
    if node.style is not None:
        return
    odd_int = node.tag == _INT_TAG and not _DECIMAL.fullmatch(node.value)
    odd_float = node.tag == _FLOAT_TAG and (":" in node.value or "_" in node.value)
    if odd_int or odd_float:
        raise SpecError(
            f"expected a plain decimal number, found {excerpt(node.value)} (YAML 1.1 reads "
            "leading zeros as octal, 0x as hex, 1:30 as base 60 and drops underscores)",
            where=f"{where}: {format_path(path)}",
            hint="write the number in plain decimal, e.g. 4096, or quote it if it is text",
        )
