"""fedlight's public surface: what a package that adds a method, an aggregator, a backbone, a client
schedule, a round plug-in or an attack imports (``from fedlight import FederatedModule``), the built-in aggregators
and the state-dict math they are made of (``from fedlight import Median, flatten_states``), and what
rebuilds and scores an exported encoder (``fedlight.load_encoder``, ``fedlight.probe_encoder``).

``import fedlight`` stays cheap: ``fedlight/__init__.py`` names these in its ``__all__`` and
imports this module (and torch with it) only when one of them is first asked for. Every other
module path is internal and may move between releases.
"""

from __future__ import annotations

from fedlight.attacks.attack import Attack, AttackContext, UpdateAttack
from fedlight.config.checks import (Check, at_least, decay, fraction, non_empty, non_negative, percent, positive,
                                    probabilities, probability)
from fedlight.engine.loop.interfaces import (ClientSchedule, ClientWork, FaultModel, PluginContext, Report, RoundPlugin,
                                    ScheduleContext)
from fedlight.engine.loop.local_loop import LocalResult, train_client
from fedlight.errors import UserError
from fedlight.eval.encoder_probe import probe_encoder
from fedlight.methods.federated_module import Batch, FederatedModule, OptimizerSpec
from fedlight.methods.wrapper import ObjectiveWrapper
from fedlight.models.encoder_file import load_encoder, load_local_parts
from fedlight.server.aggregator import Aggregator, ClientPayload, State
from fedlight.server.bulyan import Bulyan
from fedlight.server.centralized import Centralized
from fedlight.server.differential_privacy import DifferentialPrivacy, dp_epsilon
from fedlight.server.dp_fedavg import DPFedAvg
from fedlight.server.fedavg import FedAvg
from fedlight.server.fedopt import FedAdagrad, FedAdam, FedOpt, FedYogi
from fedlight.server.flesd import FLESD
from fedlight.server.krum import Krum
from fedlight.server.local_only import LocalOnly
from fedlight.server.median import CoordinateRule, Median, TrimmedMean
from fedlight.server.ops import (WEIGHT_KEY, cast_like, finish_average, flatten_states, float_keys, stack_states,
                                 unflatten_state, update_norm, weighted_average, weighted_sum)
from fedlight.server.robust_ops import (bulyan_select, closest_to_median_mean, coordinate_median, krum_scores,
                                        krum_select, trimmed_mean)
from fedlight.server.scaffold import ScaffoldServer

__all__ = [
    # a method (entry point ``fedlight.methods``) and what its training_step receives
    "FederatedModule", "ObjectiveWrapper", "OptimizerSpec", "Batch",
    # an aggregator (``fedlight.aggregators``), the state it folds, and what a payloads-contract
    # aggregator's finalize receives
    "Aggregator", "State", "ClientPayload",
    # every built-in aggregator, to subclass, wrap or compose (docs/aggregators.md)
    "FedAvg", "FedOpt", "FedAdagrad", "FedAdam", "FedYogi", "ScaffoldServer", "CoordinateRule", "Median",
    "TrimmedMean", "Krum", "Bulyan", "DifferentialPrivacy", "DPFedAvg", "FLESD", "LocalOnly", "Centralized",
    # the pure state-dict math they are made of: sums and averages, flattening, casting back
    "WEIGHT_KEY", "weighted_sum", "finish_average", "weighted_average", "update_norm", "float_keys", "stack_states",
    "flatten_states", "unflatten_state", "cast_like",
    # robust rules on stacked client values, (n, ...) or (n, D), and the privacy accountant
    "coordinate_median", "trimmed_mean", "krum_scores", "krum_select", "bulyan_select", "closest_to_median_mean",
    "dp_epsilon",
    # a client schedule (``fedlight.schedules``) or a round plug-in (``fedlight.plugins``)
    "ClientSchedule", "ScheduleContext", "ClientWork", "LocalResult", "train_client",
    "RoundPlugin", "PluginContext", "FaultModel", "Report",
    # a Byzantine attack (``fedlight.attacks``; docs/attacks.md) and what its ``craft`` receives
    "Attack", "UpdateAttack", "AttackContext",
    # the ranges a constructor's options declare (``Annotated[float, positive]``)
    "Check", "positive", "non_negative", "fraction", "probability", "decay", "percent", "at_least", "probabilities",
    "non_empty",
    # a mistake its user can fix: one line, exit code 2
    "UserError",
    # a trained encoder that ``fedlight export RUN_DIR`` wrote, rebuilt without its recipe
    "load_encoder", "load_local_parts",
    # its kNN and linear probe, as its run scored them (or with another protocol: a downstream probe)
    "probe_encoder",
]
