"""Gradients two ways, in float64 and unrounded: the derived backward diagram evaluated by
the reference, and central finite differences of the forward (the check of ncdc grad)."""

from __future__ import annotations

import numpy as np

from ncdc.grad.pair import Pair
from ncdc.language.diagram import Diagram
from ncdc.verify.reference import evaluate, make_inputs

STEP = 1e-5  # central differences: error ~ STEP^2 f''' + 1e-16 / STEP, ~1e-10 here


def backward_inputs(diagram: Diagram, pair: Pair, seed: int) -> dict[str, np.ndarray]:
    """What the backward reads: the forward's inputs and saved results (the forward
    evaluated, unrounded) and random gradients d<OUT>."""
    rng = np.random.default_rng(seed + 1)
    values = make_inputs(diagram, seed)
    forward = evaluate(pair.forward, values, rounded=False)
    out = {}
    for t in pair.backward.inputs:
        if t.name in forward:
            out[t.name] = forward[t.name]
        else:
            out[t.name] = rng.standard_normal([pair.backward.axes[a] for a in t.axes])
    return out


def loss(diagram: Diagram, values: dict[str, np.ndarray], seeds: dict[str, np.ndarray]) -> float:
    """sum over the outputs of d<OUT> * OUT: its gradient is what the backward computes."""
    env = evaluate(diagram, values, rounded=False)
    return float(sum(np.sum(seeds[f"d{o}"] * env[o]) for o in diagram.outputs if f"d{o}" in seeds))


def finite_differences(
    diagram: Diagram, values: dict[str, np.ndarray], seeds: dict[str, np.ndarray], name: str
) -> np.ndarray:
    """d loss / d `name`, element by element, by central differences."""
    x = values[name]
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += STEP
        down[i] -= STEP
        grad[i] = (
            loss(diagram, {**values, name: up}, seeds)
            - loss(diagram, {**values, name: down}, seeds)
        ) / (2 * STEP)
    return grad


def compare(diagram: Diagram, pair: Pair, seed: int = 0) -> dict[str, float]:
    """The largest error of each input's derived gradient against finite differences,
    relative to the gradient's largest magnitude."""
    inputs = backward_inputs(diagram, pair, seed)
    values = {
        t.name: inputs.get(t.name, make_inputs(diagram, seed)[t.name]) for t in diagram.inputs
    }
    seeds = {f"d{o}": inputs[f"d{o}"] for o in diagram.outputs if f"d{o}" in inputs}
    derived = evaluate(pair.backward, inputs, rounded=False)
    errors = {}
    for name in pair.backward.outputs:
        wrt = name[1:]
        expected = finite_differences(diagram, values, seeds, wrt)
        scale = max(1.0, float(np.max(np.abs(expected))))
        errors[wrt] = float(np.max(np.abs(derived[name] - expected))) / scale
    return errors
