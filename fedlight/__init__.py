"""fedlight: federated self-supervised representation learning on Lightning Fabric.

The names in ``__all__`` are the public surface a package that extends fedlight imports
(``from fedlight import FederatedModule, Aggregator, Median, flatten_states, UserError``); they are
defined in ``fedlight.api`` and imported on first use, so ``import fedlight`` (and the command
line's checks before training) never loads torch.
"""

from __future__ import annotations

from typing import Any

from fedlight.stays_local import keep_local

keep_local()  # telemetry off, the optional dependencies' caches out of $HOME (fedlight/stays_local.py)

__version__ = "0.1.0"

__all__ = [
    "Aggregator", "Attack", "AttackContext", "Batch", "Bulyan", "Centralized", "Check", "ClientPayload", "ClientSchedule", "ClientWork",
    "CoordinateRule", "DPFedAvg", "DifferentialPrivacy", "FLESD", "FaultModel", "FedAdagrad", "FedAdam", "FedAvg",
    "FedOpt", "FedYogi", "FederatedModule", "Krum", "LocalOnly", "LocalResult", "Median", "ObjectiveWrapper",
    "OptimizerSpec", "PluginContext", "Report", "RoundPlugin", "ScaffoldServer", "ScheduleContext",
    "State", "TrimmedMean", "UpdateAttack", "UserError", "WEIGHT_KEY", "at_least", "bulyan_select", "cast_like",
    "closest_to_median_mean", "coordinate_median", "decay", "dp_epsilon", "finish_average", "flatten_states",
    "float_keys", "fraction", "krum_scores", "krum_select", "load_encoder", "load_local_parts", "non_empty",
    "non_negative", "percent", "positive", "probabilities", "probability", "probe_encoder", "stack_states", "train_client",
    "trimmed_mean", "unflatten_state", "update_norm", "weighted_average", "weighted_sum",
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
