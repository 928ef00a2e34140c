"""What a differentially private server's accountant assumes of a recipe, checked before any data is read.

The accountant (``fedlight.server.differential_privacy``) prices one Gaussian mechanism a round: adding
or removing one client's data moves that client's own clipped update and nothing else (the mean's
sensitivity C / m; 2C for a payloads rule, whose projection onto the ball of norm C bounds any inputs),
and a round's clients are all of them (q = 1) or a Poisson draw at q = m / K. A recipe where one
client's data reaches other clients' updates (CF-CL's exchange; attackers that read the benign updates,
beyond what a payloads rule's projection bounds, or in adaptive clipping's count), where a round draws a
fixed-size set, or where unnoised client data decides what trains (LG-FedAvg's new device arriving at an
accuracy goal), releases more than the reported epsilon bounds; each is refused in one line naming the
key to change.
"""

from __future__ import annotations

from fedlight import registry
from fedlight.attacks.attack import Attack
from fedlight.config.schema import Recipe
from fedlight.errors import UserError
from fedlight.server.aggregator import Aggregator
from fedlight.server.differential_privacy import DifferentialPrivacy


def check_privacy(recipe: Recipe, server: Aggregator, attack: Attack | None, per_round: int, trainable: int) -> None:
    """Raise a one-line UserError where ``recipe`` breaks what ``server``'s accountant assumes (nothing
    to check for a server that accounts no privacy).

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
