"""Client-level differential privacy around any aggregator (``server.dp``): each client's update is
clipped to norm C, the round's release is a Gaussian mechanism of noise multiplier z on a statistic of
bounded sensitivity, and an RDP accountant reports epsilon (McMahan, Ramage, Talwar, Zhang, "Learning
Differentially Private Recurrent Language Models", ICLR 2018, Algorithm 1; adaptive clipping: Andrew,
Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021,
Algorithm 1). In the spirit of Flower's DP strategy wrappers, with the noise scaled to what the wrapped
rule releases.

Threat model: the server is trusted. It sees every client's update in the clear; what it releases, the
sequence of global models, is (epsilon, delta)-DP with respect to adding or removing one client's whole
data (client-level, not example-level, privacy). A simulation, not a secure implementation: the noise
comes from a torch generator seeded by (seed, round), which anyone with the recipe can replay, and
floating-point attacks on Gaussian sampling are not addressed. What the engine logs beside the models
(which clients were sampled and answered, their losses and update norms, the probe's accuracies on
training images) is outside the accounted release (docs/dp.md).

Each round, with x_t the global model, m the clients a round samples, C the clipping norm and z the
noise multiplier, every client's update is clipped, Delta_k = (x_k - x_t) min(1, C / ||x_k - x_t||)
over every float tensor, and then, by the wrapped aggregator's contract:

* sum contract (FedAvg, FedAdam, FedYogi, FedAdagrad, ...): the release is DP-FedAvg's noisy mean
  Delta~ = (sum_k Delta_k) / m + N(0, (z C / m)^2 I), the fixed-denominator estimator (every client
  weighs the same; McMahan et al.'s f~_f), whose sensitivity to one client is C / m. The wrapped
  aggregator then folds x_t + Delta~ as the round's single client and takes its step from it
  (FedAvg: x_{t+1} = x_t + Delta~, DP-FedAvg exactly; FedAdam: its adaptive step with Delta~ as the
  pseudo-gradient), which is post-processing: free of privacy cost.
* payloads contract (median, trimmed mean, Krum, Bulyan, ...): the wrapped rule receives the clipped
  models x_t + Delta_k and its answer's update u is projected onto the ball of norm C; the release is
  x_t + u + N(0, (2 z C)^2 I). Any two points of that ball are at most 2C apart, so 2C bounds how far
  adding or removing one client moves u, whatever the rule: a robust rule is not a mean, and no
  bound like the mean's C / m holds for it (Krum's choice can jump from one client's update to
  another's). The noise is 2m times the mean's: the price of the rule's freedom. The rule must keep
  no state across rounds (``state_dict``), since its state would carry last round's unnoised
  payloads into this round's release.

Either way one release is one Gaussian mechanism of multiplier z on a statistic of sensitivity S (C / m,
or 2C), so the accounting is the same: Opacus's RDP accountant of the sampled Gaussian mechanism
(Mironov, Talwar, Zhang 2019) with sampling rate q = m / K over the K clients that train
(``check_clients``' population: a ``partition.public_client`` never trains), one step a round; epsilon
at ``delta`` after each round is the history's ``dp_epsilon``. Mironov et al. analyse a sum; the bound
holds for any statistic of sensitivity S, since a round's output is a mixture, over the other clients'
draws, of pairs each bounded by the sum's (joint convexity of exp((alpha - 1) D_alpha)). That analysis
models Poisson sampling, and fedlight's sampling matches it: with ``clients.fraction=1`` every client
takes part in every round (q = 1); below 1 the recipe must set ``clients.sampling=poisson`` (each client
joins a round with probability q = m / K, m = round(fraction K)); m is then the expected round size,
and a round that samples nobody still releases x_t + noise (``Aggregator.accounts_privacy``).

Integer buffers (BatchNorm's batch counters) are not released: they keep the global model's values. A
BatchNorm ``running_var`` the noise made negative is clamped at 0 after the release (post-processing):
a negative variance makes the layer's outputs NaN in evaluation. With ``adaptive``, C follows the
``target_quantile`` of the update norms: each answering client k counts b_k - 1/2, with b_k = 1 where
||x_k - x_t|| <= C, else 0; b~ = (sum_k (b_k - 1/2) + N(0, sigma_b^2)) / m + 1/2 and
C <- C exp(-clip_lr (b~ - target_quantile)). Centred, the count changes by at most 1/2 when a client is
added or removed (uncentred, by 1), which is the sensitivity Andrew et al.'s Theorem 1 assumes (as
TensorFlow Privacy's quantile estimator does): the count's noise is paid for by raising the updates'
multiplier to z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2), so the round costs what one Gaussian mechanism
of multiplier z costs.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import torch

from fedlight.config.checks import open_unit, positive, probability
from fedlight.errors import UserError
from fedlight.seeding import torch_generator
from fedlight.server.aggregator import Aggregator, ClientPayload, State
from fedlight.server.fedavg import FedAvg
from fedlight.server.ops import float_keys

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


def state_norm(state: State) -> float:
    """The L2 norm of all of ``state``'s tensors together (each summed in its dtype, the total as a float)."""
    return math.sqrt(sum(float(v.square().sum()) for v in state.values()))


def update_multiplier(z: float, count_noise: float, key: str = "server") -> float:
    """z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2): the updates' noise multiplier that, with the clipped
    count's noise sigma_b, costs what one Gaussian mechanism of multiplier z does (Andrew et al. 2021, Thm. 1).

    Args:
        key: the recipe section of the options, for the message (``server`` or ``server.dp``).
    """
    rest = z ** -2 - (2 * count_noise) ** -2
    if rest <= 0:
        raise UserError(f"{key}.noise_multiplier={z} leaves no privacy for the updates once the clipped count "
                        f"takes its share ({key}.count_noise={count_noise:g} needs noise_multiplier < "
                        f"{2 * count_noise:g}); raise {key}.count_noise or lower {key}.noise_multiplier")
    return rest ** -0.5


def dp_epsilon(q: float, z: float, rounds: int, delta: float) -> float:
    """(epsilon at ``delta``) of ``rounds`` sampled Gaussian mechanisms of rate ``q`` and multiplier ``z``
    (Opacus's RDP accountant): what ``DifferentialPrivacy`` reports as ``dp_epsilon``, whichever rule it wraps.

    Examples:
        >>> round(dp_epsilon(q=1.0, z=1.0, rounds=20, delta=1e-5), 2)
        30.13
    """
    if rounds == 0:
        return 0.0
    try:
        from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    except ImportError:
        raise UserError(f"differential privacy needs opacus's privacy accountant; {DP_INSTALL}") from None
    rdp = compute_rdp(q=q, noise_multiplier=z, steps=rounds, orders=RDP_ORDERS)
    return float(get_privacy_spent(orders=RDP_ORDERS, rdp=rdp, delta=delta)[0])


def wrap_problem(inner: Aggregator) -> str | None:
    """Why ``DifferentialPrivacy`` cannot wrap ``inner``, or None: it must release a model made from
    payloads that hold the global state's tensors, keep no state across rounds under the payloads
    contract, and not be private already."""
    if not inner.communicates:
        return "nothing is released by a server whose clients communicate nothing"
    if not inner.payload_is_state:
        return "its clients send more than the model's tensors (control variates, similarities), which clipping does not bound"
    if inner.accounts_privacy:
        return "it is differentially private already"
    if inner.needs_payloads and type(inner).state_dict is not Aggregator.state_dict:
        return "it keeps state across rounds, which would carry last round's unnoised payloads into this round's release"
    return None


class DifferentialPrivacy(Aggregator):
    """Client-level DP around ``inner``, with a trusted server (module docstring: the two contracts'
    noise, the threat model and the accounting).

    Args:
        inner: the aggregator whose release is made private (None: FedAvg, which makes DP-FedAvg).
        clip: C, the clipping norm of a client's update (its starting value with ``adaptive``).
        noise_multiplier: z, at least ``NOISE_MULTIPLIER_MIN``: the noise's standard deviation is z times
            the release's sensitivity (C / m around a sum-contract server, 2C around a payloads one).
        delta: the delta epsilon is reported at, in (0, 1) (1e-5; below 1 / K is the usual choice).
        adaptive: follow a quantile of the update norms with C (Andrew et al. 2021).
        target_quantile: gamma, the share of updates left unclipped (0.5); with clip_lr and count_noise, adaptive only.
        clip_lr: eta_C, the geometric step of C (0.2).
        count_noise: sigma_b, the clipped count's noise (None: m / 20, the paper's choice).
        seed: the run seed (the engine's: the noise is keyed by seed and round).

    Examples:
        >>> dp = DifferentialPrivacy(Median(), clip=0.5, noise_multiplier=1.1)
        >>> dp.check_clients(per_round=10, population=100)  # m = 10 of K = 100: q = 0.1
        >>> round(dp.metrics(rounds=50)["dp_epsilon"], 2)
        4.9
    """

    needs_payloads = True  # a client's update is clipped against the round's global model
    accounts_privacy = True
    option_needs = {"target_quantile": "adaptive", "clip_lr": "adaptive", "count_noise": "adaptive"}
    options_key = "server.dp"  # where a recipe sets the options, for messages

    def __init__(self, inner: Aggregator | None = None, clip: Annotated[float, positive] = 1.0,
                 noise_multiplier: Annotated[float, accountable] = 1.0, delta: Annotated[float, open_unit] = 1e-5,
                 adaptive: bool = False, target_quantile: Annotated[float, probability] = 0.5,
                 clip_lr: Annotated[float, positive] = 0.2, count_noise: Annotated[float, positive] | None = None,
                 seed: int = 0) -> None:
        inner = FedAvg() if inner is None else inner
        problem = wrap_problem(inner)
        if problem:
            raise ValueError(f"DifferentialPrivacy cannot wrap {type(inner).__name__}: {problem}")
        self.inner, self.clip, self.delta, self.adaptive = inner, clip, delta, adaptive
        self.noise_multiplier = noise_multiplier  # z
        self.target_quantile, self.clip_lr, self.count_noise = target_quantile, clip_lr, count_noise
        self.seed, self.per_round, self.population, self.rounds = seed, 1, 1, 0

    def check_clients(self, per_round: int, population: int) -> None:
        """Record m, the clients a round samples (the mean's denominator), and K, the trainable clients the
        engine samples them from (the accountant's rate is m / K); raise a UserError where adaptive
        clipping's count noise leaves the updates no privacy, or where the wrapped rule refuses m."""
        self.per_round, self.population = per_round, population  # m: the expected round size under Poisson sampling
        try:  # one line now rather than after a round's training
            import opacus  # noqa: F401
        except ImportError:
            raise UserError(f"differential privacy ({self.options_key}.*) needs opacus's privacy accountant; "
                            f"{DP_INSTALL}") from None
        self._update_multiplier()
        self.inner.check_clients(per_round, population)

    def _count_noise(self) -> float:
        return self.count_noise if self.count_noise is not None else self.per_round / 20

    def _update_multiplier(self) -> float:
        if not self.adaptive:
            return self.noise_multiplier
        return update_multiplier(self.noise_multiplier, self._count_noise(), self.options_key)

    def finalize(self, global_state: State, payloads: list[ClientPayload]) -> State:
        floats = float_keys(global_state)
        g = {k: global_state[k].detach().cpu().double() for k in floats}
        clipped, unclipped = [], 0
        for p in payloads:  # client order: the same result on any number of ranks and workers
            update = {k: p.payload[k].double() - g[k] for k in floats}
            norm = state_norm(update)
            unclipped += norm <= self.clip
            clipped.append(ClientPayload(p.client, p.weight, clip(update, norm, self.clip)))
        if self.inner.needs_payloads:
            step, sensitivity = self._rule_step(global_state, g, clipped), 2 * self.clip
        else:
            step, sensitivity = self._mean_step(g, clipped), self.clip / self.per_round
        m, gen = self.per_round, torch_generator(self.seed, "dp", self.rounds)
        sigma = self._update_multiplier() * sensitivity
        released = {}
        for k in floats:
            noise = torch.randn(g[k].shape, generator=gen, dtype=torch.float64) * sigma
            released[k] = g[k] + step[k] + noise
            if k.endswith("running_var"):  # a BatchNorm variance pushed below 0 makes every output NaN
                released[k] = released[k].clamp_min(0)  # post-processing: no privacy cost
        if self.adaptive:  # the noisy share of unclipped updates moves C towards the target quantile
            noise = float(torch.randn((), generator=gen, dtype=torch.float64)) * self._count_noise()
            # (sum_k (b_k - 1/2) + noise) / m + 1/2, the centred count of sensitivity 1/2 that update_multiplier
            # assumes, summed as (#unclipped + (m - n) / 2 + noise) / m: a full round adds nothing to the count
            share = (unclipped + (m - len(payloads)) / 2 + noise) / m
            self.clip *= math.exp(-self.clip_lr * (share - self.target_quantile))
        self.rounds += 1
        return self._post_process(global_state, released)

    def _mean_step(self, g: State, clipped: list[ClientPayload]) -> State:
        """(sum_k Delta_k) / m: the fixed-denominator mean of the clipped updates, every client weighing the same."""
        total = {k: torch.zeros_like(v) for k, v in g.items()}
        for p in clipped:
            for k, v in p.payload.items():
                total[k] += v
        return {k: v / self.per_round for k, v in total.items()}

    def _rule_step(self, global_state: State, g: State, clipped: list[ClientPayload]) -> State:
        """The wrapped payloads rule's update on the clipped models, projected onto the ball of norm C
        (zero when nobody answered)."""
        if not clipped:
            return {k: torch.zeros_like(v) for k, v in g.items()}
        cpu = {k: v.detach().cpu() for k, v in global_state.items()}
        models = [ClientPayload(p.client, p.weight, {**cpu, **{k: (g[k] + v).to(cpu[k].dtype) for k, v in
                                                                 p.payload.items()}}) for p in clipped]
        answer = self.inner.finalize(global_state, models)
        step = {k: answer[k].detach().cpu().double() - g[k] for k in g}
        return clip(step, state_norm(step), self.clip)

    def _post_process(self, global_state: State, released: State) -> State:
        """The new global state from the noisy release: a sum-contract server folds it as its one client and
        takes its step (FedAvg's is the release itself); integer buffers keep the global model's values."""
        if self.inner.needs_payloads:
            return {**global_state, **{k: v.to(global_state[k].device, global_state[k].dtype)
                                       for k, v in released.items()}}
        one = {**global_state, **{k: v.to(global_state[k].device) for k, v in released.items()}}
        return self.inner.finalize(global_state, self.inner.accumulate(None, one, 1.0))

    def metrics(self, rounds: int) -> dict[str, float]:
        """The wrapped server's metrics, ``dp_epsilon`` after ``rounds`` rounds at ``delta``, and ``dp_clip``, C."""
        q = min(1.0, self.per_round / self.population)
        return {**self.inner.metrics(rounds), "dp_epsilon": dp_epsilon(q, self.noise_multiplier, rounds, self.delta),
                "dp_clip": self.clip}

    def state_dict(self) -> dict[str, Any]:
        inner = self.inner.state_dict()
        return {"clip": self.clip, "rounds": self.rounds, **({"inner": inner} if inner else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip, self.rounds = float(state.get("clip", self.clip)), int(state.get("rounds", 0))
        self.inner.load_state_dict(state.get("inner", {}))
