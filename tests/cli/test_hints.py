"""Every hint the command line can print names options that exist on the command it is
for. The hints are collected from the package's source: each `hint=` argument and each
string carrying "(hint: ...)". An option after `ncdc CMD` in a hint must be one of CMD's;
an option in a hint that names no command must be one of every command that module
serves (bench has no --backend: its no-GPU hint must say `ncdc run --backend cpu`)."""

from __future__ import annotations

import ast
import re

import pytest
import typer

from ncdc.cli.main import app
from tests.support import ROOT, SOFTMAX, ncdc

PACKAGE = ROOT / "ncdc"
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b")
# The commands a module's errors reach, where fewer than all of them; a hint there that
# names no command must hold for each.
SERVES = {
    "backends/cuda.py": ("run", "bench", "tune"),
    "measure/bench.py": ("bench",),
    "measure/tune.py": ("tune",),
    "measure/distribute.py": ("tune",),
    "verify/run.py": ("run",),
    "verify/data.py": ("run",),
    "verify/gate.py": ("check",),
    "grad/": ("grad",),
    "draw/": ("draw",),
    "backends/batch.py": ("compile",),
}
GLOBAL = {"--debug", "--help", "-h", "-q", "-v", "--quiet", "--verbose"}


def command_options() -> dict[str, set[str]]:
    """Each command's option names, from the click command typer builds."""
    root = typer.main.get_command(app)
    found: dict[str, set[str]] = {}

    def walk(group, prefix: str) -> None:
        for name, cmd in group.commands.items():
            path = f"{prefix}{name}"
            if hasattr(cmd, "commands"):
                walk(cmd, f"{path} ")
                continue
            found[path] = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}

    walk(root, "")
    return found


def hint_texts() -> list[tuple[str, str]]:
    """(module, hint) for every hint in the package's source."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        module = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "hint" and (text := _text(kw.value)):
                        found.append((module, text))
            elif isinstance(node, ast.Constant) and "(hint: " in str(node.value):
                found.append((module, str(node.value).split("(hint: ", 1)[1]))
    return found


def _text(node: ast.AST) -> str:
    """The literal parts of a string expression: f-string holes become spaces, the two
    branches of `a if c else b` stay apart."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else " "
    if isinstance(node, ast.IfExp):
        return f"{_text(node.body)} ; {_text(node.orelse)}"
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    return " "


def problems(module: str, hint: str, options: dict[str, set[str]]) -> list[str]:
    """What is wrong with one hint: options its command does not have."""
    found = []
    names = "|".join(sorted(options, key=len, reverse=True))
    pieces = re.split(rf"\bncdc ({names})\b", hint)
    head, rest = pieces[0], pieces[1:]
    serves = next((cmds for key, cmds in SERVES.items() if module.startswith(key)), None)
    for opt in set(OPTION.findall(head)) - GLOBAL:
        targets = serves or [c for c in options if opt in options[c]] or ["any command"]
        found += [f"{module}: {opt} is not an option of {c}: {hint!r}" for c in targets
                  if opt not in options.get(c, set())]  # fmt: skip
    for command, text in zip(rest[::2], rest[1::2], strict=True):
        for opt in set(OPTION.findall(text)) - GLOBAL:
            if opt not in options[command]:
                found.append(f"{module}: {opt} is not an option of ncdc {command}: {hint!r}")
    return found


def test_hints_are_collected():
    texts = [h for _, h in hint_texts()]
    assert len(texts) > 50 and any("--tile" in h for h in texts)


def test_every_hint_names_options_its_command_has():
    options = command_options()
    assert "--backend" in options["run"] and "--backend" not in options["bench"]
    found = [p for module, hint in hint_texts() for p in problems(module, hint, options)]
    assert not found, "\n".join(found)


def test_the_check_catches_an_option_a_command_lacks():
    options = command_options()
    assert problems("backends/cuda.py", "use --backend cpu", options) == [
        "backends/cuda.py: --backend is not an option of bench: 'use --backend cpu'"
    ]
    assert problems("x.py", "ncdc cost --strict", options)
    assert not problems("x.py", "ncdc run SPEC --backend cpu", options)


@pytest.mark.parametrize("command", ["bench", "tune", "run"])
def test_the_no_gpu_hint_runs_through_the_parser(command):
    """Without a GPU, the hint each GPU command prints parses as a command line."""
    args = [command, SOFTMAX] + (["--backend", "cuda"] if command == "run" else [])
    line = ncdc(*args).stderr
    if "hint: " not in line:
        pytest.skip("this machine has a GPU")
    suggested = re.search(r"`ncdc ([^`]+)`", line)
    assert suggested, line
    argv = [SOFTMAX if a == "SPEC" else a for a in suggested.group(1).split()]
    root = typer.main.get_command(app)
    cmd = root.commands[argv[0]]
    ctx = cmd.make_context(argv[0], argv[1:], parent=root.make_context("ncdc", []))
    assert ctx.params["backend"] == "cpu"
