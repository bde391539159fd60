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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ncdc.errors import SpecError

MAX_DEPTH = 32
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
            out += f".{part}" if out else str(part)
    return out


def read_yaml_file(path: Path) -> YamlDoc:
    """Read a YAML file; unreadable, non-UTF-8 or oversized files are SpecErrors."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(
            "no such file", where=str(path), hint="check the path; `ncdc check DIR` finds specs"
        ) from None
    except IsADirectoryError:
        raise SpecError("expected a YAML file, found a directory", where=str(path)) from None
    except OSError as e:
        raise SpecError(f"cannot read the file: {e.strerror}", where=str(path)) from None
    if len(raw) > MAX_BYTES:
        raise SpecError(
            f"file is {len(raw)} bytes; expected a diagram under {MAX_BYTES} bytes",
            where=str(path),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(
            f"expected UTF-8 text, found byte 0x{raw[e.start]:02x} at offset {e.start}",
            where=str(path),
            hint="save the file as UTF-8",
        ) from None
    return read_yaml_text(text, str(path))


def read_yaml_text(text: str, source: str = "<string>") -> YamlDoc:
    """Parse YAML text into plain data plus line numbers (see the module docstring)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        raise SpecError(
            f"malformed YAML: {e.problem or e.context}",
            where=f"{source}:{line}",
            hint="check indentation, colons and brackets on that line",
        ) from None
    except yaml.YAMLError as e:
        raise SpecError(f"malformed YAML: {e}", where=source) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise SpecError(f"nesting deeper than {MAX_DEPTH} levels", where=source) from None
    lines: dict[YamlPath, int] = {}
    spans: dict[YamlPath, tuple[int, int]] = {}
    data = _convert(root, (), lines, spans, source, set()) if root is not None else None
    return YamlDoc(data=data, source=source, lines=lines, spans=spans, text=text)


def _convert(
    node: yaml.Node, path: YamlPath, lines: dict, spans: dict, source: str, seen: set[int]
) -> Any:
    where = f"{source}:{node.start_mark.line + 1}"
    if id(node) in seen:
        raise SpecError(
            "YAML anchors and aliases are not supported in diagrams",
            where=f"{where}: {format_path(path)}",
            hint="write the value out in full",
        )
    if len(path) > MAX_DEPTH:
        raise SpecError(f"nesting deeper than {MAX_DEPTH} levels", where=where)
    lines[path] = node.start_mark.line + 1
    spans[path] = (node.start_mark.index, node.end_mark.index)
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node, where, path)
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        return [
            _convert(n, path + (i,), lines, spans, source, seen) for i, n in enumerate(node.value)
        ]
    assert isinstance(node, yaml.MappingNode)
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _scalar(key_node, where, path) if isinstance(key_node, yaml.ScalarNode) else None
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise SpecError(
                "YAML merge keys (<<) are not supported", where=f"{where}: {format_path(path)}"
            )
        if not isinstance(key, str):
            raise SpecError(
                f"expected a name as mapping key, found {key!r}",
                where=f"{source}:{key_node.start_mark.line + 1}: {format_path(path)}",
            )
        if key in out:
            raise SpecError(
                f"duplicate key '{key}'",
                where=f"{source}:{key_node.start_mark.line + 1}: {format_path(path + (key,))}",
                hint="each key may appear once",
            )
        out[key] = _convert(value_node, path + (key,), lines, spans, source, seen)
    return out


def _scalar(node: yaml.ScalarNode, where: str, path: YamlPath) -> Any:
    try:
        return _CONSTRUCTOR.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, OverflowError) as e:
        raise SpecError(
            f"cannot read the value {node.value!r}: {getattr(e, 'problem', None) or e}",
            where=f"{where}: {format_path(path)}",
        ) from None
