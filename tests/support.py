"""What many test modules share: the repository's folders and the command line run as a
script or CI runs it (a subprocess of `python -m ncdc`), with its error contract."""

from __future__ import annotations

import functools
import inspect
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


def chain_spec(n: int) -> str:
    """A spec of `n` elementwise operations, each reading the one before (as in
    benchmarks/bench_check_scaling.py): long diagrams must cost linear work."""
    ops = "".join(f"  - Y{i} = relu(Y{i - 1})\n" for i in range(2, n + 1))
    return (
        "ncdc: 1\nname: chain\naxes: {m: 64, n: 64}\ninputs:\n"
        f"  X: {{axes: [m, n], dtype: fp32}}\nops:\n  - Y1 = relu(X)\n{ops}outputs: [Y{n}]\n"
    )


def python_calls(fn, *args, **kwargs) -> int:
    """How many Python function calls `fn(*args, **kwargs)` makes (a profiler's count, the
    same on any machine however loaded): what a scaling test compares between sizes."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return calls


def count_calls(monkeypatch, owner: object, name: str) -> list[int]:
    """Count the calls of `owner.name` (a function, property or cached property) from now
    on: a one-item list the caller reads. A scaling test asserts how the count grows with
    a diagram's size, never a wall-clock time."""
    original = inspect.getattr_static(owner, name)
    calls = [0]
    if isinstance(original, (property, functools.cached_property)):
        getter = original.fget if isinstance(original, property) else original.func

        def counted_property(self):
            calls[0] += 1
            return getter(self)

        monkeypatch.setattr(owner, name, property(counted_property))
        return calls

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def folder_locked(folder: Path) -> bool:
    """Whether another writer holds `folder`'s writer lock (ncdc.files.folder_lock): a
    descriptor of its own cannot take it now."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
