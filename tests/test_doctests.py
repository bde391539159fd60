"""The examples in the docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ncdc
from tests import support

ROOT = support.ROOT
MODULES = sorted(
    m.name for m in pkgutil.walk_packages(ncdc.__path__, "ncdc.") if m.name != "ncdc.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples name diagrams/ relative to the repository
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.mark.parametrize("page", ["docs/python-api.md", "docs/hardware-profiles.md"])
def test_doc_page_examples(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = doctest.testfile(str(ROOT / page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, (
        f"{result.failed} of {result.attempted} failed"
    )
