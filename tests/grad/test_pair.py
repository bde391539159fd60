"""The training pair as two diagrams (ncdc.grad.pair): what the forward saves, what the
backward recomputes, both loadable as any spec is."""

from __future__ import annotations

import pytest

from ncdc.errors import SpecError
from ncdc.grad.derive import derive
from ncdc.grad.pair import LSE, RECOMPUTE, SAVE, Undecided, every_way, make_pair
from ncdc.language.load import load_diagram
from tests.support import DIAGRAMS


def _attention(name: str = "attention_causal"):
    d = load_diagram(DIAGRAMS / f"{name}.yaml")
    return d, derive(d)


def test_flashattention_ways_save_the_lse_and_recompute_s_and_p() -> None:
    d, b = _attention()
    p = make_pair(d, b, {"P": LSE, "M": RECOMPUTE, "S": RECOMPUTE})
    assert p.saved == ("lse_P",) and p.recomputed == ("S", "M", "P")
    assert p.forward.outputs == ("O", "lse_P")
    assert p.forward.tensor("lse_P").axes == ("b", "h", "q")
    assert p.forward.tensor("lse_P").dtype == "fp32"
    assert [t.name for t in p.backward.inputs] == ["Q", "K", "V", "O", "lse_P", "dO"]
    assert p.backward.outputs == ("dQ", "dK", "dV")
    assert "P = exp(P_shifted, dtype=bf16)" in p.backward_text
    assert p.forward.schedule.stream == ("x",)  # the forward keeps the spec's schedule


def test_an_existing_logsumexp_is_reused() -> None:
    d, b = _attention("attention_lse")  # it outputs L = logsumexp(M, over=x)
    p = make_pair(d, b, {"P": LSE, "M": RECOMPUTE, "S": RECOMPUTE})
    assert p.saved == () and p.forward.outputs == d.outputs


def test_saving_p_makes_it_a_forward_output() -> None:
    d, b = _attention()
    p = make_pair(d, b, {"P": SAVE})
    assert p.saved == ("P",) and p.recomputed == ()
    assert [t.name for t in p.backward.inputs] == ["Q", "K", "V", "O", "P", "dO"]


def test_every_way_names_only_what_is_read() -> None:
    d, b = _attention()
    ways = every_way(d, b)
    assert ways[0] == {"P": SAVE}
    assert {"P": LSE, "M": RECOMPUTE, "S": RECOMPUTE} in ways and len(ways) == 7


def test_undecided_and_impossible_ways() -> None:
    d, b = _attention()
    with pytest.raises(Undecided):
        make_pair(d, b, {})
    with pytest.raises(SpecError, match="cannot be got by 'lse'"):
        make_pair(d, b, {"P": RECOMPUTE, "M": LSE})
