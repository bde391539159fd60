"""What `ncdc grad` writes and prints: the pair's two specs in the output folder (never over
a file that is there), and its JSON record (`ncdc.grad/1`): the ways chosen, the
alternatives weighed, and with `cost` both plans and the unfused training step.

    >>> from ncdc.hardware.load import load_hardware
    >>> from ncdc.language.load import load_diagram
    >>> from ncdc.grad.choose import choose_pair
    >>> c = choose_pair(load_diagram("diagrams/matmul.yaml"), load_hardware("h200"))
    >>> grad_to_dict(c, "h200")["backward_over_forward"]
    2.23
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ncdc.errors import UsageError
from ncdc.files import folder_lock, write_together
from ncdc.grad.choose import Choice
from ncdc.model.records import plan_to_dict
from ncdc.model.values import Plan
from ncdc.output import json_number
from ncdc.plan.search import with_unfused

FORMAT = "ncdc.grad/1"


def pair_paths(name: str, out: Path) -> tuple[Path, Path]:
    """Where the forward and backward specs of the diagram `name` go: `<name>_fwd.yaml`,
    `<name>_bwd.yaml`; a UsageError where either is there already (checked before the
    pair is priced, and again before it is written)."""
    paths = out / f"{name}_fwd.yaml", out / f"{name}_bwd.yaml"
    taken = [str(p) for p in paths if p.exists()]
    if taken:
        raise UsageError(
            f"{', '.join(taken)} already exist{'s' if len(taken) == 1 else ''}; ncdc grad "
            "does not overwrite files", where="-o", hint="remove them or choose another -o",
        )  # fmt: skip
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is not a folder", where="-o", hint="give a folder for -o")
    return paths


def write_pair(choice: Choice, out: Path) -> tuple[Path, Path]:
    """Write the pair's two specs into `out` (made if missing), both or neither; a file
    already there is refused, not overwritten."""
    name = choice.pair.forward.name.removesuffix("_fwd")
    pair_paths(name, out)
    out.mkdir(parents=True, exist_ok=True)
    texts = (choice.pair.forward_text, choice.pair.backward_text)
    with folder_lock(out):  # another writer cannot slip a file in between check and write
        paths = pair_paths(name, out)
        write_together({p: t.encode() for p, t in zip(paths, texts, strict=True)})
    return paths


def unfused_time_s(plan: Plan) -> float:
    """The plan's time with every intermediate saved to memory (its own where it has none)."""
    unfused = with_unfused(plan).unfused
    return unfused.predicted_time_s if unfused is not None else plan.predicted_time_s


def grad_to_dict(
    choice: Choice, hardware: str, paths: tuple[Path, Path] | None = None, cost: bool = False
) -> dict[str, Any]:
    """The JSON of `ncdc grad` (see docs/grad.md)."""
    fwd, bwd = choice.forward.predicted_time_s, choice.backward.predicted_time_s
    data: dict[str, Any] = {
        "format": FORMAT,
        "diagram": choice.pair.forward.name.removesuffix("_fwd"),
        "hardware": hardware,
        "files": [str(p) for p in paths] if paths else [],
        "wrt": [n.removeprefix("d") for n in choice.pair.backward.outputs],
        "ways": dict(choice.pair.ways),
        "saved": list(choice.pair.saved),
        "recomputed": list(choice.pair.recomputed),
        "forward_s": json_number(fwd),
        "backward_s": json_number(bwd),
        "total_s": json_number(fwd + bwd),
        "backward_over_forward": round(bwd / fwd, 2) if fwd else None,
        "alternatives": [
            {
                "ways": dict(a.ways), "saved": list(a.saved), "held_bytes": a.held_bytes,
                "forward_s": json_number(a.forward_s), "backward_s": json_number(a.backward_s),
                "total_s": json_number(a.total_s), "chosen": a.chosen, "note": a.note,
            }
            for a in choice.alternatives
        ],
    }  # fmt: skip
    if cost:
        unfused = unfused_time_s(choice.forward) + unfused_time_s(choice.backward)
        data["unfused_s"] = json_number(unfused)
        data["forward"] = plan_to_dict(choice.forward)
        data["backward"] = plan_to_dict(choice.backward)
    return data
