"""fedlight: federated self-supervised representation learning on Lightning Fabric.

The names in ``__all__`` are the public surface a package that extends fedlight imports
(``from fedlight import FederatedModule, Aggregator, positive, UserError``); they are defined in
``fedlight.api`` and imported on first use, so ``import fedlight`` (and the command line's checks
before training) never loads torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "Aggregator", "Batch", "Check", "ClientPayload", "ClientSchedule", "ClientWork", "FaultModel", "FederatedModule", "LocalResult",
    "ObjectiveWrapper", "OptimizerSpec", "PluginContext", "Report", "RoundPlugin", "ScheduleContext", "ScoreHead",
    "State", "UserError", "at_least", "decay", "fraction", "load_encoder", "load_local_parts", "non_empty",
    "non_negative", "percent", "positive", "probabilities", "probability", "train_client",
    "Attack", "AttackContext", "UpdateAttack",  # an attack (docs/attacks.md)
]


def __getattr__(name: str) -> Any:
    """A public name, imported from ``fedlight.api`` on first use (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module 'fedlight' has no attribute {name!r}")
    from fedlight import api

    value = globals()[name] = getattr(api, name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
