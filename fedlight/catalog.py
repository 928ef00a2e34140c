"""Every built-in method, aggregator, backbone, client schedule and attack by name, none of them
imported; and the round plug-ins other packages add.

A name maps to the ``module:attr`` that defines it, imported when the entry is first used
(``fedlight.extensions.Table``), so a recipe's names can be checked before torch is imported
(``engine/run/preflight.py``): a mistyped ``method.name`` is one line within a second, not after the
seconds of imports. ``fedlight.registry`` builds and validates from these same tables.
"""

from __future__ import annotations

from typing import Any

from fedlight.errors import UserError
from fedlight.extensions import Table, a_callable, describe, describe_name, subclass_of

# local objectives; ``fedprox``, ``scaffold``, ``lg``, ``fedbn``, ``fedu`` and ``fedema`` wrap the objective named by
# ``method.objective``
METHODS: Table[Any] = Table("fedlight.methods", {
    "simclr": "fedlight.methods.simclr:SimCLR", "byol": "fedlight.methods.byol:BYOL",
    "supervised": "fedlight.methods.supervised:Supervised", "moon": "fedlight.methods.moon:MOON",
    "fedu": "fedlight.methods.fedu:FedU", "fedema": "fedlight.methods.fedema:FedEMA",
    "fedprox": "fedlight.methods.fedprox:FedProx", "scaffold": "fedlight.methods.scaffold_client:Scaffold",
    "triplet": "fedlight.methods.triplet:Triplet", "lg": "fedlight.methods.local_global:LocalGlobal",
    "lg_fair": "fedlight.methods.fair:FairLocalGlobal", "fedbn": "fedlight.methods.fedbn:FedBN",
    # the six objectives below import only fedlight's public surface, as an outside package's method would
    "simsiam": "fedlight.methods.simsiam:SimSiam", "moco": "fedlight.methods.moco:MoCo",
    "barlow_twins": "fedlight.methods.barlow_twins:BarlowTwins", "vicreg": "fedlight.methods.vicreg:VICReg",
    "swav": "fedlight.methods.swav:SwAV", "dino": "fedlight.methods.dino:DINO",
}, subclass_of("fedlight.methods.federated_module:FederatedModule"))
SERVERS: Table[Any] = Table("fedlight.aggregators", {
    "fedavg": "fedlight.server.fedavg:FedAvg", "scaffold": "fedlight.server.scaffold:ScaffoldServer",
    "local_only": "fedlight.server.local_only:LocalOnly", "centralized": "fedlight.server.centralized:Centralized",
    "flesd": "fedlight.server.flesd:FLESD", "fedadam": "fedlight.server.fedopt:FedAdam",
    "fedyogi": "fedlight.server.fedopt:FedYogi", "fedadagrad": "fedlight.server.fedopt:FedAdagrad",
    "median": "fedlight.server.median:Median", "trimmed_mean": "fedlight.server.median:TrimmedMean",
    "krum": "fedlight.server.krum:Krum", "bulyan": "fedlight.server.bulyan:Bulyan",
    "dp_fedavg": "fedlight.server.dp_fedavg:DPFedAvg",
}, subclass_of("fedlight.server.aggregator:Aggregator"))
# ``(channels, image_size) -> nn.Module``
BACKBONES: Table[Any] = Table("fedlight.backbones", {
    name: f"fedlight.models.backbones:{attr}" for name, attr in {
        "small_cnn": "small_cnn", "tiny_cnn": "tiny_cnn", "resnet18": "resnet18_cifar", "moon_cnn": "MoonCNN",
        "cfcl_cnn": "CFCLCNN", "lenet5": "LeNet5", "mlp": "mlp", "mlp_small": "mlp_small"}.items()
}, a_callable)
# how a client spends its round (``local.schedule``), built from a ``ScheduleContext``: fedlight's own by their
# ``from_context``, a package's factory called with it
SCHEDULES: Table[Any] = Table("fedlight.schedules", {
    "epochs": "fedlight.engine.parts.fedavg.epoch_schedule:EpochSchedule",
    "stream": "fedlight.engine.parts.sofed.stream_schedule:StreamSchedule",
    "exchange": "fedlight.engine.parts.cfcl.exchange_schedule:ExchangeSchedule",
}, a_callable)

# round plug-ins from other packages (``plugins: {name: {options}}``), built with a ``PluginContext``;
# fedlight's own are switched on by their own keys (``ROUND_PARTS``), so the table holds none
PLUGINS: Table[Any] = Table("fedlight.plugins", {}, subclass_of("fedlight.engine.loop.interfaces:RoundPlugin"))
# fedlight's own round plug-ins, in the order they run, each built by its ``from_context(PluginContext)``, which
# gives None where the recipe does not ask for it: LG-FedAvg's local tests (``eval.local_test``), FLESD's public-set
# distillation (a server that uses one), LG-FedAvg's new device (``new_device.rotation``), the ``drift`` reading
ROUND_PARTS = ("fedlight.engine.parts.lg_fedavg.local_tests:LocalTests",
               "fedlight.engine.parts.flesd.public_set_distillation:PublicSetDistillation",
               "fedlight.engine.parts.lg_fedavg.new_device:NewDevice", "fedlight.engine.loop.client_drift:ClientDrift")

# Byzantine attacks (``faults.attack``; ``faults.attack_options`` are the constructor's options, docs/attacks.md)
ATTACKS: Table[Any] = Table("fedlight.attacks", {
    "sign_flip": "fedlight.attacks.sign_flip:SignFlip", "noise": "fedlight.attacks.gaussian_noise:GaussianNoise",
    "collude": "fedlight.attacks.collusion:Collusion", "labels": "fedlight.attacks.label_flip:LabelFlip",
    "alie": "fedlight.attacks.alie:ALIE", "ipm": "fedlight.attacks.ipm:IPM",
}, subclass_of("fedlight.attacks.attack:Attack"))
NO_ATTACK = "none"  # faults.attack's default: no client attacks


def check_name(key: str, name: Any, table: Table[Any]) -> None:
    """Raise the UserError for a recipe ``key`` (e.g. ``method.name``) naming nothing in ``table``."""
    if not isinstance(name, str) or name not in table:  # a list or mapping is no name (nor hashable)
        raise UserError(f"unknown {key} {name!r}; valid names: {', '.join(table)}")


def check_names(method: dict[str, Any], server: dict[str, Any], backbone: str, plugins: Any = (),
                attack: str = NO_ATTACK) -> None:
    """``method.name``, ``server.name``, ``model.backbone``, each key of ``plugins`` and ``faults.attack``
    name something (no import)."""
    check_name("method.name", method.get("name"), METHODS)
    check_name("server.name", server.get("name"), SERVERS)
    check_name("model.backbone", backbone, BACKBONES)
    for name in plugins:
        check_name("plugins key", name, PLUGINS)
    check_attack_name(attack)


def check_attack_name(attack: str) -> None:
    """Raise the UserError for a ``faults.attack`` that is neither ``none`` nor an attack's name."""
    if attack != NO_ATTACK and attack not in ATTACKS:
        raise UserError(f"unknown faults.attack {attack!r}; valid names: {NO_ATTACK}, {', '.join(ATTACKS)}")


def _tables() -> dict[str, Table[Any]]:
    return {"methods": METHODS, "aggregators": SERVERS, "backbones": BACKBONES, "client schedules": SCHEDULES,
            "round plug-ins": PLUGINS, "attacks": ATTACKS}


def describe_all(columns: int | None = None) -> str:
    """Every name with the first sentence of its description (``fedlight methods``), wrapped to
    ``columns`` (None: one line each), read from the sources: neither torch nor the parts are imported."""
    return describe(_tables(), columns)


def describe_one(name: str, columns: int | None = None) -> str:
    """The whole description of ``name`` (``fedlight methods NAME``); a UserError for an unknown name."""
    return describe_name(_tables(), name, columns)
