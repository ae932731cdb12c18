"""onyx.torch: train and run a torch.nn.Module on onyx's engine, in one line.

    model = onyx.torch.wrap(model, example_inputs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step(); opt.zero_grad()

`wrap` exports the module with torch's ONNX exporter (TorchScript-based, opset >= 17, no
constant folding, so every initializer keeps its parameter's name), builds onyx's forward and
backward graphs for both modes (training: Dropout and BatchNorm as in training; eval), and
returns a torch.nn.Module whose forward runs onyx and records one autograd node whose
backward runs onyx's backward graph. Parameters and buffers are the original module's own
tensors, passed to onyx on every call without a copy (DLPack), so torch optimizers, LR
schedulers, gradient clipping, `state_dict()` / `load_state_dict()` (the original module's
keys), `.train()` / `.eval()` and `torch.no_grad()` work as before. BatchNorm running
statistics are updated in the original module's buffers in training mode, as torch does.

Not covered: inputs and outputs that are not tensors (dicts, lists of lists, None), double
backward, CUDA tensors (until onyx's CUDA provider lands), Dropout masks equal to torch's (onyx
draws its own; set `seed=` for reproducible masks).
"""
from __future__ import annotations

import io
import warnings
from typing import Any, Sequence

import torch

from . import _onyx

Error = _onyx.Error

__all__ = ["wrap", "OnyxModule"]


def _as_tuple(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        bad = [type(x).__name__ for x in example_inputs if not isinstance(x, torch.Tensor)]
        if bad:
            raise Error(f"[onyx.torch] example_inputs must be tensors; found {', '.join(bad)}")
        return tuple(example_inputs)
    raise Error(f"[onyx.torch] example_inputs must be a tensor or a tuple of tensors, "
                f"not {type(example_inputs).__name__}")


def _onyx_view(t: torch.Tensor):
    """What onyx reads: the tensor's own memory (DLPack needs it detached and contiguous;
    a non-contiguous input is copied once here, as torch's own ONNX paths do)."""
    if t.device.type != "cpu":
        raise Error(f"[onyx.torch] tensors on {t.device} are not supported yet (onyx's CUDA "
                    f"provider is not built); move the module and inputs to the CPU")
    t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def _to_torch(t):
    return None if t is None else torch.from_dlpack(t)


def _export(module: torch.nn.Module, args: tuple, opset: int, dynamic_batch: bool) -> tuple[bytes, int]:
    """The module as ONNX bytes, in training mode (Dropout and BatchNorm keep their training
    structure; onyx derives the eval graph from it), and the number of outputs. The probe run
    and the tracing run the module, which moves BatchNorm's running statistics in training
    mode: they are restored (also when either fails), so wrapping changes nothing in the
    module."""
    saved_buffers = {k: b.detach().clone() for k, b in module.named_buffers()}
    was_training = module.training
    try:
        return _trace(module, args, opset, dynamic_batch)
    finally:
        module.train(was_training)
        with torch.no_grad():
            for k, b in module.named_buffers():
                if k in saved_buffers:
                    b.copy_(saved_buffers[k])


def _trace(module: torch.nn.Module, args: tuple, opset: int, dynamic_batch: bool) -> tuple[bytes, int]:
    input_names = [f"input_{i}" for i in range(len(args))]
    try:
        with torch.no_grad():
            probe = module(*args)
    except Exception as e:
        raise Error(f"[onyx.torch] {type(module).__name__} fails on example_inputs: "
                    f"{type(e).__name__}: {e}") from e
    outs = probe if isinstance(probe, (tuple, list)) else (probe,)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise Error(f"[onyx.torch] the module must return a tensor or a tuple of tensors; it "
                    f"returned {type(probe).__name__}")
    output_names = [f"output_{i}" for i in range(len(outs))]
    dynamic_axes = None
    if dynamic_batch:
        dynamic_axes = {n: {0: "batch"} for n in input_names + output_names}
    buf = io.BytesIO()
    try:
        module.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, buf, input_names=input_names, output_names=output_names,
                              opset_version=opset, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, dynamic_axes=dynamic_axes, dynamo=False)
    except Exception as e:  # the exporter's own errors: unsupported op, data-dependent control flow
        raise Error(f"[onyx.torch] torch.onnx.export could not export {type(module).__name__}: "
                    f"{type(e).__name__}: {e}") from e
    return buf.getvalue(), len(outs)


class _OnyxFunction(torch.autograd.Function):
    """One autograd node per forward call: its backward runs onyx's backward graph on the
    activations the forward saved."""

    @staticmethod
    def forward(ctx, wrapper: "OnyxModule", n_inputs: int, *tensors):
        inputs, params = tensors[:n_inputs], tensors[n_inputs:]
        outs, saved = wrapper._run(inputs, params, need_grad=True)
        ctx.saved_onyx = saved
        ctx.session = wrapper._session
        ctx.n_inputs = n_inputs
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        if ctx.saved_onyx is None:
            raise RuntimeError("[onyx.torch] backward through the same forward twice; "
                               "retain_graph=True is not supported")
        grads = [None if g is None else _onyx_view(g) for g in grad_outputs]
        in_grads, param_grads = ctx.session.backward(ctx.saved_onyx, grads)
        ctx.saved_onyx = None  # the activations go as soon as they are used, as in torch
        result = [None, None]
        for i, g in enumerate(list(in_grads) + list(param_grads)):
            result.append(_to_torch(g) if ctx.needs_input_grad[2 + i] else None)
        return tuple(result)


class OnyxModule(torch.nn.Module):
    """A torch.nn.Module whose forward and backward run in onyx (see the module docstring).
    `module` is the original: its parameters are this module's parameters."""

    def __init__(self, module: torch.nn.Module, model_bytes: bytes, n_outputs: int,
                 threads: int = 0, seed: int | None = None, precision: str = "fp32"):
        super().__init__()
        self.module = module
        self._n_outputs = n_outputs
        self._seed = seed
        self._calls = 0
        # Which of the module's tensors the exported graph holds as initializers: the session's
        # default parameter list is every float initializer of rank >= 1.
        in_graph = set(_onyx.AutogradSession(model_bytes, [], [], threads).parameter_names)
        params = dict(module.named_parameters())
        buffers = dict(module.named_buffers())
        self._param_names = [n for n, p in params.items() if n in in_graph and p.requires_grad]
        # Frozen parameters are fed without gradients, like buffers.
        self._buffer_names = [n for n in params if n in in_graph and not params[n].requires_grad]
        self._buffer_names += [n for n in buffers if n in in_graph]
        # Any other float initializer is a constant the exporter created; it keeps its value.
        # BatchNorm's running variance as torch updates it (unbiased), not as ONNX specifies.
        self._session = _onyx.AutogradSession(model_bytes, self._param_names, self._buffer_names,
                                              threads, unbiased_running_var=True,
                                              precision=precision)
        self._model_bytes = model_bytes
        missing = self._session.missing_gradients()
        if missing and self._param_names:
            lines = "".join(f"\n  {op} '{node}': {why}" for node, op, why in missing)
            raise Error(f"[onyx.torch] {type(module).__name__} cannot be trained by onyx: "
                        f"{len(missing)} node(s) between its parameters and outputs have no "
                        f"gradient rule:{lines}")

    # state_dict / load_state_dict speak the original module's keys, so checkpoints move
    # between the wrapped and the unwrapped module unchanged.
    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    @property
    def onnx_model(self) -> bytes:
        """The exported ONNX model (training-mode export) onyx runs."""
        return self._model_bytes

    def _tensors(self):
        params = dict(self.module.named_parameters())
        fed = {**params, **dict(self.module.named_buffers())}
        return [params[n] for n in self._param_names], [fed[n] for n in self._buffer_names]

    def _run(self, inputs, params, need_grad: bool):
        _, buffers = self._tensors()
        seed = None
        if self._seed is not None:
            seed = self._seed + self._calls
        self._calls += 1
        outs, saved, updates = self._session.forward(
            [_onyx_view(t) for t in inputs], [_onyx_view(p) for p in params],
            [_onyx_view(b) for b in buffers], self.training, need_grad, seed)
        if updates:
            self._apply_state_updates(updates)
        return [_to_torch(o) for o in outs], saved

    def _apply_state_updates(self, updates):
        buffers = dict(self.module.named_buffers())
        bumped = set()
        with torch.no_grad():
            for name, value in updates:
                buffers[name].copy_(_to_torch(value))
                # BatchNorm counts its updates; the graph does not know the counter.
                prefix = name.rsplit(".", 1)[0] + "." if "." in name else ""
                counter = prefix + "num_batches_tracked"
                if counter in buffers and counter not in bumped:
                    buffers[counter].add_(1)
                    bumped.add(counter)

    def forward(self, *inputs):
        if len(inputs) != len(self._session.input_names):
            raise Error(f"[onyx.torch] expected {len(self._session.input_names)} inputs "
                        f"(as in example_inputs) but got {len(inputs)}")
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                raise Error(f"[onyx.torch] input {i} must be a tensor, not {type(x).__name__}")
        params, _ = self._tensors()
        need_grad = torch.is_grad_enabled() and (
            any(p.requires_grad for p in params) or any(x.requires_grad for x in inputs))
        if need_grad:
            outs = _OnyxFunction.apply(self, len(inputs), *inputs, *params)
        else:
            outs, _ = self._run(inputs, params, need_grad=False)
        return outs[0] if self._n_outputs == 1 else tuple(outs)


def wrap(module: torch.nn.Module, example_inputs: Any, *, opset: int = 17,
         dynamic_batch: bool = True, threads: int = 0, seed: int | None = None,
         precision: str = "fp32") -> OnyxModule:
    """Returns `module` running on onyx (see the module docstring).

    example_inputs: a tensor or tuple of tensors the module accepts (shapes and dtypes; with
    dynamic_batch the first dimension of every input and output may vary between calls).
    threads: onyx's intra-op threads (0: one per core). seed: Dropout masks drawn from
    seed + call index, for reproducible runs. precision: "bf16"/"fp16" run matrix products and
    convolutions (forward and backward) in that format, the rest per onyx's autocast policy;
    parameters, inputs, outputs and gradients stay float32 (fp16 wants torch.amp.GradScaler).
    Raises onyx.Error when the module cannot be exported, an op has no onyx kernel, or an op
    between a parameter and an output has no gradient rule — before any training starts.
    """
    if isinstance(module, OnyxModule):
        return module
    if not isinstance(module, torch.nn.Module):
        raise Error(f"[onyx.torch] wrap() takes a torch.nn.Module, not {type(module).__name__}")
    if opset < 17:
        raise Error(f"[onyx.torch] opset {opset} is too old; use 17 or newer")
    args = _as_tuple(example_inputs)
    model_bytes, n_outputs = _export(module, args, opset, dynamic_batch)
    wrapped = OnyxModule(module, model_bytes, n_outputs, threads=threads, seed=seed,
                         precision=precision)
    wrapped.train(module.training)
    # Compile both modes now, so a missing kernel is reported here rather than mid-training;
    # the example run changes nothing (no state updates are applied, no autograd node).
    params, buffers = wrapped._tensors()
    with torch.no_grad():
        for training in (False, True):
            wrapped._session.forward([_onyx_view(t) for t in args], [_onyx_view(p) for p in params],
                                     [_onyx_view(b) for b in buffers], training,
                                     bool(wrapped._param_names), None)
    return wrapped
