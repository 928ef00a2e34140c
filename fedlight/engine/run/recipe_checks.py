"""Every check ``fedlight fit`` asks of a recipe before it touches the run folder, in the order it asks them.

Each refusal is one line naming the recipe key and the fix (a ``UserError``, exit code 2), raised
before anything is written. Three stages: ``check_recipe`` before any data is read (the names and
options of the method, server, backbone, plug-ins and attack; each part's options through
``part_options``, which checks that the parts go together; the attackers, the server's client
count and what a private server's accountant assumes, ``check_privacy``); ``check_data`` against
the loaded data and its partition; ``check_module`` and ``check_round_payloads`` against the
method's built model. ``fit.prepare`` asks them all; ``fedlight sweep`` asks the same of each task
(``fit.check_elsewhere``), so a sweep refuses exactly what ``fit`` would.
"""

from __future__ import annotations

import torch

from fedlight import registry
from fedlight.attacks.attack import Attack
from fedlight.catalog import NO_ATTACK, check_name
from fedlight.config.schema import Recipe
from fedlight.data.domains import check_domain_clients
from fedlight.data.image_data import ImageData
from fedlight.data.rotated import check_device_fits
from fedlight.engine.loop.aggregation import check_payload_budget, refuse_over_budget
from fedlight.engine.loop.batched_clients import batch_refusal, refused
from fedlight.engine.loop.compiled_step import compile_refusal
from fedlight.engine.loop.sampling import clients_per_round
from fedlight.engine.parts.cfcl.exchange_schedule import check_label_free
from fedlight.engine.parts.sofed.importance_score import ImportanceScoring, ScoreHead
from fedlight.engine.run.clock_parts import async_options, check_timed_attack, check_timed_method
from fedlight.engine.run.part_options import PartOptions, part_options
from fedlight.errors import UserError
from fedlight.eval.probes import labelled_count
from fedlight.methods.federated_module import FederatedModule
from fedlight.optional import require_loggers
from fedlight.server.aggregator import Aggregator
from fedlight.server.differential_privacy import DifferentialPrivacy


def check_recipe(recipe: Recipe) -> Aggregator:
    """What a recipe can get wrong before any data is read (``fit`` and ``fedlight sweep`` both ask);
    returns the run's aggregator."""
    if "aggregate_every" in recipe.server:  # CF-CL's Ta moved from the server to the client schedule
        raise UserError("server.aggregate_every is now local.iterations (SGD iterations a round, CF-CL's Ta); "
                        f"set local.iterations={recipe.server['aggregate_every']} and drop server.aggregate_every")
    server = registry.validate(recipe.method, recipe.server, recipe.clients.num, recipe.partition.public_client,
                               recipe.seed)
    check_public_balanced(recipe, server)
    check_feature_shift(recipe, server)
    check_name("model.backbone", recipe.model.backbone, registry.BACKBONES)
    probe = registry.check_method_state(recipe.method, recipe.model.backbone)
    registry.check_plugins(recipe.plugins)
    require_loggers(recipe.loggers)
    options = part_options(recipe, server)  # each part checks its own options; part_options, that they go together
    if probe is not None:
        check_method_for_parts(probe, options)
    f = recipe.faults
    attack = registry.build_attack(f.attack, f.attack_options, f.attack_scale)  # its options, before any data
    options.faults.check_attackers(attackable_clients(recipe, server), attack)
    check_timed_attack(options.timing, attack, f.attack)
    per_round, trainable = round_size(recipe, server), trainable_clients(recipe)
    a = options.timing.asynchrony
    with registry.SERVERS.building(recipe.server["name"], "server.name"):  # a plug-in's check that raises: one line
        try:  # e.g. Krum's f; DP-FedAvg's sampling rate (refused under asynchrony)
            server.check_clients(a.step_size if a.on else per_round, trainable)
        except UserError as exc:
            if not a.on:
                raise
            raise UserError(f"{exc} (under asynchrony.mode={a.mode} a step aggregates asynchrony.buffer="
                            f"{a.step_size} updates: that is n)") from None
    check_privacy(recipe, server, attack, per_round, trainable)
    return server


def check_public_balanced(recipe: Recipe, server: Aggregator) -> None:
    """``partition.public_balanced`` replaces a public client's images by images outside ``data.subset``
    for a server that uses a public set; raises a one-line UserError where one of them is missing."""
    if not recipe.partition.public_balanced:
        return
    fix = "or set partition.public_balanced=false"
    if recipe.partition.public_client is None:
        raise UserError(f"partition.public_balanced replaces the public client's images, but partition.public_client "
                        f"is unset; set it (e.g. 0) {fix}")
    if not server.uses_public_set:
        raise UserError(f"partition.public_balanced makes a public set that server.name={recipe.server['name']} does "
                        f"not use; choose a server with one (flesd) {fix}")
    if recipe.data.subset is None:
        raise UserError("partition.public_balanced draws the public set from the training images outside "
                        f"data.subset, which is unset; set data.subset below the dataset's size {fix}")


def check_feature_shift(recipe: Recipe, server: Aggregator) -> None:
    """``partition.domains`` against the clients and the parts that draw their own images or test splits;
    raises a one-line UserError where they do not go together."""
    p = recipe.partition
    if not p.domains:
        return
    check_domain_clients(p.domains, recipe.clients.num, p.public_client)
    unset = "drop partition.domains (set it to [])"
    if p.kind == "natural":
        raise UserError("partition.kind=natural splits by writer, and partition.domains would cut each writer's "
                        f"images over several domains; the writers are the feature shift here: {unset}")
    if recipe.new_device.rotation is not None:
        raise UserError("new_device.rotation draws LG-FedAvg's new device from every domain's images and tests it "
                        f"on every domain's; {unset} or new_device.rotation")
    if server.pools_clients and recipe.eval.local_test:
        raise UserError(f"server.name={recipe.server['name']} pools every domain into one client, and eval.local_test "
                        f"scores a client on its own domain's test images only; set eval.local_test=false or {unset}")


def trainable_clients(recipe: Recipe) -> int:
    """The clients that can train: all but the public client."""
    return recipe.clients.num - (recipe.partition.public_client is not None)


def attackable_clients(recipe: Recipe, server: Aggregator) -> int:
    """The clients the attackers are drawn from, as ``assemble`` lists them: the trainable ones, the
    new device included (one when the server pools them)."""
    return 1 if server.pools_clients else trainable_clients(recipe) + (recipe.new_device.rotation is not None)


def round_size(recipe: Recipe, server: Aggregator) -> int:
    """The clients a round samples (one when the server pools them; on average under Poisson sampling)."""
    return 1 if server.pools_clients else clients_per_round(trainable_clients(recipe), recipe.clients.fraction)


def attack_class(recipe: Recipe) -> type | None:
    """The class ``faults.attack`` names (None for ``none``)."""
    return None if recipe.faults.attack == NO_ATTACK else registry.ATTACKS[recipe.faults.attack]


def check_method_for_parts(module: FederatedModule, o: PartOptions) -> None:
    """Raise the UserError for a method that lacks what a part asks of it (``check_recipe`` asks
    this of a model built on the meta device, before any data, so a sweep refuses before it submits)."""
    if o.stream is not None and o.stream.buffer.policy == "importance":
        check_score_head(module, o.stream.buffer.score)
    if o.exchange is not None:
        check_label_free(module)
    check_timed_method(module, o.timing)


def check_score_head(module: FederatedModule, head: ScoreHead) -> None:
    """Raise a UserError where ``buffer.score=projection`` would be silently ignored: a method with no
    eq. 3 of its own (no ``ImportanceScoring``) is scored by SOFed's sec. III rule, which has no online
    output to pick (``importance_score.importance_scorer``)."""
    if head == "projection" and not isinstance(module, ImportanceScoring):
        raise UserError(f"buffer.score=projection picks the online output eq. 3 compares, but {type(module).__name__} "
                        "has no score of its own (sec. III's flip rule scores it, with no output to pick); drop "
                        "buffer.score, or use a method with a predictor (byol, or fedu / fedema around it)")


def check_privacy(recipe: Recipe, server: Aggregator, attack: Attack | None, per_round: int, trainable: int) -> None:
    """Raise a one-line UserError where ``recipe`` breaks what ``server``'s accountant assumes (nothing
    to check for a server that accounts no privacy).

    The accountant (``fedlight.server.differential_privacy``) prices one Gaussian mechanism a round:
    adding or removing one client's data moves that client's own clipped update and nothing else (the
    mean's sensitivity C / m; 2C for a payloads rule, whose projection onto the ball of norm C bounds any
    inputs), and a round's clients are all of them (q = 1) or a Poisson draw at q = m / K. A recipe where
    one client's data reaches other clients' updates (CF-CL's exchange; attackers that read the benign
    updates, beyond what a payloads rule's projection bounds, or in adaptive clipping's count), where a
    round draws a fixed-size set, or where unnoised client data decides what trains (LG-FedAvg's new
    device arriving at an accuracy goal), releases more than the reported epsilon bounds; each is refused
    in one line naming the key to change.

    Args:
        recipe: the run's recipe.
        server: the run's aggregator.
        attack: what ``faults.attack`` builds (None: no attack).
        per_round: m, the clients a round samples (on average under Poisson sampling).
        trainable: K, the clients that can train.
    """
    if not server.accounts_privacy:
        return
    private = "server.dp" if recipe.server.get(registry.DP_KEY) is not None else f"server.name={recipe.server['name']}"
    if per_round < trainable and recipe.clients.sampling != "poisson":
        raise UserError(f"{private}'s privacy accountant models Poisson client sampling, "
                        f"but clients.fraction={recipe.clients.fraction:g} samples a fixed-size set of {per_round} of "
                        f"{trainable}; set clients.sampling=poisson (or clients.fraction=1)")
    if recipe.exchange.policy != "none":  # CF-CL: a device's images train its neighbours too
        raise UserError(f"{private}'s privacy accountant bounds what one client's data moves by that client's own "
                        f"update, but exchange.policy={recipe.exchange.policy} sends each device's images to its "
                        "neighbours, whose updates train on them; set exchange.policy=none to run with differential "
                        "privacy")
    new_device = recipe.new_device
    if new_device.rotation is not None and 0 < new_device.fraction < 1:  # LG-FedAvg Table 3's p
        raise UserError(f"{private}'s privacy accountant counts every device in every round (q = 1), but "
                        f"new_device.fraction={new_device.fraction:g} trains a fixed-size share of the original "
                        "devices beside the new device, which swaps one device for another; set "
                        "new_device.fraction to 0 or 1 to run with differential privacy")
    if new_device.rotation is not None and new_device.goal_acc > 0:  # when it arrives is decided on the data
        raise UserError(f"{private}'s privacy accountant prices only the noisy models, but the new device arrives "
                        "once the original devices' accuracy on their own test splits reaches "
                        f"new_device.goal_acc={new_device.goal_acc:g}, a decision on their data that no noise "
                        "covers; set new_device.goal_acc=0 (it arrives after the first evaluation) to run with "
                        "differential privacy")
    projects = isinstance(server, DifferentialPrivacy) and server.inner.needs_payloads  # the 2C ball: any inputs
    if attack is not None and attack.needs_benign and not projects:
        raise UserError(f"{private} averages clipped updates, whose sensitivity assumes one client moves one "
                        f"update, but faults.attack={recipe.faults.attack} builds every attacker's update from the "
                        "benign clients' updates; wrap a robust rule instead (server={name: median, dp: {...}}, whose "
                        "projection bounds any inputs), or use an attack that reads none (e.g. faults.attack=sign_flip)")
    if attack is not None and attack.needs_benign and server.adaptive:  # a payloads rule (above)
        key = server.options_key
        raise UserError(f"{key}.adaptive counts the unclipped updates with noise sized for one client moving one "
                        f"count, but faults.attack={recipe.faults.attack} builds every attacker's update from the "
                        f"benign clients' updates, so one client moves every attacker's count too; set {key}.adaptive="
                        "false, or use an attack that reads none (e.g. faults.attack=sign_flip)")


def check_data(recipe: Recipe, server: Aggregator, data: ImageData, parts: list) -> list[str]:
    """The recipe against the loaded data and its partition: the method's protected attribute, the
    server's public set, the new device's sizes, then ``check_sizes``.

    Returns:
        ``check_sizes``' warnings for clamped sizes, for the caller to say once the run goes ahead.

    Raises:
        UserError: the data lacks what the method, the server or the new device needs.
    """
    if getattr(registry.METHODS[recipe.method["name"]], "uses_protected", False) and data.train_a is None:
        raise UserError(f"method.name={recipe.method['name']} needs a dataset with a protected attribute; "
                        f"data.name={recipe.data.name} has none (use data.name=diabetes)")
    if server.uses_public_set:  # e.g. FLESD's queue against its public set: needs the partition, not the run
        f = recipe.fabric
        server.check_public_set(len(parts[recipe.partition.public_client]), f.devices * f.num_nodes)
    if recipe.new_device.rotation is not None:  # its sizes against the splits, before the run folder
        check_device_fits(data, recipe.new_device.train, recipe.new_device.test)
    return check_sizes(recipe, data, parts)


def check_sizes(recipe: Recipe, data: ImageData, parts: list) -> list[str]:
    """Sizes against the data: a test split smaller than the classes is refused (its accuracy measures
    nothing); a size above what it counts is clamped by the engine, which one warning line says.

    Returns:
        the warning for each clamped size, for the caller to say once the run goes ahead.

    Raises:
        UserError: ``data.test_subset``, or a domain's share of the test split, below the number of classes.
    """
    d, l, e = recipe.data, recipe.local, recipe.eval
    if d.test_subset is not None and d.test_subset < data.num_classes:
        raise UserError(f"recipe key 'data.test_subset' is {d.test_subset}, fewer test images than the "
                        f"{data.num_classes} classes: an accuracy over them measures nothing; "
                        f"raise it to at least {data.num_classes} or drop it")
    if data.test_domain is not None:  # each domain's accuracy is reported on its own share of the test split
        domains = len(data.domain_names)
        fewest = int(torch.bincount(data.test_domain, minlength=domains).min())
        if fewest < data.num_classes:
            size = "data.test_subset" if d.test_subset is not None else f"the test split of data.name={d.name}"
            raise UserError(f"partition.domains gives a domain {fewest} test images, fewer than the {data.num_classes} "
                            f"classes: its accuracy measures nothing; raise {size} to at least "
                            f"{domains * data.num_classes} or list fewer domains")
    clamped = []
    largest = max(len(part) for part in parts)
    if l.batch_size > largest:
        clamped.append(f"local.batch_size={l.batch_size} is above every client's samples (the most: {largest}); "
              f"a local step takes a client's whole data, as local.batch_size={largest} would")
    labelled = labelled_count(data.train_y.numpy(), e.label_fraction)
    if e.knn_k > labelled:
        clamped.append(f"eval.knn_k={e.knn_k} is above the {labelled} labelled training samples "
                       f"(eval.label_fraction={e.label_fraction:g}); the kNN vote takes all {labelled}")
    return clamped


def check_module(recipe: Recipe, module: FederatedModule) -> None:
    """The recipe against the method's built model (on the real data's shape or the dataset's,
    ``fit.check_elsewhere``): label poisoning, ``local.compile`` and ``local.batched_clients``."""
    check_label_attack(recipe, module)
    check_compile(recipe, module)
    check_batched_method(recipe, module)


def check_label_attack(recipe: Recipe, module: FederatedModule) -> None:
    """Refuse label poisoning on a method that never reads a label: its attackers would train as the others."""
    attack = attack_class(recipe)
    if attack is not None and attack.poisons_labels and not module.uses_labels:
        raise UserError(f"faults.attack={recipe.faults.attack} poisons the attackers' labels, which "
                        f"method.name={recipe.method['name']} never reads (it learns without labels); use an attack "
                        "on updates (e.g. faults.attack=sign_flip, alie or ipm), or a method that reads labels "
                        "(e.g. method.name=supervised)")


def check_batched_method(recipe: Recipe, module: FederatedModule) -> None:
    """Refuse ``local.batched_clients`` for a method whose step cannot train several clients at once."""
    size = recipe.local.batched_clients
    refusal = None if size is None else batch_refusal(module)
    if refusal:
        raise refused(size, f"method.name={recipe.method['name']}", refusal)


def run_device_type(accelerator: str) -> str:
    """The device type ``fabric.accelerator`` gives a run on this machine, before Fabric is built."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "mps" if accelerator == "mps" or (accelerator == "auto" and torch.backends.mps.is_available()) else "cpu"


def check_compile(recipe: Recipe, module: FederatedModule, device_type: str | None = None) -> None:
    """Refuse ``local.compile`` in one line where it cannot compile the method's step on the run's
    device (``device_type``; None: the one ``fabric.accelerator`` gives here)."""
    device_type = device_type or run_device_type(recipe.fabric.accelerator)
    refusal = compile_refusal(recipe.local.compile, module, device_type, recipe.fabric.workers,
                              recipe.local.batched_clients)
    if refusal:
        raise UserError(refusal)


def check_round_payloads(recipe: Recipe, server: Aggregator, module: FederatedModule) -> None:
    """Refuse a recipe whose round keeps more payloads (a payloads-contract server, an attack that sees
    them) than ``run.payload_budget_mb`` holds, counting the most clients a round can sample; under
    asynchrony, whose updates every server holds, the most in flight and in the buffer at once."""
    a = async_options(recipe)
    if a.on:  # every server's updates are held while they fly and while they wait in the buffer
        held = a.concurrency + a.step_size
        refuse_over_budget(module.payload(), held, recipe.run.payload_budget_mb,
                           f"asynchrony.mode={a.mode} holds every update in flight or in its buffer: "
                           f"asynchrony.concurrency={a.concurrency} + {a.step_size} = {held} updates",
                           "asynchrony.concurrency")
        return
    most = trainable_clients(recipe) if recipe.clients.sampling == "poisson" else round_size(recipe, server)
    attack = attack_class(recipe)
    check_payload_budget(server, module.payload(), most, recipe.run.payload_budget_mb, recipe.server["name"],
                         recipe.faults.attack if attack is not None and attack.needs_benign else None)
