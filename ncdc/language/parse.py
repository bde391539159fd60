"""The one-line operation syntax:  OUT = fn(arg, arg, key=value, key=[a, b]) [* number]

`key: value` is read too, as in DESIGN.md's sketch; YAML takes a line with two ': ' as
malformed unless quoted, so the diagrams use '='. Parsing gives a statement; what it means
(its operation, shapes and types) is the inference's (ncdc.language.infer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ncdc.errors import SpecError, excerpt
from ncdc.language.hints import infix_hint

_TOKEN = re.compile(
    r"\s*(?:(?P<num>[-+]?(?:(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|inf(?!\w)))"
    r"|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<punct>[=(),:\[\]*]))"
)


_TENSOR_KEYWORDS = ("weight", "bias", "scale", "lengths")  # keyword arguments that name tensors


@dataclass(frozen=True)
class Statement:
    out: str
    fn: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    trailing_scale: float | None
    text: str

    def names(self) -> list[str]:
        """Tensor names this statement reads (not axis or dtype names: `over=m`, `to=bf16`)."""
        if self.fn == "index":
            return []  # its operand is an axis
        found = [a for a in self.args if isinstance(a, str)]
        for key, v in self.kwargs.items():
            if key not in _TENSOR_KEYWORDS:
                continue
            found += (
                [v]
                if isinstance(v, str)
                else [x for x in v if isinstance(x, str)]
                if isinstance(v, list)
                else []
            )
        return found


def parse_op_text(text: str, where: str) -> Statement:
    """Parse one operation line; errors say what was expected at which character."""
    tokens = _tokenize(text, where)
    pos = 0

    def fail(expected: str) -> SpecError:
        found = f"'{tokens[pos][1]}'" if pos < len(tokens) else "the end"
        return SpecError(
            f"cannot parse '{text.strip()}': expected {expected}, found {found}",
            where=where,
            hint=infix_hint(text) or "write e.g. 'C = contract(A, B, over=k)'",
        )

    def take(kind: str, value: str | None = None) -> str:
        nonlocal pos
        if pos < len(tokens) and tokens[pos][0] == kind and value in (None, tokens[pos][1]):
            pos += 1
            return tokens[pos - 1][1]
        raise fail(f"'{value}'" if value else {"name": "a name", "num": "a number"}[kind])

    def peek(value: str) -> bool:
        return pos < len(tokens) and tokens[pos][1] == value

    def value() -> Any:
        nonlocal pos
        if pos < len(tokens) and tokens[pos][0] == "num":
            return _number(take("num"))
        if peek("["):
            take("punct", "[")
            items = [] if peek("]") else [value()]
            while peek(","):
                take("punct", ",")
                items.append(value())
            take("punct", "]")
            return items
        return take("name")

    out = take("name")
    take("punct", "=")
    fn = take("name")
    take("punct", "(")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    while not peek(")"):
        if args or kwargs:
            take("punct", ",")
        if pos + 1 < len(tokens) and tokens[pos][0] == "name" and tokens[pos + 1][1] in "=:":
            key = take("name")
            take("punct", tokens[pos][1])
            if key in kwargs:
                raise SpecError(f"argument '{key}' given twice in '{text.strip()}'", where=where)
            kwargs[key] = value()
        elif kwargs:
            raise fail("'key=value' (positional operands come first)")
        else:
            args.append(value())
    take("punct", ")")
    trailing = None
    if peek("*"):
        take("punct", "*")
        trailing = _number(take("num"))
    if pos != len(tokens):
        raise fail("the end of the operation")
    # Without its comment the text holds only the tokens read above, folded onto one line:
    # it reaches comments in generated C++, where a line break or a '\\' would end them.
    return Statement(out, fn, tuple(args), kwargs, trailing, " ".join(_code(text).split()))


def _code(text: str) -> str:
    """An operation's text without its '# comment'."""
    return text.split("#", 1)[0].rstrip()


def _tokenize(text: str, where: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    text = _code(text)
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            pos += len(text[pos:]) - len(text[pos:].lstrip())
            raise SpecError(
                f"unexpected character {text[pos]!r} at column {pos + 1} of "
                f"'{excerpt(text.strip(), 80)}'",
                where=where,
                hint=infix_hint(text) or "operations look like 'Y = gelu(X)'",
            )
        kind = m.lastgroup or "punct"
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def _number(text: str) -> float | int:
    """A number token: whole numbers stay ints; `inf` and `-inf` (a mask's value) are floats."""
    return int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
