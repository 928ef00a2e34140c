"""Builds and validates the methods, aggregators and backbones that ``fedlight.catalog`` names.

Other packages add their own through entry points (``fedlight.extensions``): the catalog's
tables find them, so they appear in the valid names an error lists and in ``fedlight methods``.

``method.*`` and ``server.*`` recipe keys are the keyword arguments of the chosen class's
constructor (minus those the engine supplies), type-checked against its annotations, so a
class's signature is its schema and its defaults are the paper's. A numeric parameter
declares its range there too (``Annotated[float, positive]``, ``fedlight.config.checks``).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from fedlight.catalog import BACKBONES, METHODS, SCHEDULES, SERVERS, check_name
from fedlight.config.coerce import coerce
from fedlight.errors import UserError
from fedlight.extensions import describe
from fedlight.methods.base import FederatedModule, OptimizerSpec
from fedlight.methods.wrapper import ObjectiveWrapper
from fedlight.server.base import Aggregator

__all__ = ["BACKBONES", "METHODS", "SCHEDULES", "SERVERS", "build_method", "build_server", "validate"]

# the server a method needs when the recipe's server does not fit it
REQUIRED_SERVER = {"scaffold": "scaffold"}

# constructor arguments the engine fills in; a recipe cannot set them
ENGINE_ARGS = frozenset({"self", "backbone", "optim", "num_classes", "objective", "num_clients", "seed"})


def _params(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor parameters a recipe sets (not ``*args`` / ``**kwargs``, nor the engine's)."""
    return {p: v for p, v in inspect.signature(cls.__init__).parameters.items()
            if p not in ENGINE_ARGS and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)}


def hints(cls: type) -> dict[str, Any]:
    """The constructor's type hints, ``Annotated`` constraints included."""
    return typing.get_type_hints(cls.__init__, include_extras=True)


def _options(section: str, spec: dict[str, Any], table: dict[str, type]) -> list[tuple[type, dict[str, Any]]]:
    """[(class, kwargs)] for the section, outermost first (a wrapper, then its objective)."""
    name = spec.get("name")
    check_name(f"{section}.name", name, table)
    chain = [table[name]]
    if issubclass(chain[0], ObjectiveWrapper):
        inner = spec.get("objective", "supervised")
        if inner not in table or issubclass(table[inner], ObjectiveWrapper):
            valid = ", ".join(sorted(k for k, c in table.items() if not issubclass(c, ObjectiveWrapper)))
            raise UserError(f"{section}.objective {inner!r} is not a local objective; valid: {valid}")
        chain.append(table[inner])
    kwargs: list[dict[str, Any]] = [{} for _ in chain]
    reserved = {"name", "objective"} if len(chain) > 1 else {"name"}
    for key, value in spec.items():
        if key in reserved:
            continue
        owner = next((i for i, cls in enumerate(chain) if key in _params(cls)), None)
        if owner is None:
            valid = sorted({p for cls in chain for p in _params(cls)} | ({"objective"} if len(chain) > 1 else set()))
            raise UserError(f"unknown recipe key '{section}.{key}' for {section}.name={name}; valid keys: "
                            + (", ".join(f"{section}.{p}" for p in valid) or "none"))
        kwargs[owner][key] = coerce(value, hints(chain[owner]).get(key, Any), f"{section}.{key}")
    return list(zip(chain, kwargs))


def validate(method: dict[str, Any], server: dict[str, Any], num_clients: int,
             public_client: int | None = None, seed: int = 0) -> Aggregator:
    """Raise a UserError if the ``method`` or ``server`` section does not fit its class or the rest;
    return the aggregator the ``server`` section built."""
    _options("method", method, METHODS)
    aggregator = build_server(server, num_clients, seed)
    needed = REQUIRED_SERVER.get(method.get("name"))
    if needed and server.get("name") != needed:
        raise UserError(f"method.name={method['name']} needs server.name={needed} (got {server.get('name')!r}); "
                        f"set server.name={needed}")
    if public_client is not None and not 0 <= public_client < num_clients:
        raise UserError(f"partition.public_client={public_client} is not a client id (0..{num_clients - 1}); fix it")
    if aggregator.uses_public_set and public_client is None:
        raise UserError(f"server.name={server['name']} needs a public set: set partition.public_client (e.g. 0)")
    if aggregator.uses_public_set and num_clients < 2:
        raise UserError("a public client leaves no client to train; raise clients.num to at least 2")
    return aggregator


def build_method(method: dict[str, Any], backbone: str, channels: int, image_size: int, num_classes: int,
                 optim: OptimizerSpec) -> FederatedModule:
    """The local objective named by ``method.name`` around a fresh ``backbone`` (wrapped if asked)."""
    (outer, outer_kwargs), *inner = _options("method", method, METHODS)
    (cls, kwargs) = inner[0] if inner else (outer, outer_kwargs)
    if "num_classes" in inspect.signature(cls.__init__).parameters:
        kwargs["num_classes"] = num_classes
    module = cls(backbone=BACKBONES[backbone](channels, image_size), optim=optim, **kwargs)
    if inner and "num_classes" in inspect.signature(outer.__init__).parameters:  # LG's head
        outer_kwargs["num_classes"] = num_classes
    return outer(objective=module, **outer_kwargs) if inner else module


def build_server(server: dict[str, Any], num_clients: int, seed: int = 0) -> Aggregator:
    """The aggregator named by ``server.name`` (given ``num_clients`` and the run ``seed`` where it asks)."""
    ((cls, kwargs),) = _options("server", server, SERVERS)
    asked = inspect.signature(cls.__init__).parameters
    kwargs.update({k: v for k, v in {"num_clients": num_clients, "seed": seed}.items() if k in asked})
    return cls(**kwargs)


def describe_all() -> str:
    """Every registered name with its one-line description (``fedlight methods``)."""
    return describe({"methods": METHODS, "aggregators": SERVERS, "backbones": BACKBONES, "client schedules": SCHEDULES})
