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
from collections.abc import Mapping, Sequence
from typing import Any

from ncdc.api.arrays import torch_dtype
from ncdc.api.commands import HardwareLike, SpecLike
from ncdc.api.kernel import Kernel, load
from ncdc.errors import ArrayError, NcdcError, UsageError

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
    sizes: Mapping[str, int] | None = None, use_tuned: bool = True, grad: bool | None = None,
) -> Any:  # fmt: skip
    """Register the diagram `spec` as the torch operator `name` ("namespace::op"; default
    "ncdc::<diagram name>") and return it (callable, also reachable as
    `torch.ops.<namespace>.<op>`). Options as `ncdc.load`.

    `grad`: True registers its backward, derived as `ncdc grad` derives it (the training
    pair the model prices fastest, at the diagram's sizes): `loss.backward()` through the
    operator runs ncdc's backward kernels, for every floating-point input. None (the
    default) does so where the diagram has a derivative and otherwise makes a backward
    through it one error saying why; False registers no backward (a `CustomOpDef`)."""
    torch = _torch()
    kernel = load(spec, hardware=hardware, arch=arch, tiles=tiles, sizes=sizes, use_tuned=use_tuned)
    name = name or f"ncdc::{kernel.name}"
    if not OP_NAME.match(name):
        raise UsageError(
            f"expected an operator name 'namespace::name', found {name!r}",
            hint="letters, digits and underscores on each side of '::', e.g. mylib::attention",
        )
    identity = _identity(kernel, hardware, arch, tiles, use_tuned, grad)
    found = _REGISTERED.get(name)
    if found is not None:
        if found[0] != identity:
            raise UsageError(
                f"operator {name} is already registered for another diagram",
                hint="give each diagram (and each set of options) its own name",
            )
        return found[1]
    options = {"hardware": hardware, "arch": arch, "tiles": tiles, "use_tuned": use_tuned}
    registered = _register_with_grad(torch, kernel, name, grad, options)
    _REGISTERED[name] = (identity, registered)
    return registered


def schema(kernel: Kernel, sizing: Sequence[str] = ()) -> str:
    """The operator's schema: one Tensor per input (and per tensor in `sizing`, passed for
    its shape alone), a Tensor or a tuple of them out.

    >>> from ncdc.api.kernel import load
    >>> schema(load("diagrams/attention.yaml"))
    '(Tensor Q, Tensor K, Tensor V) -> Tensor'
    """
    args = ", ".join(f"Tensor {n}" for n in (*kernel.inputs, *sizing))
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


def _register(
    torch: Any, kernel: Kernel, name: str, sizing: Sequence[tuple[str, tuple[str, ...]]] = ()
) -> Any:
    """The custom op of `kernel`: its implementation, and its fake implementation from the
    diagram's shape inference (each output's axes, sized from the inputs that carry them).
    `sizing` names (name, axes) of tensors passed after the inputs for their shapes alone:
    they size the axes of an output that no input has (a table's rows, in the gradient of a
    gather), which would otherwise keep the diagram's sizes."""
    inputs = [(t.name, t.axes) for t in kernel.diagram.inputs]
    outputs = [
        (kernel.diagram.tensor(n).axes, torch_dtype(kernel.diagram.tensor(n).dtype))
        for n in kernel.outputs
    ]
    defaults = kernel.sizes
    count = len(inputs)
    resized: dict[tuple, Kernel] = {}  # the kernel at the sizes the sizing tensors give

    def sized(tensors: Sequence[Any]) -> dict[str, int]:
        return {a: int(n) for (_, axes), t in zip(sizing, tensors[count:], strict=True)
                for a, n in zip(axes, t.shape, strict=True)}  # fmt: skip

    def implementation(*tensors: Any) -> Any:
        if not sizing:
            return kernel(*tensors)
        sizes = sized(tensors)
        key = tuple(sorted(sizes.items()))
        if key not in resized:
            resized[key] = kernel.at(**sizes)
        return resized[key](*tensors[:count])

    tags = (torch.Tag.needs_contiguous_strides,)  # kernels read row-major arrays
    custom = torch.library.custom_op(
        name, implementation, mutates_args=(),
        schema=schema(kernel, [n for n, _ in sizing]), tags=tags,
    )  # fmt: skip

    def fake(*tensors: Any) -> Any:
        sizes: dict[str, Any] = dict(defaults)
        sizes.update(sized(tensors) if sizing else {})
        for (input_name, axes), t in zip(inputs, tensors[:count], strict=True):
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


def _register_with_grad(
    torch: Any, kernel: Kernel, name: str, grad: bool | None, options: Mapping[str, Any]
) -> Any:
    """The operator of `kernel` under `name`, with its backward as `grad` asks (see `op`)."""
    if grad is False:
        return _register(torch, kernel, name)
    try:
        pair = _training_pair(kernel, options)
    except NcdcError as e:
        if grad:
            raise
        custom = _register(torch, kernel, name)
        _no_backward(torch, custom, name, e.line())
        return custom
    return _register_trainable(torch, kernel, pair, name, options)


def _training_pair(kernel: Kernel, options: Mapping[str, Any]) -> Any:
    """The training pair `ncdc grad` writes for the diagram: a `ncdc.grad.pair.Pair`."""
    from ncdc.api.commands import machine
    from ncdc.backends.targets import DEFAULT_PROFILE
    from ncdc.grad.choose import choose_pair

    hardware = options["hardware"] if options["hardware"] is not None else DEFAULT_PROFILE
    return choose_pair(kernel.diagram, machine(hardware)).pair


def _no_backward(torch: Any, custom: Any, name: str, why: str) -> None:
    """A backward through `custom` is this one error, not torch's own about a missing
    autograd kernel."""

    def backward(ctx: Any, *grads: Any) -> Any:
        raise UsageError(
            f"operator {name} has no backward: {why}",
            hint="use grad=False, and keep its inputs out of the gradient",
        )

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        pass

    torch.library.register_autograd(custom, backward, setup_context=setup_context)


_LIBRARIES: list[Any] = []  # the torch.library.Library fragments defined here: kept alive


def _register_trainable(
    torch: Any, kernel: Kernel, pair: Any, name: str, options: Mapping[str, Any]
) -> Any:
    """`name` as a composite of two custom ops: `<name>__fwd`, the forward that also
    returns what the backward reads (attention's row log-sum-exp, say), and
    `<name>__bwd`, the backward; `name` returns the diagram's own outputs, and autograd
    runs `<name>__bwd` on the saved tensors and the outputs' gradients."""
    from ncdc.grad.derive import default_wrt

    fwd_kernel = load(pair.forward, sizes=kernel.sizes, **options)
    bwd_kernel = load(pair.backward, sizes=kernel.sizes, **options)
    names = list(kernel.inputs)
    # axes of a gradient that no input of the backward has (a gathered table's rows): sized
    # by the forward's inputs that have them, passed to the backward for their shapes
    carried = {a for n in bwd_kernel.inputs for a in bwd_kernel.diagram.tensor(n).axes}
    loose = {a for n in bwd_kernel.outputs for a in bwd_kernel.diagram.tensor(n).axes} - carried
    sizing = [n for n in names if loose & set(kernel.diagram.tensor(n).axes)]
    fwd = _register(torch, fwd_kernel, f"{name}__fwd")
    bwd = _register(
        torch,
        bwd_kernel,
        f"{name}__bwd",
        [(f"ncdc_shape_{n}", kernel.diagram.tensor(n).axes) for n in sizing],
    )
    outputs = list(fwd_kernel.outputs)  # the diagram's outputs, then what it saves
    shown = len(kernel.outputs)
    # each backward input's source: ("input", i), ("output", i) or ("grad", i of the output)
    sources = []
    for n in bwd_kernel.inputs:
        if n in names:
            sources.append(("input", names.index(n)))
        elif n in outputs:
            sources.append(("output", outputs.index(n)))
        else:  # d<OUT>: the gradient of an output (ncdc.grad.pair names it so)
            sources.append(("grad", outputs.index(n[1:])))
    wrt = default_wrt(kernel.diagram)  # what the backward's outputs are gradients of, in order
    returned = [wrt.index(n) if n in wrt else None for n in names]

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:  # torch's names
        made = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*inputs, *made)
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in made]

    def backward(ctx: Any, *grads: Any) -> tuple:
        saved = ctx.saved_tensors
        given, made = saved[: len(names)], saved[len(names) :]
        args = []
        for kind, i in sources:
            if kind == "input":
                args.append(given[i])
            elif kind == "output":
                args.append(made[i])
            else:
                g = grads[i]
                shape, dtype, device = ctx.shapes[i]
                args.append(torch.zeros(shape, dtype=dtype, device=device) if g is None
                            else g.to(dtype).contiguous())  # fmt: skip
        got = bwd(*args, *(given[names.index(n)] for n in sizing))
        got = got if isinstance(got, tuple) else (got,)
        return tuple(None if i is None else got[i] for i in returned)

    torch.library.register_autograd(fwd, backward, setup_context=setup_context)
    namespace, opname = name.split("::")
    library = torch.library.Library(namespace, "FRAGMENT")
    _LIBRARIES.append(library)
    library.define(f"{opname}{schema(kernel)}")

    def composite(*tensors: Any) -> Any:
        made = fwd(*tensors)
        made = made if isinstance(made, tuple) else (made,)
        return made[0] if shown == 1 else tuple(made[:shown])

    library.impl(opname, composite, "CompositeImplicitAutograd")
    return getattr(getattr(torch.ops, namespace), opname)
