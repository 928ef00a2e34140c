"""Colluding attackers: one crafted vector a round, sent by all of them."""

from __future__ import annotations

from fedlight.attacks.gaussian_noise import GaussianNoise


class Collusion(GaussianNoise):
    """Every attacker sends the same ``s v``, one ``v ~ N(0, I)`` per (seed, round): a crafted
    vector that a rule trusting agreement among clients (Krum) favours.

    Args:
        scale: s, ``faults.attack_scale``.
    """

    colludes = True
