"""Every `ncdc.module.name` a document or a docstring names exists: a module, or an
attribute of one, so that a moved function cannot leave its old address in the prose."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests import support

ROOT = support.ROOT
DOTTED = re.compile(r"(?<![\w/.-])ncdc(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?![\w/(-])")
PATHS = re.compile(
    r"(?<![\w/.-])(?:ncdc|tests|benchmarks|scripts|diagrams)/[A-Za-z0-9_/.-]+\.(?:py|j2|cuh|h|yaml)\b"
)
FORMATS = re.compile(r"ncdc\.[a-z]+/\d")  # record formats ("ncdc.cost/1"), not modules


def sources() -> list[Path]:
    files = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("*.md")]
    files += [p for p in (ROOT / "ncdc").rglob("*.py")]
    files += [
        p for p in (ROOT / "ncdc" / "templates").rglob("*") if p.suffix in (".j2", ".cuh", ".h")
    ]
    return sorted(files)


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_module_and_attribute_exists(path: Path) -> None:
    text = FORMATS.sub("", path.read_text(encoding="utf-8"))
    stale = sorted({m for m in DOTTED.findall(text) if not resolves(m.rstrip("."))})
    stale += sorted({m for m in PATHS.findall(text) if not (ROOT / m).exists()})
    assert stale == []


def test_the_finder_finds_a_stale_reference() -> None:
    assert resolves("ncdc.model.cost.time_kernel") and resolves("ncdc.hardware.load")
    assert not resolves("ncdc.cost.time_kernel") and not resolves("ncdc.model.cost.nothing")
