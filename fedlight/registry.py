"""The one module that knows every concrete method, aggregator and backbone.

``method.*`` and ``server.*`` recipe keys are the keyword arguments of the chosen class's
constructor (minus those the engine supplies), type-checked against its annotations, so a
class's signature is its schema and its defaults are the paper's.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Callable

from torch import nn

from fedlight.config.coerce import coerce
from fedlight.errors import UserError
from fedlight.methods.base import FederatedModule, OptimizerSpec
from fedlight.methods.byol import BYOL
from fedlight.methods.simclr import SimCLR
from fedlight.methods.supervised import Supervised
from fedlight.models.backbones import ResNet18Cifar, SmallCNN
from fedlight.server.base import Aggregator
from fedlight.server.fedavg import FedAvg

METHODS: dict[str, type[FederatedModule]] = {"simclr": SimCLR, "byol": BYOL, "supervised": Supervised}
SERVERS: dict[str, type[Aggregator]] = {"fedavg": FedAvg}
BACKBONES: dict[str, Callable[[int], nn.Module]] = {"small_cnn": SmallCNN, "resnet18": ResNet18Cifar}

# constructor arguments the engine fills in; a recipe cannot set them
ENGINE_ARGS = frozenset({"self", "backbone", "optim", "num_classes"})


def _options(section: str, spec: dict[str, Any], table: dict[str, type]) -> tuple[type, dict[str, Any]]:
    name = spec.get("name")
    if name not in table:
        raise UserError(f"unknown {section}.name {name!r}; valid names: {', '.join(sorted(table))}")
    cls = table[name]
    params = {p: v for p, v in inspect.signature(cls.__init__).parameters.items() if p not in ENGINE_ARGS}
    hints = typing.get_type_hints(cls.__init__)
    kwargs = {}
    for key, value in spec.items():
        if key == "name":
            continue
        if key not in params:
            valid = ", ".join(f"{section}.{p}" for p in sorted(params)) or "none"
            raise UserError(f"unknown recipe key '{section}.{key}' for {section}.name={name}; valid keys: {valid}")
        kwargs[key] = coerce(value, hints.get(key, Any), f"{section}.{key}")
    return cls, kwargs


def validate(method: dict[str, Any], server: dict[str, Any]) -> None:
    """Raise a UserError if the ``method`` or ``server`` section does not fit its class."""
    _options("method", method, METHODS)
    _options("server", server, SERVERS)


def build_method(method: dict[str, Any], backbone: str, channels: int, num_classes: int,
                 optim: OptimizerSpec) -> FederatedModule:
    """The local objective named by ``method.name`` around a fresh ``backbone``."""
    cls, kwargs = _options("method", method, METHODS)
    if "num_classes" in inspect.signature(cls.__init__).parameters:
        kwargs["num_classes"] = num_classes
    return cls(backbone=BACKBONES[backbone](channels), optim=optim, **kwargs)


def build_server(server: dict[str, Any]) -> Aggregator:
    """The aggregator named by ``server.name``."""
    cls, kwargs = _options("server", server, SERVERS)
    return cls(**kwargs)
