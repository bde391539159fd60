"""JSON Schemas of every `--format json` output, and a small validator for the subset of
JSON Schema they use (no dependency): `type` (one or a list), `const`, `enum`,
`properties`, `required`, `additionalProperties` (a schema or false), `items` and
`minimum`. Other keywords (`$schema`, `$id`, `title`, `description`) are annotations.

    >>> validate({"format": "ncdc.check/1"}, {"type": "object", "required": ["ok"]})
    ["$: missing required property 'ok'"]
    >>> validate([1, "x"], {"type": "array", "items": {"type": "integer"}})
    ['$[1]: expected integer, found string']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

# Which schema each command's JSON follows (docs/errors.md lists them too).
SCHEMAS = {
    "show": "graph", "cost": "cost", "cost DIR": "baseline", "compile": "kernel",
    "run": "run", "bench": "bench", "tune": "tune", "hardware NAME": "hardware",
    "check": "check", "cache info": "cache",
}  # fmt: skip

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}  # fmt: skip


def load_schema(name: str) -> dict[str, Any]:
    """The schema `ncdc/schemas/<name>.schema.json` ("run", "cost", ...)."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


def validate(instance: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every way `instance` breaks `schema`, one message each; empty when it conforms."""
    errors = _type_errors(instance, schema, path)
    if errors:
        return errors
    if "const" in schema and instance != schema["const"]:
        errors.append(f"{path}: expected {schema['const']!r}, found {instance!r}")
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path}: expected one of {schema['enum']}, found {instance!r}")
    if "minimum" in schema and _is_number(instance) and instance < schema["minimum"]:
        errors.append(f"{path}: expected at least {schema['minimum']}, found {instance}")
    if isinstance(instance, dict):
        errors += _object_errors(instance, schema, path)
    if isinstance(instance, list) and "items" in schema:
        for i, item in enumerate(instance):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _type_errors(instance: Any, schema: dict[str, Any], path: str) -> list[str]:
    wanted = schema.get("type")
    if wanted is None:
        return []
    names = [wanted] if isinstance(wanted, str) else list(wanted)
    for name in names:
        if isinstance(instance, _TYPES[name]) and not (
            isinstance(instance, bool) and name in ("integer", "number")
        ):
            return []
    return [f"{path}: expected {' or '.join(names)}, found {_json_type(instance)}"]


def _json_type(x: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if isinstance(x, _TYPES[name]) and not (isinstance(x, bool) and name != "boolean"):
            return name
    return type(x).__name__


def _object_errors(instance: dict, schema: dict[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}: missing required property '{key}'"
        for key in schema.get("required", ())
        if key not in instance
    ]
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, value in instance.items():
        where = f"{path}.{key}"
        if key in props:
            errors += validate(value, props[key], where)
        elif extra is False:
            errors.append(f"{path}: unexpected property '{key}'")
        elif isinstance(extra, dict):
            errors += validate(value, extra, where)
    return errors
