"""Adaptive server optimizers: FedAdagrad, FedAdam, FedYogi (Reddi et al., "Adaptive Federated
Optimization", ICLR 2021, Algorithm 2).

The clients train as under FedAvg; the server reads the sample-weighted mean of their models
minus the global model as a pseudo-gradient Delta_t (the mean of the client deltas
Delta_i = x_i - x_t, weighted like FedAvg) and takes one adaptive step with it:

    m_t = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t = v_{t-1} + Delta_t^2                                         (FedAdagrad)
    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                       (FedAdam)
    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)   (FedYogi)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

element by element, with m_{-1} = 0 and v_{-1} = tau^2 (Algorithm 2 asks v_{-1} >= tau^2) and,
as Algorithm 2 writes it, no bias correction and the same beta1 momentum for all three.
Defaults: beta1 = 0.9, beta2 = 0.99, tau = 1e-3 (sec. 5 fixes the betas for every task; the
authors' experiment flags set server_adam_beta_1=0.9, beta_2=0.99, epsilon=tau=0.001); the
server learning rate eta is tuned per task in the paper (its Appendix lists the best eta per
task): 1e-2 here, the value Flower's FedAdam / FedYogi take as default. Where the authors'
experiments ran Keras optimizers they differ from Algorithm 2 in details this module does not
copy: Adam's bias correction, Adagrad without momentum, an initial accumulator of 0 for
Adagrad and Yogi (``beta1=0`` gives Adagrad without momentum here).

Only learnable float tensors take the adaptive step. BatchNorm running statistics
(``*.running_mean``, ``*.running_var``) are not gradients of anything, so they and every
integer buffer (``num_batches_tracked``) are averaged as FedAvg averages them (TFF's server
optimizers treat a model's non-trainable weights the same way). The moments m and v are the
aggregator's state: checkpointed and restored, so a resumed run ends bit for bit where a
straight one ends.
"""

from __future__ import annotations

from typing import Annotated, Any

import torch

from fedlight.config.checks import decay, positive
from fedlight.server import ops
from fedlight.server.aggregator import State
from fedlight.server.fedavg import FedAvg

RUNNING_STATISTICS = ("running_mean", "running_var")


def takes_adaptive_step(key: str, tensor: torch.Tensor) -> bool:
    """Whether the state entry ``key`` is a learnable float tensor (not a BN statistic or an int buffer)."""
    return tensor.is_floating_point() and key.rpartition(".")[2] not in RUNNING_STATISTICS


class FedOpt(FedAvg):
    """FedAvg's accumulator with an adaptive server step; subclasses give the second moment.

    Args:
        server_lr: eta, the server learning rate.
        beta1: first-moment decay, in [0, 1).
        tau: the adaptivity tau (v_{-1} = tau^2); smaller is more adaptive.
    """

    def __init__(self, server_lr: Annotated[float, positive] = 1e-2, beta1: Annotated[float, decay] = 0.9,
                 tau: Annotated[float, positive] = 1e-3) -> None:
        self.server_lr, self.beta1, self.tau = server_lr, beta1, tau
        self.m: State = {}
        self.v: State = {}

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        """v_t from v_{t-1} and Delta_t^2 (both float64, the tensor's shape)."""
        raise NotImplementedError

    def finalize(self, global_state: State, acc: State | None) -> State:
        """x_{t+1} from x_t and the summed client models; unchanged (moments too) without answers.

        Args:
            global_state: x_t, name -> tensor of the layer's shape (e.g. (C_out, C_in, k, k)).
            acc: ``weighted_sum`` of the answering clients' states (float64, the same shapes).
        Returns:
            x_{t+1}, shaped and typed as ``global_state``; ``self.m`` / ``self.v`` hold m_t / v_t for
            the entries that take the adaptive step (same shapes, the model's dtype but at least float32;
            the step itself is computed in float64).
        """
        out = super().finalize(global_state, acc)  # FedAvg's result: kept for the statistics and ints
        if out is global_state:  # no answer: the model and the moments stay
            return out
        m_new, v_new = {}, {}
        for k, x in global_state.items():
            if not takes_adaptive_step(k, x):
                continue
            delta = acc[k] / acc[ops.WEIGHT_KEY] - x.double()  # Delta_t, float64
            m = self.m.get(k)
            m = torch.zeros_like(delta) if m is None else m.to(delta.device, torch.float64)
            v = self.v.get(k)
            v = torch.full_like(delta, self.tau ** 2) if v is None else v.to(delta.device, torch.float64)
            m = self.beta1 * m + (1 - self.beta1) * delta
            v = self.second_moment(v, delta * delta)
            out[k] = (x.double() + self.server_lr * m / (v.sqrt() + self.tau)).to(x.dtype)
            keep = torch.promote_types(x.dtype, torch.float32)  # tau^2 = 1e-6 is subnormal in float16
            m_new[k], v_new[k] = m.to(keep), v.to(keep)  # kept (and checkpointed) at the model's precision
        self.m, self.v = m_new, v_new  # keys no longer shared (LG leaving FedAvg) are dropped
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"m": {k: t.cpu() for k, t in self.m.items()}, "v": {k: t.cpu() for k, t in self.v.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.m, self.v = dict(state.get("m", {})), dict(state.get("v", {}))


class FedAdagrad(FedOpt):
    """FedAdagrad: v_t = v_{t-1} + Delta_t^2 (Reddi et al. 2021, Algorithm 2).

    Args:
        server_lr: eta.
        beta1: first-moment decay (0 gives Adagrad without momentum).
        tau: adaptivity.
    """

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v + delta_sq


class _WithBeta2(FedOpt):
    """A server optimizer whose second moment decays with ``beta2``.

    Args:
        server_lr: eta.
        beta1: first-moment decay.
        beta2: second-moment decay, in [0, 1) (0.99).
        tau: adaptivity.
    """

    def __init__(self, server_lr: Annotated[float, positive] = 1e-2, beta1: Annotated[float, decay] = 0.9,
                 beta2: Annotated[float, decay] = 0.99, tau: Annotated[float, positive] = 1e-3) -> None:
        super().__init__(server_lr, beta1, tau)
        self.beta2 = beta2


class FedAdam(_WithBeta2):
    """FedAdam: v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2.

    Reddi et al. 2021, Algorithm 2; the options are ``_WithBeta2``'s.
    """

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq


class FedYogi(_WithBeta2):
    """FedYogi: v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2).

    Reddi et al. 2021, Algorithm 2; the options are ``_WithBeta2``'s.
    """

    def second_moment(self, v: torch.Tensor, delta_sq: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.beta2) * delta_sq * torch.sign(v - delta_sq)
