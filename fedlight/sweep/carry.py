"""Carrying a recipe's ``method`` / ``server`` settings into the section a config group's choice
(``method:moon``, ``fedlight.config.groups``) replaces it with, never dropping one silently:

- a key the recipe set that the chosen class also takes carries over (SimCLR's ``temperature`` into
  ``fedprox`` around SimCLR); where the group file sets it to another value, the choice is refused
  until the caller says which (an override of the key, or dropping the recipe's);
- a key the chosen class does not take is refused, unless the caller drops it (``~method.KEY``);
- a wrapper (``fedprox``, ``scaffold``, ``fedbn``, ``lg``) whose file names no ``objective`` wraps the
  recipe's objective (its ``method.name``, or the ``objective`` of the wrapper it replaces).

Reading which keys a class takes imports it (``fedlight.registry``): torch is loaded here.
"""

from __future__ import annotations

from typing import Any

from fedlight.config.groups import Choice
from fedlight.config.loader import Replace
from fedlight.errors import UserError

IDENTITY = ("name", "objective")  # what a choice replaces; every other key is a setting


def chosen_section(group: str, old: dict[str, Any], choice: Choice | None, drop: set[str], overridden: set[str],
                   who: str) -> Replace:
    """The ``group`` section an arm runs with: ``choice``'s (or ``old`` itself) with ``old``'s settings carried.

    Args:
        group: ``method`` or ``server``.
        old: the recipe's section, as composed (its ``name`` and the keys it set).
        choice: the group file chosen for the section, or None to keep ``old``'s class.
        drop: keys of ``old`` not to carry (``~method.KEY``): the file's value or the class default applies.
        overridden: keys the caller's overrides set afterwards: no conflict with the file is refused for them.
        who: who asks, for messages (``arm 'moon'``).

    Raises:
        UserError: one line naming the key and ``who``: a setting the chosen class does not take, a
            setting the file gives another value, a dropped key the recipe does not set.
    """
    from fedlight.registry import accepted_keys, is_wrapper, objective_of

    gone = sorted(drop - set(old))
    if gone:
        raise UserError(f"{who}: ~{group}.{gone[0]} drops nothing: the recipe sets no {group}.{gone[0]} "
                        f"({group} {old['name']}); remove it")
    new = choice.section() if choice else {k: v for k, v in old.items() if k in IDENTITY}
    if group == "method" and "objective" not in new and is_wrapper(new["name"]):
        inner = old.get("objective") if is_wrapper(old["name"]) else old["name"]
        if inner is None and objective_of(old) != objective_of({"name": new["name"]}):
            inner = objective_of(old)  # the old wrapper's own default (FedU's BYOL), not the new one's
        new.update({"objective": inner} if inner else {})
    accepted = accepted_keys(group, new)
    chosen = f"{group} {new['name']}" + (f" (objective {new['objective']})" if "objective" in new else "")
    for key, value in old.items():
        if key in IDENTITY or key in drop:
            continue
        if key not in accepted:
            raise UserError(f"{who}: {group}.{key}={value!r}, set by the recipe for {group} {old['name']}, is not "
                            f"a key of {chosen}; drop it for this arm with ~{group}.{key} (valid keys: "
                            f"{', '.join(accepted) or 'none'})")
        if key in new and new[key] != value and key not in overridden:
            raise UserError(f"{who}: {group}.{key} is {value!r} in the recipe but {new[key]!r} in '{choice.path}'; "
                            f"say which for this arm: {group}.{key}=VALUE, or ~{group}.{key} for the file's")
        new[key] = value
    return Replace(new)
