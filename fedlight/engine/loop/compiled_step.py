"""Local steps compiled with ``torch.compile`` (``local.compile``).

A small local batch leaves the device waiting on the host: every operator of the forward and
backward pass is one launch from Python (BENCHMARKS.md section 5: ResNet-18 at batch 256 takes
the same 23 ms a step in bf16 and fp32 on an H200). Compiled, the method's ``training_step``
(forward and loss, and through AOTAutograd its backward) runs as a few fused kernels:

* ``inductor``: ``torch.compile`` with its default mode, on any device it supports (on the
  CPU it builds C++ kernels, so it needs a C++ compiler);
* ``cudagraphs``: ``mode="reduce-overhead"``, the fused kernels replayed as CUDA graphs, one
  launch a graph (CUDA only).

The optimizer step, the hooks and the views stay eager. A compiled step computes the same loss
with other kernels, so its numbers differ from an eager run's in the last bits; a run is still
the same for the same seed, device and setting. The first step of a client shape pays the
compilation (seconds to minutes; torch caches the kernels on disk for the next run); a graph
break (an operator whose output shape depends on data, such as lightly's ``NTXentLoss`` masking)
splits the step into several graphs and is not an error.

Refused in one line (``compile_refusal``): with ``local.batched_clients`` (its vmapped step is not
this one); ``cudagraphs`` off CUDA; several worker models
(``fabric.workers``: torch.compile's tracing is not thread-safe); a method whose step cannot be
compiled (its ``compile_refusal``); a Python or torch that torch.compile does not run on; the
CPU without a C++ compiler.
"""

from __future__ import annotations

import os
import shutil
import sys
import weakref
from functools import partial
from typing import Callable, Literal

import torch

from fedlight.methods.federated_module import Batch, FederatedModule

CompileSetting = Literal["none", "inductor", "cudagraphs"]
MODES = {"inductor": "default", "cudagraphs": "reduce-overhead"}
# torch.compile's backend; tests use "eager" (dynamo's tracing, no kernel build) to run this path quickly
BACKEND = "inductor"
_STEPS: weakref.WeakKeyDictionary[FederatedModule, Callable[..., torch.Tensor]] = weakref.WeakKeyDictionary()


def _cxx_compiler() -> str | None:
    """The C++ compiler inductor would build CPU kernels with (``$CXX``, else g++, clang++ or c++)."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++", "c++"]
    return next((found for name in names if (found := shutil.which(name))), None)


def compile_refusal(setting: CompileSetting, module: FederatedModule, device_type: str, workers: int,
                    batched_clients: int | None = None) -> str | None:
    """Why ``local.compile=setting`` cannot compile ``module``'s step on a ``device_type`` device
    with ``workers`` worker models and ``local.batched_clients`` (one line naming the key and the fix),
    or None where it can."""
    if setting == "none":
        return None
    key, fix = f"local.compile={setting}", "or set local.compile=none"
    if batched_clients is not None:
        return (f"{key} compiles the one-by-one local step, and local.batched_clients={batched_clients} trains "
                "clients together through torch.func instead; drop local.batched_clients or set local.compile=none")
    if setting == "cudagraphs" and device_type != "cuda":
        return f"{key} replays CUDA graphs, and this run's device is {device_type}; use local.compile=inductor {fix}"
    if workers > 1:
        return (f"{key} compiles one worker model's step (torch.compile's tracing is not thread-safe), and "
                f"fabric.workers={workers}; set fabric.workers=1 {fix}")
    if module.compile_refusal:
        return f"{key}: {type(module).__name__} {module.compile_refusal}; set local.compile=none"
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return (f"{key}: torch.compile does not run on Python {sys.version.split()[0]} with torch {torch.__version__}; "
                "set local.compile=none")
    if device_type == "cpu" and BACKEND == "inductor" and _cxx_compiler() is None:
        return (f"{key} builds C++ kernels on the CPU and finds no C++ compiler (g++, clang++, c++ or $CXX); "
                f"install one {fix}")
    return None


def compile_step(module: FederatedModule, setting: CompileSetting) -> None:
    """From now on ``step_function(module)`` is ``module.training_step`` compiled as ``setting``
    says (``none``: eager again). ``compile_refusal`` must have said yes."""
    if setting == "none":
        _STEPS.pop(module, None)
        return
    mode = {"mode": MODES[setting]} if BACKEND == "inductor" else {}
    # the class's function, called with the module: the table holds no reference to the module
    compiled = torch.compile(type(module).training_step, backend=BACKEND, **mode)
    _STEPS[module] = _new_step_each_call(compiled) if setting == "cudagraphs" else compiled


def _new_step_each_call(compiled: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``compiled`` telling CUDA graph trees that each call is a new step: the last step's outputs
    (its loss, read by then) may be overwritten, so the graphs replay without copying them out."""
    def step(*args: object) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)
    return step


def step_function(module: FederatedModule) -> Callable[[Batch, int], torch.Tensor]:
    """What a local step calls for the forward and loss: the compiled step, else ``module.training_step``."""
    compiled = _STEPS.get(module)
    return module.training_step if compiled is None else partial(compiled, module)
