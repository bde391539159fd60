"""What many test modules share: the repository's folders and the command line run as a
script or CI runs it (a subprocess of `python -m ncdc`), with its error contract."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIAGRAMS = ROOT / "diagrams"
SPECS = ROOT / "tests" / "specs"
UNBUILDABLE = ROOT / "tests" / "unbuildable"
EMULATOR_KERNELS = ROOT / "tests" / "emulator_kernels"
GOLDEN = ROOT / "tests" / "golden"
SOFTMAX = str(DIAGRAMS / "softmax.yaml")
MATMUL = str(DIAGRAMS / "matmul.yaml")


def ncdc(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: int = 300):
    """`ncdc ARGS...` in a subprocess, at 200 columns, its output captured."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ncdc", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


def ncdc_version() -> str:
    from ncdc import __version__

    return __version__


def assert_error(result, code: int, *, contains: str = "") -> str:
    """Exit `code`, one `error:` line on stderr, no traceback, nothing on stdout."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == "", result.stdout
    assert contains in lines[0], lines[0]
    return lines[0]


def renamed_text(path: Path, mapping: dict[str, str]) -> str:
    """The spec at `path` with names replaced by `mapping`, written as JSON-style YAML."""
    from ncdc.language.yamlsrc import read_yaml_text

    data = read_yaml_text(path.read_text(encoding="utf-8"), str(path)).data
    word = re.compile(r"[A-Za-z_]\w*(?!\w|\s*[(=:])")  # not operation or keyword names

    def sub(text: str) -> str:
        return word.sub(lambda m: mapping.get(m.group(), m.group()), text)

    ops = []
    doc = read_yaml_text(path.read_text(encoding="utf-8"), str(path))
    for i, op in enumerate(data["ops"]):
        text = doc.raw(("ops", i)) if isinstance(op, dict) else op
        head, eq, rest = text.split("#", 1)[0].partition("=")
        ops.append(sub(head) + eq + sub(rest))
    out = {
        "ncdc": 1,
        "name": mapping.get(data["name"], data["name"]),
        "doc": data.get("doc", ""),
        "axes": {mapping.get(a, a): n for a, n in data["axes"].items()},
        "inputs": {
            mapping.get(name, name): {
                "axes": [mapping.get(a, a) for a in decl["axes"]],
                "dtype": decl["dtype"],
            }
            for name, decl in data["inputs"].items()
        },
        "ops": ops,
        "outputs": [mapping.get(o, o) for o in data["outputs"]],
    }
    schedule = data.get("schedule", {})
    if schedule:
        out["schedule"] = {
            key: {mapping.get(a, a): n for a, n in value.items()}
            if isinstance(value, dict)
            else [mapping.get(a, a) for a in ([value] if isinstance(value, str) else value)]
            for key, value in schedule.items()
        }
    return json.dumps(out)
