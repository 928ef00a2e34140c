"""DP-FedAvg: client-level differential privacy (McMahan, Ramage, Talwar, Zhang, "Learning
Differentially Private Recurrent Language Models", ICLR 2018, Algorithm 1), with adaptive
clipping as an option (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning
with Adaptive Clipping", NeurIPS 2021, Algorithm 1).

Threat model: the server is trusted. It sees every client's update in the clear; what it
releases, the sequence of global models, is (epsilon, delta)-DP with respect to adding or
removing one client's whole data (client-level, not example-level, privacy). A client is one
participant; nothing protects a client from the server or from a malicious peer. A simulation, not a
secure implementation: the noise comes from a torch generator seeded by (seed, round), which anyone
with the recipe can replay, and floating-point attacks on Gaussian sampling are not addressed. What
the engine logs beside the models (which clients were sampled and answered, their losses and update
norms, the probe's accuracies on training images) is outside the accounted release (README).

Each round, with m the clients a round samples, C the clipping norm and z the noise multiplier:

    Delta_k = x_k - x_t,  clipped: Delta_k * min(1, C / ||Delta_k||)       (every float tensor)
    x_{t+1} = x_t + (sum_k clipped Delta_k) / m + N(0, (z C / m)^2 I)

the fixed-denominator estimator (every client weighs the same; McMahan et al.'s f~_f with equal
weights), so the sum's sensitivity is C. Integer buffers (BatchNorm's batch counters) are not
released: they keep the global model's values. A BatchNorm ``running_var`` the noise made negative
is clamped at 0 after the release (post-processing, free of privacy cost): a negative variance makes
the layer's outputs NaN in evaluation, which no probe can score. With ``adaptive``, C follows the
``target_quantile`` of the update norms: b~ = (#{k: ||Delta_k|| <= C} + N(0, sigma_b^2)) / m and
C <- C exp(-clip_lr (b~ - target_quantile)); the count's noise is paid for by raising the updates'
multiplier to z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) (Andrew et al., Theorem 1), so the
round costs what one Gaussian mechanism of multiplier z costs.

Accounting: Opacus's RDP accountant (the sampled Gaussian mechanism, Mironov et al. 2019) with
sampling rate q = m / K over the K clients that train (``check_clients``' population: a
``partition.public_client`` never trains, so it is not one of them), one step a round; epsilon at
``delta`` after each round is the history's ``dp_epsilon``. That analysis models Poisson sampling, and fedlight's
sampling matches it: with ``clients.fraction=1`` every client takes part in every round (q = 1);
below 1 the recipe must set ``clients.sampling=poisson`` (each client joins a round with
probability q = m / K, m = round(fraction K); ``check_recipe`` refuses a fixed-size sample, which
the analysis does not bound). m is then the expected round size, McMahan et al.'s fixed
denominator, and a round that samples nobody still releases x_t + noise
(``Aggregator.accounts_privacy``), as the sampled Gaussian mechanism does.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import torch

from fedlight.config.checks import open_unit, positive, probability
from fedlight.errors import UserError
from fedlight.seeding import torch_generator
from fedlight.server.aggregator import Aggregator, ClientPayload, State

DP_INSTALL = "pip install 'fedlight[dp]'"
RDP_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))  # Opacus's default alphas
# The accountant's RDP grows as rounds x order / z^2: it overflows float64 near z = 1e-151 (at 1e-155 Opacus
# returns inf at q = 1 and never returns at q < 1). 1e-6 leaves 145 orders of magnitude for any rounds and
# delta (epsilon about 5e11 a round: no privacy, yet finite), and still allows a negligible-noise ablation.
NOISE_MULTIPLIER_MIN = 1e-6


def accountable(z: float) -> str | None:
    """A noise multiplier the RDP accountant gives a finite epsilon for: >= ``NOISE_MULTIPLIER_MIN``."""
    return None if z >= NOISE_MULTIPLIER_MIN else (
        f"must be >= {NOISE_MULTIPLIER_MIN:g} (below it the privacy accountant overflows; such noise gives no "
        "privacy anyway)")


def clip(update: State, norm: float, bound: float) -> State:
    """``update * min(1, bound / norm)`` (McMahan et al. 2018, Algorithm 1's ClipFn)."""
    scale = min(1.0, bound / norm) if norm > 0 else 1.0
    return {k: v * scale for k, v in update.items()}


def update_multiplier(z: float, count_noise: float) -> float:
    """z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2): the updates' noise multiplier that, with the clipped
    count's noise sigma_b, costs what one Gaussian mechanism of multiplier z does (Andrew et al. 2021, Thm. 1)."""
    rest = z ** -2 - (2 * count_noise) ** -2
    if rest <= 0:
        raise UserError(f"server.noise_multiplier={z} leaves no privacy for the updates once the clipped count "
                        f"takes its share (server.count_noise={count_noise:g} needs noise_multiplier < "
                        f"{2 * count_noise:g}); raise server.count_noise or lower server.noise_multiplier")
    return rest ** -0.5


def epsilon(q: float, z: float, rounds: int, delta: float) -> float:
    """(epsilon at ``delta``) of ``rounds`` sampled Gaussian mechanisms of rate ``q`` and multiplier ``z``
    (Opacus's RDP accountant)."""
    if rounds == 0:
        return 0.0
    try:
        from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    except ImportError:
        raise UserError(f"server.name=dp_fedavg needs opacus's privacy accountant; {DP_INSTALL}") from None
    rdp = compute_rdp(q=q, noise_multiplier=z, steps=rounds, orders=RDP_ORDERS)
    return float(get_privacy_spent(orders=RDP_ORDERS, rdp=rdp, delta=delta)[0])


class DPFedAvg(Aggregator):
    """DP-FedAvg with a trusted server (module docstring: the threat model and the accounting).

    Args:
        clip: C, the clipping norm of a client's update (its starting value with ``adaptive``).
        noise_multiplier: z, at least ``NOISE_MULTIPLIER_MIN``; the server's noise has standard deviation z C / m.
        delta: the delta epsilon is reported at, in (0, 1) (1e-5; below 1 / K is the usual choice).
        adaptive: follow a quantile of the update norms with C (Andrew et al. 2021).
        target_quantile: gamma, the share of updates left unclipped (0.5); with clip_lr and count_noise, adaptive only.
        clip_lr: eta_C, the geometric step of C (0.2).
        count_noise: sigma_b, the clipped count's noise (None: m / 20, the paper's choice).
        seed: the run seed (the engine's: the noise is keyed by seed and round).
    """

    needs_payloads = True
    accounts_privacy = True
    option_needs = {"target_quantile": "adaptive", "clip_lr": "adaptive", "count_noise": "adaptive"}

    def __init__(self, clip: Annotated[float, positive] = 1.0, noise_multiplier: Annotated[float, accountable] = 1.0,
                 delta: Annotated[float, open_unit] = 1e-5, adaptive: bool = False,
                 target_quantile: Annotated[float, probability] = 0.5, clip_lr: Annotated[float, positive] = 0.2,
                 count_noise: Annotated[float, positive] | None = None, seed: int = 0) -> None:
        self.clip, self.z, self.delta, self.adaptive = clip, noise_multiplier, delta, adaptive
        self.target_quantile, self.clip_lr, self.count_noise = target_quantile, clip_lr, count_noise
        self.seed, self.per_round, self.population, self.rounds = seed, 1, 1, 0

    def check_clients(self, per_round: int, population: int) -> None:
        """Record m, the clients a round samples (the noise's denominator), and K, the trainable clients
        the engine samples them from (the accountant's rate is m / K); raise a UserError where adaptive
        clipping's count noise leaves the updates no privacy."""
        self.per_round, self.population = per_round, population  # m: the expected round size under Poisson sampling
        try:  # one line now rather than after a round's training
            import opacus  # noqa: F401
        except ImportError:
            raise UserError(f"server.name=dp_fedavg needs opacus's privacy accountant; {DP_INSTALL}") from None
        self._update_multiplier()

    def _count_noise(self) -> float:
        return self.count_noise if self.count_noise is not None else self.per_round / 20

    def _update_multiplier(self) -> float:
        return update_multiplier(self.z, self._count_noise()) if self.adaptive else self.z

    def finalize(self, global_state: State, payloads: list[ClientPayload]) -> State:
        floats = [k for k, v in global_state.items() if v.is_floating_point()]
        g = {k: global_state[k].detach().cpu().double() for k in floats}
        total = {k: torch.zeros_like(v) for k, v in g.items()}
        unclipped = 0
        for p in payloads:  # client order: the same sum on any number of ranks and workers
            update = {k: p.payload[k].double() - g[k] for k in floats}
            norm = math.sqrt(sum(float(v.square().sum()) for v in update.values()))
            unclipped += norm <= self.clip
            for k, v in clip(update, norm, self.clip).items():
                total[k] += v
        m, gen = self.per_round, torch_generator(self.seed, "dp", self.rounds)
        sigma = self._update_multiplier() * self.clip / m
        out = dict(global_state)
        for k in floats:
            noise = torch.randn(g[k].shape, generator=gen, dtype=torch.float64) * sigma
            released = g[k] + total[k] / m + noise
            if k.endswith("running_var"):  # a BatchNorm variance pushed below 0 makes every output NaN
                released = released.clamp_min(0)  # post-processing: no privacy cost
            out[k] = released.to(global_state[k].device, global_state[k].dtype)
        if self.adaptive:  # the noisy share of unclipped updates moves C towards the target quantile
            share = (unclipped + float(torch.randn((), generator=gen, dtype=torch.float64)) * self._count_noise()) / m
            self.clip *= math.exp(-self.clip_lr * (share - self.target_quantile))
        self.rounds += 1
        return out

    def metrics(self, rounds: int) -> dict[str, float]:
        """``dp_epsilon`` after ``rounds`` rounds at ``delta``, and ``dp_clip``, the current C."""
        q = min(1.0, self.per_round / self.population)
        return {"dp_epsilon": epsilon(q, self.z, rounds, self.delta), "dp_clip": self.clip}

    def state_dict(self) -> dict[str, Any]:
        return {"clip": self.clip, "rounds": self.rounds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip, self.rounds = float(state.get("clip", self.clip)), int(state.get("rounds", 0))
