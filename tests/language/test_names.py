"""Names that reach generated C++ (ncdc.language.names): identifiers only, nothing reserved."""

from __future__ import annotations

import pytest

from ncdc.errors import SpecError
from ncdc.language.load import load_diagram, load_diagram_text
from tests import support
from tests.support import renamed_text

DIAGRAMS = sorted(support.DIAGRAMS.glob("*.yaml"))


INVALID = (
    "int", "NULL", "__LINE__", "_Foo", "__x", "threadIdx", "ncdc_x", "cudaFree", "a;b",
    'a;system("x")', "a/*", "a\n#include <x>", "a b", "é",
)  # fmt: skip


@pytest.mark.parametrize("bad", INVALID)
@pytest.mark.parametrize("path", DIAGRAMS[:4], ids=lambda p: p.stem)
def test_invalid_names_are_refused_at_load(path, bad):
    diagram = load_diagram(path)
    for old in (diagram.name, diagram.inputs[0].name, next(iter(diagram.axes))):
        with pytest.raises(SpecError) as info:
            load_diagram_text(renamed_text(path, {old: bad}), path.name)
        assert len(info.value.line().splitlines()) == 1
