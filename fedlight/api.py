"""fedlight's public surface: what a package that adds a method, an aggregator, a backbone, a client
schedule, a round plug-in or an attack imports (``from fedlight import FederatedModule``), and what rebuilds an
exported encoder (``fedlight.load_encoder``).

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
from fedlight.methods.federated_module import Batch, FederatedModule, OptimizerSpec, ScoreHead
from fedlight.methods.wrapper import ObjectiveWrapper
from fedlight.models.encoder_file import load_encoder, load_local_parts
from fedlight.server.aggregator import Aggregator, ClientPayload, State

__all__ = [
    # a method (entry point ``fedlight.methods``) and what its training_step receives
    "FederatedModule", "ObjectiveWrapper", "OptimizerSpec", "Batch", "ScoreHead",
    # an aggregator (``fedlight.aggregators``), the state it folds, and what a payloads-contract
    # aggregator's finalize receives
    "Aggregator", "State", "ClientPayload",
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
]
