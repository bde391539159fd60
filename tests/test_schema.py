"""Every --format json output has a JSON Schema shipped in ncdc/schemas/ and conforms to it;
the validator (a small subset of JSON Schema, no dependency) rejects what it should."""

from __future__ import annotations

import json

import pytest

from ncdc.schema import SCHEMA_DIR, SCHEMAS, load_schema, validate
from tests.support import MATMUL, ROOT, SOFTMAX, ncdc

CASES = {
    "show": (("show", SOFTMAX), "graph"),
    "cost": (("cost", MATMUL), "cost"),
    "cost DIR": (("cost", str(ROOT / "diagrams")), "baseline"),
    "hardware NAME": (("hardware", "h200"), "hardware"),
    "check": (("check", SOFTMAX), "check"),
    "cache info": (("cache", "info"), "cache"),
    "run": (("run", SOFTMAX, "--set", "m=3", "--set", "n=65"), "run"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_output_follows_its_schema(case, tmp_path):
    args, name = CASES[case]
    assert SCHEMAS[case] == name
    result = ncdc(*args, "--format", "json", env={"NCDC_CACHE": str(tmp_path / "c")})
    assert result.returncode == 0, result.stderr
    assert validate(json.loads(result.stdout), load_schema(name)) == []


def test_hardware_list_items_follow_the_hardware_schema():
    result = ncdc("hardware", "--format", "json")
    profiles = json.loads(result.stdout)
    assert len(profiles) > 1
    for p in profiles:
        assert validate(p, load_schema("hardware")) == []


def test_compile_json_follows_the_kernel_schema(tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC wheels not installed")
    out = tmp_path / "out"
    result = ncdc("compile", SOFTMAX, "--arch", "sm_90a", "-o", str(out), "--format", "json")
    assert result.returncode == 0, result.stderr
    schema = load_schema("kernel")
    assert validate(json.loads(result.stdout), schema) == []
    assert validate(json.loads((out / "softmax.json").read_text()), schema) == []


def test_every_command_schema_is_shipped_and_well_formed():
    shipped = {p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json")}
    assert set(SCHEMAS.values()) == shipped
    for name in shipped:
        schema = load_schema(name)
        assert schema["type"] == "object" and "format" in schema["properties"] or name == "hardware"


def test_the_validator_catches_what_breaks_a_schema():
    run = load_schema("run")
    good = json.loads(
        ncdc("run", SOFTMAX, "--set", "m=2", "--set", "n=33", "--format", "json").stdout
    )
    assert validate(good, run) == []
    broken = {**good, "ok": "yes"}
    assert validate(broken, run) == ["$.ok: expected boolean, found string"]
    missing = {k: v for k, v in good.items() if k != "traffic"}
    assert validate(missing, run) == ["$: missing required property 'traffic'"]
    wrong_format = {**good, "format": "ncdc.run/2"}
    assert "expected 'ncdc.run/1'" in validate(wrong_format, run)[0]
    negative = {**good, "outputs": [{**good["outputs"][0], "unexpected_nan": -1}]}
    assert validate(negative, run) == ["$.outputs[0].unexpected_nan: expected at least 0, found -1"]
    assert validate(True, {"type": "integer"}) == ["$: expected integer, found boolean"]
    assert validate({"a": 1}, {"type": "object", "additionalProperties": False}) == [
        "$: unexpected property 'a'"
    ]
    assert validate("cuda", {"enum": ["cpu"]}) == ["$: expected one of ['cpu'], found 'cuda'"]
