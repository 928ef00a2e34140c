"""SCAFFOLD's client side (Karimireddy et al., ICML 2020): control-variate corrected local steps."""

from __future__ import annotations

import torch
from torch import nn

from fedlight.methods.federated_module import FederatedModule
from fedlight.methods.wrapper import ObjectiveWrapper

CONTROL_DELTA = "control_delta."


class ControlVariates(nn.Module):
    """One buffer per parameter (dots in names become ``__``), all zeros at first."""

    def __init__(self, params: list[tuple[str, nn.Parameter]]) -> None:
        super().__init__()
        for name, p in params:
            self.register_buffer(name.replace(".", "__"), torch.zeros_like(p))

    def values(self) -> list[torch.Tensor]:
        return list(self.buffers())


def control_update(c_local: torch.Tensor, c_global: torch.Tensor, w_start: torch.Tensor, w_end: torch.Tensor,
                   steps: int, lr: float) -> torch.Tensor:
    """Option II of SCAFFOLD: c_i+ = c_i - c + (w_global - w_i) / (K * lr)."""
    return c_local - c_global + (w_start - w_end) / (steps * lr)


class Scaffold(ObjectiveWrapper):
    """Local steps corrected by c - c_i; uploads weights and c_i+ - c_i.

    The server control variate ``control_global`` is received with the global model; the
    client's ``control_local`` is private and persists. K is the number of optimizer steps
    the client really took. As in the reference implementation used by MOON (NIID-Bench),
    the correction is applied to the weights after each optimizer step,
    w <- w - lr (c - c_i), rather than added to the gradient: with momentum, a gradient
    correction would be amplified by 1 / (1 - momentum) on top of c_i, which is itself
    measured from momentum steps, and the run diverges (seen on Fashion-MNIST, SGD 0.9).

    Args:
        objective: the local objective.
    """

    batch_refusal = ("its correction keeps the client's start weights and step count in Python from "
                     "on_train_start to on_train_end, which one step over several clients would mix up")

    def __init__(self, objective: FederatedModule) -> None:
        super().__init__(objective)
        params = self.trainable_shared()
        self.control_global = ControlVariates(params)
        self.control_local = ControlVariates(params)
        self.shared_modules = (*self.shared_modules, "control_global")
        self.private_modules = (*self.private_modules, "control_local")
        self._start: list[torch.Tensor] = []
        self._delta: list[torch.Tensor] = []
        self._params: list[nn.Parameter] = []
        self._correction: list[torch.Tensor] = []
        self._steps = 0

    def reset_private_state(self) -> None:
        super().reset_private_state()
        for c in self.control_local.values():
            c.zero_()

    def on_train_start(self) -> None:
        super().on_train_start()
        self._params = [p for _, p in self.trainable_shared()]
        self._start = [p.detach().clone() for p in self._params]
        # lr (c - c_i) is fixed while a client trains: made once, not at every step (one fused update a step)
        self._correction = [self.optim.lr * (c - ci) for c, ci in zip(self.control_global.values(),
                                                                      self.control_local.values())]
        self._steps = 0

    def on_train_batch_end(self, outputs: torch.Tensor, batch, batch_idx: int) -> None:
        with torch.no_grad():
            torch._foreach_sub_(self._params, self._correction)
        super().on_train_batch_end(outputs, batch, batch_idx)
        self._steps += 1

    def on_train_end(self) -> None:
        super().on_train_end()
        self._delta = []
        if self._steps == 0:
            self._delta = [torch.zeros_like(c) for c in self.control_local.values()]
            return
        params = self.trainable_shared()
        for (_, p), w0, c, ci in zip(params, self._start, self.control_global.values(), self.control_local.values()):
            new = control_update(ci, c, w0, p.detach(), self._steps, self.optim.lr)
            self._delta.append(new - ci)
            ci.copy_(new)

    def payload(self) -> dict[str, torch.Tensor]:
        """The model's shared weights plus ``control_delta.<param>`` = c_i+ - c_i."""
        out = {k: v for k, v in self.shared_state().items() if not k.startswith("control_global.")}
        deltas = self._delta or [torch.zeros_like(c) for c in self.control_local.values()]
        for (name, _), d in zip(self.trainable_shared(), deltas):
            out[CONTROL_DELTA + name.replace(".", "__")] = d
        return out
