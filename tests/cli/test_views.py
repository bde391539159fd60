"""The other tables and trees (ncdc.cli.views): the memory graph, the profiles, the spec
files a folder holds."""

from __future__ import annotations

from rich.console import Console

from ncdc.cli.views import graph_tree, hardware_list_table, hardware_table
from ncdc.hardware.load import list_profiles, load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.graph import build_graph


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
