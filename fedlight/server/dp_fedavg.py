"""DP-FedAvg (``server.name=dp_fedavg``): client-level differential privacy around FedAvg (McMahan,
Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language Models", ICLR 2018,
Algorithm 1), with adaptive clipping as an option (Andrew et al., NeurIPS 2021).

The name predates ``server.dp``, which wraps any aggregator: ``server={name: dp_fedavg, clip: 0.5}``
and ``server={name: fedavg, dp: {clip: 0.5}}`` release the same models, bit for bit, and report the
same epsilon (``fedlight.server.differential_privacy``: the threat model, the noise and the accounting).
"""

from __future__ import annotations

from fedlight.server.differential_privacy import DifferentialPrivacy


class DPFedAvg(DifferentialPrivacy):
    """DP-FedAvg with a trusted server: clipped updates, their fixed-denominator mean plus Gaussian noise
    z C / m, epsilon from Opacus's RDP accountant (``DifferentialPrivacy`` around FedAvg; its options are
    ``server.*`` keys here, the same as ``server.dp.*`` there)."""

    options_key = "server"
