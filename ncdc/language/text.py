"""How an error shows what it found and suggests what was meant."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from ncdc.errors import excerpt


def describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {shown(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def shown(value: Any) -> str:
    """A value as an error quotes it: its repr, one line, cut short (see `excerpt`)."""
    return excerpt(repr(value))


def listing(names: Iterable[str]) -> str:
    return ", ".join(names)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A hint naming the choice `word` was likely meant to be (one that differs only in
    case first), or None.

        >>> did_you_mean("b", ["A", "B"]), did_you_mean("sofmax", ["softmax"])
        ("did you mean 'B'?", "did you mean 'softmax'?")
    """
    choices = list(choices)
    same = [c for c in choices if c.lower() == word.lower()]
    match = same or difflib.get_close_matches(word, choices, n=1)
    return f"did you mean '{match[0]}'?" if match else None
