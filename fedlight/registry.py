"""Builds and validates the methods, aggregators, backbones, round plug-ins and attacks that ``fedlight.catalog`` names.

Other packages add their own through entry points (``fedlight.extensions``): the catalog's
tables find them, so they appear in the valid names an error lists and in ``fedlight methods``.

``method.*`` and ``server.*`` recipe keys are the keyword arguments of the chosen class's
constructor (minus those fedlight passes itself, ``SUPPLIED``: a recipe that sets one of them is
refused in one line), type-checked against its annotations, so a class's signature is its schema
and its defaults are the paper's. A numeric parameter declares its range there too
(``Annotated[float, positive]``, ``fedlight.config.checks``). A round plug-in from another package
(``plugins.<name>.*``) is configured the same way, and so is ``server.dp``: the options of the
differential-privacy wrapper around the chosen aggregator (``server/differential_privacy.py``), and
``server.compress``, the compression of the uploads it receives (``compression/update_compression.py``),
and so is an attack (``faults.attack_options.*``).

``resolved_settings`` records what a run's classes are built with, defaults included, so that a
default changed in a later release cannot change an old run unnoticed (``engine/run/run_folder.py``
compares the record when the run resumes).
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Mapping
from typing import Any

import torch

from fedlight.attacks.attack import Attack
from fedlight.compression.update_compression import KIND_OPTIONS, UpdateCompression
from fedlight.catalog import (ATTACKS, BACKBONES, METHODS, NO_ATTACK, PLUGINS, ROUND_PARTS, SCHEDULES, SERVERS,
                              check_attack_name, check_name)
from fedlight.config.coerce import coerce
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule, OptimizerSpec
from fedlight.methods.wrapper import ObjectiveWrapper
from fedlight.server.aggregator import Aggregator
from fedlight.server.differential_privacy import DifferentialPrivacy, wrap_problem

__all__ = ["ATTACKS", "BACKBONES", "METHODS", "PLUGINS", "SCHEDULES", "SERVERS", "accepted_keys", "attack_settings",
           "build_attack", "build_compression", "build_method", "build_plugins", "build_server", "is_wrapper", "objective_of",
           "resolved_settings", "validate"]

# the server a method needs when the recipe's server does not fit it
REQUIRED_SERVER = {"scaffold": "scaffold"}
# the method a server needs: SCAFFOLD's server without its clients' control variates is FedAvg's weighted mean
REQUIRED_METHOD = {"scaffold": "scaffold"}

# constructor arguments fedlight passes itself where a class's constructor names them, by recipe section, with
# where each value comes from: a recipe that sets one is refused (its value would be overwritten)
SUPPLIED = {
    "method": {"backbone": "the network model.backbone names", "optim": "the optimizer local.* describes",
               "num_classes": "the data's number of classes", "objective": "the local objective method.objective names"},
    "server": {"num_clients": "the clients that train: clients.num, less a public client", "seed": "the recipe's seed",
               "inner": "the aggregator server.name names, wrapped by server.dp"},
    "plugins": {"context": "the run, a PluginContext"},
    "faults": {"scale": "faults.attack_scale"},  # an attack's, in faults.attack_options
}
# the ``server`` key that wraps the chosen aggregator in differential privacy (its value: the wrapper's options)
DP_KEY = "dp"
# the ``server`` key that compresses the clients' uploads to the chosen aggregator (its value: the options)
COMPRESS_KEY = "compress"
WRAPPER_KEYS = (DP_KEY, COMPRESS_KEY)  # server keys that are no option of the aggregator server.name names


def _signature(cls: type) -> Mapping[str, inspect.Parameter]:
    """The constructor's parameters, ``self`` included."""
    return inspect.signature(cls.__init__).parameters


def supplied(cls: type, section: str) -> dict[str, str]:
    """The constructor arguments of ``cls`` that fedlight passes itself in a recipe ``section`` (``method``,
    ``server``, ``server.dp``, ``plugins.<name>``), each with where its value comes from; a round plug-in's
    first argument, whatever its name, is the run's ``PluginContext``."""
    named, params = SUPPLIED[section.partition(".")[0]], list(_signature(cls))[1:]
    if section.startswith("plugins.") and params:
        return {params[0]: named["context"]}
    return {k: v for k, v in named.items() if k in params}


def _params(cls: type, section: str) -> dict[str, inspect.Parameter]:
    """The constructor parameters a recipe sets in ``section`` (not ``*args`` / ``**kwargs``, nor fedlight's)."""
    engine = supplied(cls, section)
    return {p: v for p, v in list(_signature(cls).items())[1:]
            if p not in engine and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)}


def hints(cls: type) -> dict[str, Any]:
    """The constructor's type hints, ``Annotated`` constraints included."""
    return typing.get_type_hints(cls.__init__, include_extras=True)


def objective_of(spec: dict[str, Any]) -> str:
    """The local objective a wrapper's ``method`` section wraps: its ``objective``, else the
    wrapper's ``default_objective`` (supervised; BYOL for FedU and FedEMA)."""
    return spec.get("objective", METHODS[spec["name"]].default_objective)


def _chain(section: str, spec: dict[str, Any], table: dict[str, type]) -> list[type]:
    """The classes the section builds, outermost first (a wrapper, then its objective)."""
    name = spec.get("name")
    check_name(f"{section}.name", name, table)
    chain = [table[name]]
    if issubclass(chain[0], ObjectiveWrapper):
        inner = spec.get("objective", chain[0].default_objective)
        if inner not in table or issubclass(table[inner], ObjectiveWrapper):
            valid = ", ".join(sorted(k for k, c in table.items() if not issubclass(c, ObjectiveWrapper)))
            raise UserError(f"{section}.objective {inner!r} is not a local objective; valid: {valid}")
        chain.append(table[inner])
    return chain


def is_wrapper(method_name: str) -> bool:
    """Whether ``method.name`` names a wrapper (fedprox, scaffold, lg, fedbn, ...) of ``method.objective``."""
    check_name("method.name", method_name, METHODS)
    return issubclass(METHODS[method_name], ObjectiveWrapper)


def accepted_keys(section: str, spec: dict[str, Any]) -> list[str]:
    """The option keys (besides ``name`` and a wrapper's ``objective``) that a ``method`` or ``server``
    section naming ``spec['name']`` (and ``spec['objective']``) takes, sorted."""
    keys = {p for cls in _chain(section, spec, METHODS if section == "method" else SERVERS)
            for p in _params(cls, section)}
    return sorted(keys | (set(WRAPPER_KEYS) if section == "server" else set()))


def _options(section: str, spec: dict[str, Any], table: dict[str, type],
             named: str | None = None) -> list[tuple[type, dict[str, Any]]]:
    """[(class, kwargs)] for the section, outermost first (a wrapper, then its objective); ``named``:
    what chose the class, as an unknown key's error names it (default: ``<section>.name=<name>``)."""
    name = spec.get("name")
    chain = _chain(section, spec, table)
    kwargs: list[dict[str, Any]] = [{} for _ in chain]
    reserved = {"name", "objective"} if len(chain) > 1 else {"name"}
    for key, value in spec.items():
        if key in reserved:
            continue
        owner = next((i for i, cls in enumerate(chain) if key in _params(cls, section)), None)
        engine = next((supplied(cls, section)[key] for cls in chain if key in supplied(cls, section)), None)
        if owner is None and engine:
            raise UserError(f"{section}.{key} cannot be set: fedlight passes {key} to the constructor itself "
                            f"({engine}); drop {section}.{key}")
        if owner is None:
            valid = sorted({p for cls in chain for p in _params(cls, section)}
                           | ({"objective"} if len(chain) > 1 else set()))
            named = named or (section if "." in section else f"{section}.name={name}")  # plugins.<name>, server.dp
            raise UserError(f"unknown recipe key '{section}.{key}' for {named}; valid keys: "
                            + (", ".join(f"{section}.{p}" for p in valid) or "none"))
        kwargs[owner][key] = coerce(value, hints(chain[owner]).get(key, Any), f"{section}.{key}")
    return list(zip(chain, kwargs))


def validate(method: dict[str, Any], server: dict[str, Any], num_clients: int,
             public_client: int | None = None, seed: int = 0) -> Aggregator:
    """Raise a UserError if the ``method`` or ``server`` section does not fit its class or the rest;
    return the aggregator the ``server`` section built (``server.compress`` is checked where the run's
    compression is built, ``build_compression``)."""
    _options("method", method, METHODS)
    aggregator = build_server(server, num_clients - (public_client is not None), seed)  # N: the public client never trains
    needed = REQUIRED_SERVER.get(method.get("name"))
    if needed and server.get("name") != needed:
        raise UserError(f"method.name={method['name']} needs server.name={needed} (got {server.get('name')!r}); "
                        f"set server.name={needed}")
    needs = REQUIRED_METHOD.get(server.get("name"))
    if needs and method.get("name") != needs:
        raise UserError(f"server.name={server['name']} needs method.name={needs} (got {method.get('name')!r}): without "
                        f"its clients it runs FedAvg's weighted mean; set method.name={needs} (a sweep's arm: "
                        f"method:{needs} beside server:{server['name']})")
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
    with BACKBONES.building(backbone, f"model.backbone={backbone}"):
        net = BACKBONES[backbone](channels, image_size)
    if not isinstance(net, torch.nn.Module):
        raise UserError(f"model.backbone={backbone}: its factory ({BACKBONES.origin(backbone)}) returned a "
                        f"{type(net).__name__}, not a torch.nn.Module; fix or uninstall the package that "
                        "declares it")
    name = method["name"]
    objective = objective_of(method) if inner else name
    with METHODS.building(objective, f"method.objective={objective}" if inner else f"method.name={name}"):
        module = cls(backbone=net, optim=optim, **kwargs)
    if not inner:
        return module
    if "num_classes" in inspect.signature(outer.__init__).parameters:  # LG's head
        outer_kwargs["num_classes"] = num_classes
    with METHODS.building(name, f"method.name={name}"):
        return outer(objective=module, **outer_kwargs)


def check_declared(module: FederatedModule) -> None:
    """Raise the UserError for a method whose state is not all declared shared, private or transient, that
    keeps state in non-persistent buffers outside its transient modules, or that still defines the old
    method hook ``on_round_start``."""
    if hasattr(module, "on_round_start"):  # an old method hook (now update_split): the loop would never call it
        raise UserError(f"{type(module).__name__} defines on_round_start, which fedlight no longer calls on a method; "
                        "rename it update_split (fedlight.engine.loop.interfaces.ChangingSplit, docs/method_contract.md)")
    undeclared = module.undeclared_state()
    if undeclared:
        modules = sorted({key.split(".")[0] for key in undeclared})
        raise UserError(f"{type(module).__name__} has state in no declared module: {', '.join(modules)} "
                        f"({undeclared[0]}, ...); add {'them' if len(modules) > 1 else 'it'} to the class's "
                        "private_modules (kept by each client), shared_modules (averaged by the server) or "
                        "transient_modules (rebuilt every round)")
    unsaved = module.unsaved_state()
    if unsaved:
        raise UserError(f"{type(module).__name__} keeps state in non-persistent buffers ({', '.join(unsaved[:3])}"
                        f"{', ...' if len(unsaved) > 3 else ''}), which every client would share and --resume lose; "
                        "register them again as persistent (memory.register_buffer('bank', memory.bank) for a lightly "
                        "memory bank) and declare their module in private_modules, or "
                        "declare it in transient_modules if it is rebuilt every round (docs/method_contract.md)")


def check_method_state(method: dict[str, Any], backbone: str) -> FederatedModule | None:
    """``check_declared`` before any data is read, on a model built on torch's meta device (no
    memory, no initialisation) for 3 x 32 x 32 images of 10 classes: which sub-modules a method
    has does not depend on those sizes. A method that cannot be built so (its options refused,
    or sizes it needs) is left to ``build_method`` on the real data, which raises the same.
    Returns the probe model (None where it could not be built), for the parts' own checks."""
    try:
        with torch.device("meta"):
            probe = build_method(method, backbone, 3, 32, 10, OptimizerSpec())
    except Exception:  # noqa: BLE001 - the real build, with the data's sizes, reports it
        return None
    check_declared(probe)
    return probe


def _check_needs(section: str, cls: type, kwargs: dict[str, Any]) -> None:
    """Raise the UserError for an option that acts only with a boolean option the recipe leaves off."""
    for key, flag in getattr(cls, "option_needs", {}).items():
        if key in kwargs and not kwargs.get(flag, _params(cls, section)[flag].default):
            raise UserError(f"{section}.{key} acts only with {section}.{flag}=true; set {section}.{flag}=true or drop "
                            f"{section}.{key}")


def _wrapper_options(server: dict[str, Any], key: str, cls: type, what: str, example: str,
                     chooser: str) -> dict[str, Any] | None:
    """The options of the wrapper ``server.<key>`` (``cls``'s, the ``what`` options), or None where it is unset;
    refused in one line when it is no mapping (``example``: a setting that works) or names itself (``chooser``:
    what chooses it)."""
    options = server.get(key)
    if options is None:
        return None
    if not isinstance(options, dict):
        raise UserError(f"server.{key} must be a mapping of the {what} options (e.g. server.{key}={example}), "
                        f"got {options!r}")
    if "name" in options:
        raise UserError(f"server.{key}.name: {chooser}; drop server.{key}.name")
    ((_, kwargs),) = _options(f"server.{key}", {**options, "name": key}, {key: cls})
    return kwargs


def _dp_options(server: dict[str, Any]) -> dict[str, Any] | None:
    """The options of ``server.dp`` (the differential-privacy wrapper's), or None where it is unset."""
    kwargs = _wrapper_options(server, DP_KEY, DifferentialPrivacy, "differential-privacy",
                              "{noise_multiplier: 1.0, clip: 1.0}, or server.dp={} for the defaults",
                              "server.dp wraps the aggregator server.name names")
    if kwargs is not None:
        _check_needs("server.dp", DifferentialPrivacy, kwargs)
    return kwargs


def build_server(server: dict[str, Any], num_clients: int, seed: int = 0) -> Aggregator:
    """The aggregator named by ``server.name`` (given ``num_clients`` and the run ``seed`` where it asks),
    wrapped in differential privacy where ``server.dp`` is set."""
    dp = _dp_options(server)
    name = server.get("name")
    ((cls, kwargs),) = _options("server", _own_options(server), SERVERS)
    for key in WRAPPER_KEYS:
        if key in _signature(cls):
            raise UserError(f"server.name={name}: the constructor of {SERVERS.origin(name)} takes '{key}', which "
                            f"a recipe's server.{key} sets around any aggregator; rename that argument in the "
                            "package that declares it")
    _check_needs("server", cls, kwargs)
    engine = {"num_clients": num_clients, "seed": seed}
    kwargs.update({k: v for k, v in engine.items() if k in supplied(cls, "server")})
    with SERVERS.building(name, f"server.name={name}"):
        aggregator = cls(**kwargs)
    if dp is None:
        return aggregator
    problem = wrap_problem(aggregator)
    if problem:
        raise UserError(f"server.dp cannot wrap server.name={name}: {problem}; drop server.dp or choose another "
                        "server.name")
    return DifferentialPrivacy(aggregator, **dp, seed=seed)


def _own_options(server: dict[str, Any]) -> dict[str, Any]:
    """The ``server`` section without the wrappers' keys (``server.dp``, ``server.compress``)."""
    return {k: v for k, v in server.items() if k not in WRAPPER_KEYS}


def _compress_options(server: dict[str, Any]) -> dict[str, Any] | None:
    """The options of ``server.compress`` (the upload compression's), or None where it is unset."""
    kwargs = _wrapper_options(server, COMPRESS_KEY, UpdateCompression, "compression", "{kind: qsgd, bits: 4}",
                              "the compression is chosen by server.compress.kind; set that")
    if kwargs is None:
        return None
    kind = kwargs.get("kind", "none")
    for key, kinds in KIND_OPTIONS.items():
        if key in kwargs and kind not in kinds:
            raise UserError(f"server.compress.{key} acts only with server.compress.kind={' or '.join(kinds)} (got "
                            f"kind={kind}); drop server.compress.{key} or change the kind")
    block = kwargs.get("block")
    if kwargs.get("rotate") and block is not None and block & (block - 1):
        raise UserError(f"server.compress.block={block}: a rotated block must be a power of two (e.g. "
                        f"{1 << block.bit_length()}); change it or drop server.compress.rotate")
    if kwargs.get("error_feedback") and kind == "none":
        raise UserError("server.compress.error_feedback keeps what a client did not send, and kind=none sends "
                        "everything; choose a kind (e.g. topk) or drop server.compress.error_feedback")
    return kwargs


def compression_refusal(aggregator: Aggregator) -> str | None:
    """Why clients of ``aggregator`` have no model update to compress, or None."""
    if not aggregator.communicates:
        return "its clients upload nothing"
    if aggregator.uses_public_set:
        return "its clients upload similarities on a public set, which have their own dtype and top-k options"
    if not aggregator.payload_is_state:
        return "its clients upload more than their model (control variates), which has no update to compress"
    return None


def build_compression(server: dict[str, Any], aggregator: Aggregator, seed: int = 0) -> UpdateCompression | None:
    """The compression ``server.compress`` asks of the clients' uploads to ``aggregator`` (None where it is
    unset); raises a one-line UserError where its options are wrong or the server's clients upload no model."""
    kwargs = _compress_options(server)
    if kwargs is None:
        return None
    refusal = compression_refusal(aggregator)
    if refusal:
        raise UserError(f"server.compress cannot compress the uploads of server.name={server.get('name')}: "
                        f"{refusal}; drop server.compress")
    return UpdateCompression(**kwargs, seed=seed)


def _plugin_options(name: Any, options: Any) -> list[tuple[type, dict[str, Any]]]:
    """[(class, kwargs)] of the round plug-in ``plugins.<name>``, whose value is its options (or empty)."""
    check_name("plugins key", name, PLUGINS)
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise UserError(f"plugins.{name} must be a mapping of the plug-in's options (e.g. plugins.{name}={{}}), "
                        f"got {options!r}")
    if "name" in options:  # the section's key names the plug-in
        raise UserError(f"plugins.{name}.name: a plug-in is named by its key in plugins; drop plugins.{name}.name")
    return _options(f"plugins.{name}", {"name": name, **options}, PLUGINS)


def check_plugins(plugins: dict[str, Any]) -> None:
    """Raise the UserError for a ``plugins`` section naming an unknown plug-in or options it does not take."""
    for name, options in plugins.items():
        _plugin_options(name, options)


def build_plugins(plugins: dict[str, Any], context: Any) -> list[Any]:
    """The run's round plug-ins (``context``: an ``engine.loop.interfaces.PluginContext``): fedlight's own that
    the recipe asks for (``catalog.ROUND_PARTS``, each ``cls.from_context(context)``), then those of the recipe's
    ``plugins`` section, each ``cls(context, **options)``, in the section's order."""
    built = []
    for entry in ROUND_PARTS:  # imported here, on first use, as the tables' built-ins are
        module, _, attr = entry.partition(":")
        part = getattr(importlib.import_module(module), attr).from_context(context)
        if part is not None:
            built.append(part)
    for name, options in plugins.items():
        ((cls, kwargs),) = _plugin_options(name, options)
        with PLUGINS.building(name, f"plugins.{name}"):
            built.append(cls(context, **kwargs))
    return built


def _attack_options(name: str, options: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """(class, kwargs) of the attack ``faults.attack`` names, from ``faults.attack_options``."""
    check_attack_name(name)
    for key, fix in (("name", "the attack is named by faults.attack"), ("scale", "its scale is faults.attack_scale")):
        if key in options:
            raise UserError(f"faults.attack_options.{key}: {fix}; set that and drop faults.attack_options.{key}")
    ((cls, kwargs),) = _options("faults.attack_options", {"name": name, **options}, ATTACKS, f"faults.attack={name}")
    return cls, kwargs


def _attack_scale(cls: type, scale: float) -> dict[str, float]:
    """``{"scale": faults.attack_scale}`` for an attack whose constructor takes a ``scale``, else nothing."""
    return {"scale": scale} if "scale" in inspect.signature(cls.__init__).parameters else {}


def build_attack(name: str, options: dict[str, Any], scale: float) -> Attack | None:
    """The attack ``faults.attack`` names (None for ``none``), built with ``faults.attack_options`` and
    ``faults.attack_scale`` as its ``scale`` where its constructor takes one.

    Raises:
        UserError: an unknown name, an option it does not take or out of its range, or its
            constructor (another package's) raised.
    """
    if name == NO_ATTACK:
        return None
    cls, kwargs = _attack_options(name, options)
    with ATTACKS.building(name, f"faults.attack={name}"):
        return cls(**kwargs, **_attack_scale(cls, scale))


def attack_settings(name: str, options: dict[str, Any], scale: float) -> dict[str, Any]:
    """What ``build_attack`` builds the attack with: ``{name, scale (where it takes one), every
    other option}``, defaults included."""
    cls, kwargs = _attack_options(name, options)
    return _constructed({"name": name, **_attack_scale(cls, scale)}, [(cls, kwargs)], "faults.attack_options")


def _plain(value: Any) -> Any:
    """``value`` as YAML and JSON keep it and give it back equal: tuples as lists, other objects as text."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _constructed(head: dict[str, Any], chain: list[tuple[type, dict[str, Any]]], section: str) -> dict[str, Any]:
    """``head`` then every parameter of the chain's constructors a recipe may set in ``section``, with the
    value the class is built with: the recipe's, else the default (a key belongs to the outermost class
    that takes it, as ``_options`` assigns it)."""
    out = dict(head)
    for cls, kwargs in chain:
        for key, param in _params(cls, section).items():
            if key not in out and (key in kwargs or param.default is not param.empty):
                out[key] = _plain(kwargs.get(key, param.default))
    return out


def _backbone_built(name: str, channels: int, image_size: int) -> dict[str, Any]:
    """What ``model.backbone`` builds for the data: its factory's further defaults (a backbone takes
    only ``(channels, image_size)`` from fedlight), its ``feature_dim`` and its number of parameters,
    which change with any width or layer a later release gives it. Built on the meta device (no
    memory), or on the CPU where a backbone cannot be built there."""
    factory = BACKBONES[name]
    params = list(inspect.signature(factory).parameters.values())[2:]
    out: dict[str, Any] = {"name": name, **{p.name: _plain(p.default) for p in params if p.default is not p.empty}}
    try:
        with torch.device("meta"):
            net = factory(channels, image_size)
    except Exception:  # noqa: BLE001 - e.g. weights copied from data in its constructor
        net = factory(channels, image_size)
    return {**out, "feature_dim": int(net.feature_dim), "parameters": sum(p.numel() for p in net.parameters())}


def resolved_settings(method: dict[str, Any], server: dict[str, Any], backbone: str, plugins: dict[str, Any],
                      channels: int, image_size: int) -> dict[str, Any]:
    """The run's ``resolved`` record: what its method, aggregator, backbone and round plug-ins are
    built with, defaults included (the recipe's other sections are written in full already).

    Returns:
        ``{"method": {name, objective (a wrapper's), every option}, "server": {..., "dp": {every option}
        where server.dp is set, "compress": {every option} where server.compress is set},
        "backbone": {name, feature_dim, parameters, ...}, "plugins": {name: {every option}}}``.
    """
    chain = _options("method", method, METHODS)
    head = {"name": method["name"]}
    if len(chain) > 1:
        head["objective"] = objective_of(method)
    built = _constructed({"name": server["name"]}, _options("server", _own_options(server), SERVERS), "server")
    dp, compress = _dp_options(server), _compress_options(server)
    if dp is not None:
        built[DP_KEY] = _constructed({}, [(DifferentialPrivacy, dp)], "server.dp")
    if compress is not None:
        built[COMPRESS_KEY] = _constructed({}, [(UpdateCompression, compress)], "server.compress")
    return {"method": _constructed(head, chain, "method"), "server": built,
            "backbone": _backbone_built(backbone, channels, image_size),
            "plugins": {name: _constructed({}, _plugin_options(name, options), f"plugins.{name}")
                        for name, options in plugins.items()}}
