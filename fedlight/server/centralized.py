"""Centralized training: one model on the union of the clients' data (the papers' upper bound)."""

from __future__ import annotations

from fedlight.server.fedavg import FedAvg


class Centralized(FedAvg):
    """The engine pools all clients' samples into a single client that trains every round;
    averaging one model is the identity, and nothing is communicated."""

    communicates = False
    pools_clients = True
