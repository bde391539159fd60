"""The other tables and trees (ncdc.cli.views): the memory graph, the profiles, the spec
files a folder holds."""

from __future__ import annotations

import json

from rich.console import Console

from ncdc.cli.views import graph_tree, hardware_list_table, hardware_table
from ncdc.hardware.load import list_profiles, load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.graph import build_graph
from tests import support


def _text(renderable) -> str:
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_the_graph_tree_names_every_tensor_and_its_level() -> None:
    d = load_diagram("diagrams/attention.yaml")
    text = _text(graph_tree(build_graph(d, load_hardware("h200"))))
    for name in ("Q", "K", "V", "S", "P", "O"):
        assert name in text
    assert "hbm" in text


def test_hardware_tables_list_every_profile_and_its_numbers() -> None:
    text = _text(hardware_list_table([load_hardware(n) for n in list_profiles()]))
    assert all(n in text for n in list_profiles())
    assert "132" in _text(hardware_table(load_hardware("h200")))  # SMs


# A doc carrying terminal escapes: ESC sequences (colour, a window title), a C1 CSI and a
# bell. Issue 31: `show` passed them to the terminal.
ESCAPES = "evil \x1b[31mred\x1b]0;title\x07 \x9b2J bell\x07 \u202eright-to-left"


def _spec_with_doc(tmp_path, doc: str = ESCAPES):
    """The softmax spec with `doc` as its doc, as JSON (which YAML reads)."""
    data = json.loads(support.renamed_text(support.DIAGRAMS / "softmax.yaml", {}))
    data["doc"] = doc
    spec = tmp_path / "esc.yaml"
    spec.write_text(json.dumps(data))
    return spec


def test_show_prints_control_characters_as_escapes(tmp_path) -> None:
    spec = _spec_with_doc(tmp_path)
    result = support.ncdc("show", str(spec))
    assert result.returncode == 0, result.stderr
    assert "\\x1b[31mred" in result.stdout and "\\u202e" in result.stdout
    for c in "\x1b\x07\x9b\u202e":
        assert c not in result.stdout + result.stderr


def test_a_file_name_with_an_escape_is_shown_escaped_in_the_error_line(tmp_path) -> None:
    spec = tmp_path / "bad\x1b[2J.yaml"
    spec.write_text("ncdc: 1\n")
    for fmt in ("table", "github"):
        result = support.ncdc("check", str(spec), "--format", fmt)
        assert result.returncode == 2
        assert "bad\\x1b[2J.yaml" in result.stdout + result.stderr
        assert "\x1b" not in result.stdout + result.stderr
