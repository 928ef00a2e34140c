"""Whether ``--resume`` continues the same experiment: the recipe the run recorded (results.json's,
not the recipe.yaml copy anyone may rewrite), filled in with what a later fedlight added (its
defaults keep the old behaviour), against the recipe given now, and the settings its method,
server, backbone and plug-ins were built with (the ``resolved`` record) against what the installed
code would build; only the keys that are not the experiment may differ.
"""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from fedlight.config.files import read_yaml_mapping
from fedlight.config.schema import Recipe
from fedlight.engine.state.run_files import RECIPE, RESULTS
from fedlight.errors import UserError

# recipe keys (or sections) a resumed run may change, none of which changes what a round computes:
# rounds may grow, faults.max_bad_clients only decides whether a round with diverged clients stops
# the run (they are excluded either way; RELIABILITY.md's continue-after-a-stop raises it), the
# rendezvous's deadline models the cluster, run says where the run lives (a moved folder resumes)
# and loggers where its scalars go (a logger added at a resume starts there).
# Every other faults.* key is the experiment: the attack and its attackers, the simulated dropout,
# stragglers and divergence decide which clients answer, how long they train and what they send.
NOT_THE_EXPERIMENT = ("rounds", "faults.max_bad_clients", "run", "fabric.rendezvous_timeout_min", "loggers")
# recipe.yaml's record of what the run's classes were built with (``registry.resolved_settings``);
# where both runs hold one, the sections of constructor options are compared through it
RESOLVED = "resolved"
CONSTRUCTOR_SECTIONS = ("method", "server", "plugins", "faults.attack_options")
DP = "dp"  # the server record's differential-privacy options (``server.dp``), present where the run used them
# the server record's wrappers around any aggregator: differential privacy, and the uploads' compression
# (``server.compress``), each present where the run used it
WRAPPERS = (DP, "compress")
# a run's recipe.yaml is a copy of its resolved recipe, written again when the run resumes
RECIPE_COPY_FIX = "it only records the run's recipe: delete it and rerun with --resume, which writes it again"
RESULTS_FIX = "it is the run's own record: restore it from a backup, or start the run again with --overwrite"


def with_later_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with what a later fedlight added filled in from its defaults, which keep the old
    behaviour: a key in a schema section, or a whole section (``new_device``); a run folder or a
    sweep written before an option existed resumes."""
    recipe = Recipe()
    defaults = asdict(recipe)
    sections = {k for k in defaults if is_dataclass(getattr(recipe, k))}
    filled = {k: {**defaults[k], **v} if k in sections and isinstance(v, dict) else v for k, v in saved.items()}
    return {**{k: defaults[k] for k in set(defaults) - set(saved)}, **filled}


def _differences(saved: dict[str, Any], recipe: dict[str, Any], ignore: tuple[str, ...]) -> list[str]:
    """The keys (``local.lr``, or a whole section) in which ``recipe`` differs from ``saved``."""
    out = []
    for k, v in saved.items():
        if k in ignore or v == recipe.get(k):
            continue
        new = recipe.get(k)
        if isinstance(v, dict) and isinstance(new, dict):
            out += [f"{k}.{key}" for key in sorted(set(v) | set(new))
                    if v.get(key) != new.get(key) and f"{k}.{key}" not in ignore]
        else:
            out.append(k)
    return out


def check_same_experiment(path: Path, recipe: dict[str, Any]) -> None:
    """Refuse to resume the run in ``path`` with ``recipe`` (a ``run_record``) where it differs from the
    one the run recorded (``saved_recipe``); where both hold a ``resolved`` record, the method, server and
    plug-in sections are compared through it (with ``recipe`` holding none yet, ``preflight`` before torch
    loads, they are left to ``fit``'s claim; so are the attack's options). A run folder written before the
    record existed compares its recipe only."""
    found = saved_recipe(path)
    if found is None:  # neither file: a run stopped inside its first round, with nothing to compare against
        return
    saved_path, saved, fix = found
    saved = with_later_defaults(saved)
    damage = _record_damage(saved[RESOLVED]) if RESOLVED in saved else None
    recorded, resolved = saved.pop(RESOLVED, None), recipe.get(RESOLVED)
    if damage:  # else a record replaced by text would skip the settings check as if there were none
        raise UserError(f"the run's recipe '{saved_path}' has a damaged '{RESOLVED}' record ({damage}); {fix}")
    through_record = CONSTRUCTOR_SECTIONS if isinstance(recorded, dict) else ()
    changed = sorted(_differences(saved, recipe, (*NOT_THE_EXPERIMENT, RESOLVED, *through_record)))
    if changed:
        raise UserError(f"--resume with a recipe that differs from '{saved_path}' in {', '.join(changed)}; "
                        "resume with the same recipe and overrides (rounds may grow), or use --overwrite")
    if through_record and isinstance(resolved, dict):
        _check_same_settings(saved_path, recorded, resolved)


def saved_recipe(path: Path) -> tuple[Path, dict[str, Any], str] | None:
    """(the file, the recipe the run in ``path`` recorded, the fix for a damaged record), or None where it
    recorded none. The run writes ``results.json`` after each round's checkpoint: its recipe is the record of
    what trained. ``recipe.yaml`` is a copy anyone may rewrite (``fit --write-recipe``, an editor), read only
    where the run saved no round (it resumes from round 0) or its results.json holds no readable recipe.

    Raises:
        UserError: the record is unreadable (recipe.yaml not YAML; no readable recipe in either file).
    """
    results = path / RESULTS
    recorded = _recipe_in_results(results)
    if recorded is not None:
        return results, recorded, RESULTS_FIX
    copy = path / RECIPE
    if copy.is_file():
        return copy, read_yaml_mapping(copy, "the run's recipe", RECIPE_COPY_FIX), RECIPE_COPY_FIX
    if results.exists():
        raise UserError(f"the run folder's recipe.yaml is gone and '{results}' holds no readable recipe to compare "
                        "--resume against: restore either file from a backup, or start the run again with --overwrite")
    return None


def _recipe_in_results(path: Path) -> dict[str, Any] | None:
    """The recipe ``results.json`` records (None where there is none, or no readable one)."""
    try:
        recipe = json.loads(path.read_text()).get("recipe")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return recipe if isinstance(recipe, dict) else None


def _record_damage(record: Any) -> str | None:
    """What makes a ``resolved`` record other than ``registry.resolved_settings``'s shape (a mapping
    of mappings, its plug-ins' options mappings too), or None."""
    if not isinstance(record, dict):
        return f"it is {'empty' if record is None else 'a ' + type(record).__name__}, not a mapping"
    parts = {section: record.get(section) for section in ("method", "server", "backbone", "plugins", "attack")}
    if isinstance(parts["plugins"], dict):
        parts.update({f"plugins.{name}": options for name, options in parts["plugins"].items()})
    if isinstance(parts["server"], dict):
        parts.update({f"server.{w}": parts["server"][w] for w in WRAPPERS if w in parts["server"]})
    for where, value in parts.items():
        if value is not None and not isinstance(value, dict):
            return f"its {where} is a {type(value).__name__}, not a mapping"
    return None


def _settings(record: dict[str, Any]) -> dict[str, Any]:
    """A ``resolved`` record as ``{key: value}`` named as the recipe names them: ``method.temperature``,
    ``server.name``, ``server.dp.clip``, ``model.backbone``, ``model.backbone.parameters``, ``plugins.marker.scale``,
    ``faults.attack``, ``faults.attack_scale``, ``faults.attack_options.z``; a plug-in, ``server.dp`` or
    ``server.compress`` that is on is ``"on"`` under its own name."""
    out = {f"{section}.{k}": v for section in ("method", "server") for k, v in (record.get(section) or {}).items()
           if not (section == "server" and k in WRAPPERS)}
    for wrapper in WRAPPERS:
        options = (record.get("server") or {}).get(wrapper)
        if options is not None:
            out[f"server.{wrapper}"] = "on"
            out.update({f"server.{wrapper}.{k}": v for k, v in options.items()})
    out.update({"model.backbone" if k == "name" else f"model.backbone.{k}": v
                for k, v in (record.get("backbone") or {}).items()})
    for name, options in (record.get("plugins") or {}).items():
        out[f"plugins.{name}"] = "on"
        out.update({f"plugins.{name}.{k}": v for k, v in (options or {}).items()})
    recipe_key = {"name": "faults.attack", "scale": "faults.attack_scale"}
    out.update({recipe_key.get(k, f"faults.attack_options.{k}"): v for k, v in (record.get("attack") or {}).items()})
    return out


def _check_same_settings(saved_path: Path, recorded: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Refuse, naming the first key, where the installed code would build the run's method, server,
    backbone or plug-ins otherwise than the run recorded. An option only one side has is no
    difference (an option a later release adds keeps the old behaviour by default, as a recipe key
    does); a plug-in, or the differential privacy of ``server.dp`` or compression of ``server.compress``, that only
    one side has is."""
    old, new = _settings(recorded), _settings(resolved)
    switched = {f"plugins.{name}" for name in {*(recorded.get("plugins") or {}), *(resolved.get("plugins") or {})}}
    switched.update(f"server.{w}" for w in WRAPPERS)
    changed = [k for k in old if k in new and old[k] != new[k]] + sorted(k for k in switched if (k in old) != (k in new))
    if not changed:
        return
    key = changed[0]
    before, after = old.get(key, "off"), new.get(key, "off")
    fix = ("resume with the fedlight release that wrote the run" if key.startswith("model.backbone.")
           else f"set {key}={before} to resume as recorded" if key in new and key not in switched
           else "resume with the same recipe and overrides")
    more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
    raise UserError(f"--resume: the run recorded {key}={before} (resolved, in '{saved_path}'), the installed "
                    f"fedlight would run {key}={after}{more}; {fix}, or use --overwrite")
