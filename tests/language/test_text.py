"""How errors show what they found and suggest what was meant (ncdc.language.text), and the
checks that fail with them (ncdc.language.checks)."""

from __future__ import annotations

from ncdc.language.text import describe, did_you_mean, listing, shown


def test_values_are_described_and_shown_in_one_short_line() -> None:
    assert describe(None) == "nothing" and describe(True) == "the boolean True"
    assert describe(3) == "the number 3" and describe([1]) == "a list"
    assert shown("a\nb" * 50).count("\n") == 0 and len(shown("x" * 500)) < 80
    assert listing(["m", "n"]) == "m, n"


def test_did_you_mean_suggests_the_closest_name_or_nothing() -> None:
    assert did_you_mean("sofmax", ["softmax", "sum"]) == "did you mean 'softmax'?"
    assert did_you_mean("zzz", ["softmax"]) is None
