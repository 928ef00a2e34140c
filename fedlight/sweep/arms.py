"""The arms a sweep compares: ``--recipe A --recipe B`` (an arm per recipe, named by its file), or
``--arm NAME[=ITEM,ITEM,...]``, each item one of

- ``GROUP:CHOICE``: a whole section from a config group (``method:moon``, ``server:scaffold``;
  ``fedlight.config.groups``), the recipe's settings carried into it or refused in one line
  (``fedlight.sweep.carry``);
- ``~GROUP.KEY``: a setting of the recipe's ``method`` / ``server`` not to carry (Hydra's delete);
- ``KEY=VALUE``: an override of this arm only;
- a recipe (a path, or the name of a shipped one): the arm's own, instead of the one ``--recipe`` gives.

Every arm is crossed with the grid and the seeds; each task's recipe records its arm as the
top-level key ``arm`` (``fedlight report`` groups by it) and its run name starts with ``arm=NAME``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fedlight.config.bundled import resolve_recipe
from fedlight.config.groups import GROUPS, Choice, parse_choice
from fedlight.config.loader import compose, override_layers, parse_override, recipe_layers, resolve, yaml_value
from fedlight.config.schema import Recipe
from fedlight.config.structured import to_recipe
from fedlight.errors import UserError
from fedlight.sweep.carry import chosen_section
from fedlight.sweep.grid import Axis, split_values

ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # what a run name keeps as written
YAML_WORDS = {"null", "none", "true", "false", "yes", "no", "on", "off", "nan", "inf"}  # read as no string


def check_arm_name(name: str, where: str) -> None:
    """Refuse a name a run name cannot keep as written, or one YAML reads as a keyword, number or null (each
    task's recipe records ``arm=NAME`` as YAML reads it: 0x10 would be 16, 1_0 would be 10)."""
    if not ARM_NAME.fullmatch(name) or name.lower() in YAML_WORDS or yaml_value(name, where) != name:
        raise UserError(f"{where}: an arm's name is letters, digits and ._+-, not a number or a YAML word such as "
                        "null or true (e.g. --arm moon=method:moon)")


@dataclass(frozen=True)
class Arm:
    """One arm: its name, recipe file, section choices, dropped settings and own overrides."""

    name: str
    recipe: str
    choices: tuple[Choice, ...] = ()
    drops: tuple[str, ...] = ()  # dotted: method.projection_dim
    overrides: tuple[str, ...] = ()

    @property
    def who(self) -> str:
        return f"arm '{self.name}'"

    def layers(self) -> list[tuple[dict[str, Any], str]]:
        """The recipe's layers, then one per section the arm chooses or drops settings of."""
        base = recipe_layers(self.recipe)
        if not self.choices and not self.drops:
            return base
        composed = compose(base)
        overridden = {parse_override(text)[0] for text in self.overrides}
        extra = []
        for group in GROUPS:
            choice = next((c for c in self.choices if c.group == group), None)
            drop = {key.partition(".")[2] for key in self.drops if key.partition(".")[0] == group}
            if choice or drop:
                old = OmegaConf.to_container(composed[group])
                keys = {key.partition(".")[2] for key in overridden if key.partition(".")[0] == group}
                where = f"the {group} of {self.who}" + (f" ({choice.path})" if choice else "")
                extra.append(({group: chosen_section(group, old, choice, drop, keys, self.who)}, where))
        return [*base, *extra]

    def record(self) -> dict[str, Any]:
        """The arm as the sweep's manifest lists it."""
        return {"name": self.name, "recipe": str(Path(self.recipe).resolve()),
                "choices": [f"{c.group}:{c.option}" for c in self.choices], "drops": list(self.drops),
                "overrides": list(self.overrides)}

    def load(self, overrides: list[str]) -> Recipe:
        """The arm's recipe with its own overrides, then ``overrides`` (the sweep's and a task's)."""
        return to_recipe(resolve(compose([*self.layers(), *override_layers([*self.overrides, *overrides])])))


def parse_arm(text: str, base: str | None) -> Arm:
    """One ``--arm NAME[=ITEM,...]`` option; ``base`` is the recipe of an arm that names none.

    Raises:
        UserError: one line naming the option: a bad name or item, two recipes or two choices of one
            group, no recipe at all.
    """
    name, _, rest = text.partition("=")
    where = f"--arm '{text}'"
    check_arm_name(name, where)
    recipes, choices, drops, overrides = [], [], [], []
    for item in (i.strip() for i in split_values(rest, where)) if rest else ():
        if not item:
            raise UserError(f"{where} has an empty item; give NAME=ITEM,ITEM,... (e.g. moon=method:moon,method.mu=1)")
        if item.startswith("~"):
            group, _, key = item[1:].partition(".")
            if group not in GROUPS or not key or "." in key:
                raise UserError(f"{where}: '{item}' must name a setting of {' or '.join(GROUPS)}, e.g. ~method.mu")
            drops.append(item[1:])
        elif "=" in item:
            if parse_override(item)[0] == "seed":  # it set the first seed of every arm (the sweep's come from it)
                raise UserError(f"{where}: an arm cannot set the seed: every arm runs the sweep's seeds, paired by "
                                "seed; drop it (seed=S after the sweep's flags starts every arm's seeds at S)")
            overrides.append(item)
        elif ":" in item and "/" not in item.partition(":")[0]:
            choices.append(parse_choice(item, where))
        else:
            recipes.append(resolve_recipe(item))
    groups = [c.group for c in choices]
    twice = next((g for g in groups if groups.count(g) > 1), None)
    if twice or len(recipes) > 1:
        what = f"two {twice} choices" if twice else "two recipes"
        raise UserError(f"{where} gives {what}; keep one")
    recipe = recipes[0] if recipes else base
    if recipe is None:
        raise UserError(f"{where} names no recipe and --recipe gives none to share; add one: --arm {name}=RECIPE,...")
    return Arm(name, recipe, tuple(choices), tuple(drops), tuple(overrides))


def parse_arms(recipes: list[str], texts: list[str]) -> list[Arm]:
    """The sweep's arms: an arm per ``--recipe`` when several are given (named by the file), then every
    ``--arm`` (sharing the one ``--recipe``, if only one is given); none for one recipe and no ``--arm``."""
    if len(recipes) == 1 and not texts:
        return []
    base = recipes[0] if len(recipes) == 1 else None
    arms = [Arm(Path(r).stem, r) for r in recipes if base is None] + [parse_arm(t, base) for t in texts]
    for arm in arms[:len(recipes) if base is None else 0]:
        check_arm_name(arm.name, f"--recipe {arm.recipe} (its file name names the arm)")
    names = [a.name for a in arms]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise UserError(f"two arms are named '{twice}'; name each with --arm NAME=RECIPE,...")
    return arms


def arm_axes(arms: list[Arm], axes: list[Axis], overrides: list[str]) -> list[tuple[str, list[Axis]]]:
    """Each arm with the grid axes that vary it: a ``method.KEY`` / ``server.KEY`` axis only for the arms
    whose class takes ``KEY`` (``--grid method.mu=0.01,0.1`` varies the FedProx arm, not FedAvg's).

    Raises:
        UserError: a grid key that names a section's class (choose it per arm), or that no arm takes.
    """
    sectioned = [a for a in axes if a.key.partition(".")[0] in GROUPS]
    if not arms or not sectioned:
        return [(arm.name, axes) for arm in arms]
    named = next((a for a in sectioned if a.key.partition(".")[2] in ("name", "objective")), None)
    if named:
        group = named.key.partition(".")[0]
        raise UserError(f"--grid {named.key} with arms: choose the {group} per arm instead "
                        f"(--arm NAME={group}:CHOICE, or --arm NAME={named.key}=VALUE)")
    from fedlight.registry import accepted_keys

    def takes(recipe: Recipe, axis: Axis) -> bool:  # server.dp.clip: the server takes ``dp``
        group, _, key = axis.key.partition(".")
        return key.partition(".")[0] in accepted_keys(group, getattr(recipe, group))

    out = []
    for arm in arms:
        recipe = arm.load(overrides)
        out.append((arm.name, [a for a in axes if a not in sectioned or takes(recipe, a)]))
    unused = next((a for a in sectioned if not any(a in varied for _, varied in out)), None)
    if unused:
        group, _, key = unused.key.partition(".")
        raise UserError(f"--grid {unused.key}: no arm's {group} takes '{key}'; check the key, or add an arm whose "
                        f"{group} does")
    return out
