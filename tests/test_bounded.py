"""JSON and YAML within bounds (ncdc.bounded): depth and value counts refused before any
parser recurses, numbers that no figure can be refused, one error line each."""

from __future__ import annotations

import pytest
import yaml

from ncdc import bounded
from ncdc.errors import FileError, UsageError
from tests import support


@pytest.mark.parametrize(
    ("text", "contains"),
    [
        ("[" * 65 + "]" * 65, "deeper than 64"),
        ('{"a": ' * 200_000 + "1" + "}" * 200_000, "deeper than 64"),
        ("[" + "0," * 1_000_001 + "0]", "more than 1000000 values"),
        ("1" + "0" * 400, "at most 30 digits"),
        ("[1e999]", "expected a finite number, found 1e999"),
        ('{"t": NaN}', "found NaN"),
        ("[-Infinity]", "found -Infinity"),
        ('{"a": 1', "not valid JSON"),
    ],
    ids=["65-deep", "200k-deep", "1M-values", "10**400", "1e999", "NaN", "-inf", "cut"],
)
def test_hostile_json_is_one_error(text, contains):
    with pytest.raises(FileError, match=contains) as e:
        bounded.parse_json(text, "x.json")
    assert e.value.line().startswith("x.json: ")


def test_brackets_inside_strings_are_not_nesting():
    text = '{"s": "' + "[" * 1000 + '", "t": "\\"]]"}'
    assert bounded.parse_json(text, "x.json") == {"s": "[" * 1000, "t": '"]]'}
    assert bounded.json_shape(text) == (1, 3)


def test_the_callers_error_class_is_raised(tmp_path):
    path = tmp_path / "b.json"
    path.write_text("[1e999]")
    with pytest.raises(UsageError, match="b.json: expected a finite number"):
        bounded.read_json(path, 1000, error=UsageError)
    path.write_bytes(b'["\xff"]')
    with pytest.raises(UsageError, match="expected UTF-8 text, found byte 0xff"):
        bounded.read_json(path, 1000, error=UsageError)


def test_the_yaml_composer_stops_at_the_limit(monkeypatch):
    composed = support.count_calls(monkeypatch, yaml.composer.Composer, "compose_node")
    with pytest.raises(bounded.YamlLimit, match="nesting deeper than 32 levels"):
        yaml.load("a: " + "[" * 100_000 + "]" * 100_000, Loader=bounded.BoundedLoader)
    assert composed[0] <= 34  # the root, the key, and 32 levels


def test_the_yaml_composer_counts_its_nodes(monkeypatch):
    monkeypatch.setattr(bounded.BoundedLoader, "max_nodes", 100)
    with pytest.raises(bounded.YamlLimit, match="more than 100 values"):
        yaml.load("[" + "1, " * 200 + "1]", Loader=bounded.BoundedLoader)
    assert yaml.load("a: [1, 2]", Loader=bounded.BoundedLoader) == {"a": [1, 2]}
