"""A diagram as a PyTorch operator: `ncdc.torch.op(spec, name="ns::name")`.

    >>> import torch, ncdc.torch  # doctest: +SKIP
    >>> softmax = ncdc.torch.op("diagrams/softmax.yaml", name="mylib::softmax")  # doctest: +SKIP
    >>> y = torch.compile(lambda x: softmax(x) * 2, fullgraph=True)(x)  # doctest: +SKIP

The operator is a `torch.library` custom op: its schema takes the diagram's inputs as
tensors, in `inputs:` order, and returns its outputs; its fake (meta) implementation gives
each output's shape from the inputs' shapes by axis name, so `torch.compile` traces a model
that calls it with no graph break; its implementation is `ncdc.load`'s kernel, so CUDA
tensors run the GPU kernel on torch's current stream and CPU tensors the emulation. One
name is registered once per process: asking again for the same diagram returns the same
operator; another diagram under a name already taken is refused (torch would silently
replace the first, dropping its fake implementation).

torch is an optional extra: `pip install 'ncdc[torch]'`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from ncdc.api.arrays import torch_dtype
from ncdc.api.commands import HardwareLike, SpecLike
from ncdc.api.kernel import Kernel, load
from ncdc.errors import ArrayError, UsageError

OP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*$")
_REGISTERED: dict[str, tuple[str, Any]] = {}  # op name -> (what it was made from, the op)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UsageError(
            "PyTorch is not installed, so ncdc.torch cannot register an operator",
            hint="pip install 'ncdc[torch]'",
        ) from None
    return torch


def op(
    spec: SpecLike, name: str | None = None, *, hardware: HardwareLike | None = None,
    arch: str | None = None, tiles: Mapping[str, int] | None = None,
    sizes: Mapping[str, int] | None = None, use_tuned: bool = True,
) -> Any:  # fmt: skip
    """Register the diagram `spec` as the torch operator `name` ("namespace::op"; default
    "ncdc::<diagram name>") and return it (a `torch.library.CustomOpDef`, callable, also
    reachable as `torch.ops.<namespace>.<op>`). Options as `ncdc.load`."""
    torch = _torch()
    kernel = load(
        spec, hardware=hardware, arch=arch, tiles=tiles, sizes=sizes, use_tuned=use_tuned
    )
    name = name or f"ncdc::{kernel.name}"
    if not OP_NAME.match(name):
        raise UsageError(
            f"expected an operator name 'namespace::name', found {name!r}",
            hint="letters, digits and underscores on each side of '::', e.g. mylib::attention",
        )
    identity = _identity(kernel, hardware, arch, tiles, use_tuned)
    found = _REGISTERED.get(name)
    if found is not None:
        if found[0] != identity:
            raise UsageError(
                f"operator {name} is already registered for another diagram",
                hint="give each diagram (and each set of options) its own name",
            )
        return found[1]
    custom = _register(torch, kernel, name)
    _REGISTERED[name] = (identity, custom)
    return custom


def schema(kernel: Kernel) -> str:
    """The operator's schema: one Tensor per input, a Tensor or a tuple of them out.

        >>> from ncdc.api.kernel import load
        >>> schema(load("diagrams/attention.yaml"))
        '(Tensor Q, Tensor K, Tensor V) -> Tensor'
    """
    args = ", ".join(f"Tensor {n}" for n in kernel.inputs)
    outs = kernel.outputs
    result = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"({args}) -> {result}"


def _identity(kernel: Kernel, *options: Any) -> str:
    """What an operator was made from: the diagram (its meaning, not its file) and the
    options, hashed, so that asking twice for one operator is recognised."""
    d = kernel.diagram
    made = {
        "name": d.name, "axes": dict(d.axes), "outputs": list(d.outputs),
        "inputs": [[t.name, list(t.axes), t.dtype] for t in d.inputs],
        "ops": [op.text for op in d.ops], "schedule": repr(d.schedule),
        "options": repr(options),
    }  # fmt: skip
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


def _register(torch: Any, kernel: Kernel, name: str) -> Any:
    """The custom op of `kernel`: its implementation, and its fake implementation from the
    diagram's shape inference (each output's axes, sized from the inputs that carry them)."""
    inputs = [(t.name, t.axes) for t in kernel.diagram.inputs]
    outputs = [
        (kernel.diagram.tensor(n).axes, torch_dtype(kernel.diagram.tensor(n).dtype))
        for n in kernel.outputs
    ]
    defaults = kernel.sizes

    def implementation(*tensors: Any) -> Any:
        return kernel(*tensors)

    tags = (torch.Tag.needs_contiguous_strides,)  # kernels read row-major arrays
    custom = torch.library.custom_op(
        name, implementation, mutates_args=(), schema=schema(kernel), tags=tags
    )

    def fake(*tensors: Any) -> Any:
        sizes: dict[str, Any] = dict(defaults)
        for (input_name, axes), t in zip(inputs, tensors, strict=True):
            if len(t.shape) != len(axes):
                raise ArrayError(
                    f"input {input_name}: expected {len(axes)} dimensions [{', '.join(axes)}], "
                    f"found shape {tuple(t.shape)}"
                )
            sizes.update(zip(axes, t.shape, strict=True))
        device = tensors[0].device if tensors else None
        made = [torch.empty([sizes[a] for a in axes], dtype=dtype, device=device)
                for axes, dtype in outputs]  # fmt: skip
        return made[0] if len(made) == 1 else tuple(made)

    custom.register_fake(fake)
    return custom
