"""Recipes: YAML files composed from fragments, plus dotted ``key=value`` overrides, through OmegaConf.

A recipe may list ``defaults:``, paths (relative to the recipe file, else to the shipped recipes:
a copied shipped recipe still finds its fragments) of YAML fragments merged in order before the
recipe's own keys; ``key=value`` overrides come last. Each layer is merged
into the recipe schema as an OmegaConf structured config (``fedlight.config.structured``), which
refuses unknown keys and wrong types, then ``${...}`` interpolations resolve against the whole
result. YAML stops here: the rest of fedlight sees only the typed ``Recipe``.

OmegaConf has no include of its own (Hydra's defaults lists are config groups on a search path,
not files beside the recipe), so ``defaults`` is walked here; and OmegaConf merges a section key
by key, so the one rule it lacks is kept: a section naming another class (``method.name``,
``server.name``, ``data.name``) replaces the section it overrides instead of inheriting its keys.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedlight.config.bundled import RECIPES
from fedlight.config.files import read_yaml_mapping, yaml_value
from fedlight.config.schema import Recipe
from fedlight.config.structured import new_config, to_recipe, user_error
from fedlight.errors import UserError

__all__ = ["Replace", "compose", "load_recipe", "override_layer", "override_layers", "parse_override", "recipe_layers",
           "resolve", "yaml_value"]

RECIPE_FIX = "fix the recipe file"
# a run folder's recipe.yaml records under this key what the run's classes were built with; it sets
# nothing, so a run's recipe.yaml runs again as a recipe
RUN_RECORD = "resolved"


def _fragments(path: Path, _seen: tuple[Path, ...] = ()) -> list[tuple[dict[str, Any], str]]:
    """(mapping, where) of the recipe at ``path``: its ``defaults`` fragments (recursively) first."""
    path = path.resolve()
    if path in _seen:
        raise UserError(f"recipe fragment '{path}' includes itself; remove the cycle from 'defaults'")
    if not path.is_file():
        raise UserError(f"recipe file '{path}' not found; check the path")
    data = read_yaml_mapping(path, "recipe file", RECIPE_FIX, twice_fix="keep one of them")
    data.pop(RUN_RECORD, None)
    fragments = data.pop("defaults", []) or []
    if not isinstance(fragments, list):
        raise UserError(f"'defaults' in '{path}' must be a list of fragment paths")
    layers: list[tuple[dict[str, Any], str]] = []
    for fragment in fragments:
        if not isinstance(fragment, str) or not fragment.strip() or "\x00" in fragment:
            raise UserError(f"'defaults' in '{path}' lists {fragment!r}, which is not a fragment path; "
                            "list YAML file paths (relative to the recipe)")
        layers += _fragments(_fragment_path(path, fragment), (*_seen, path))
    return [*layers, (data, f"recipe file '{path}'")]


def _fragment_path(recipe: Path, fragment: str) -> Path:
    """The file the ``defaults`` entry ``fragment`` of ``recipe`` names: beside ``recipe``, else, where
    only a shipped recipe's entry resolves (a shipped recipe copied elsewhere keeps its
    ``../configs/...``), the shipped file.

    Raises:
        UserError: neither is a file; saying how to get a copy of a recipe that needs no fragments.
    """
    beside, shipped = recipe.parent / fragment, RECIPES / fragment
    if beside.is_file():
        return beside
    if shipped.is_file():
        return shipped
    raise UserError(f"recipe fragment '{beside.resolve()}' (listed under 'defaults' in '{recipe}') not found; "
                    "fix the path, or copy a recipe with its fragments inlined: "
                    "fedlight fit --recipe NAME --write-recipe my.yaml")


def parse_override(text: str) -> tuple[str, Any]:
    """``'partition.alpha=0.1'`` -> ``('partition.alpha', 0.1)``; the value is read as YAML.

    Raises:
        UserError: ``text`` is not ``key=value`` with a dotted key of non-empty parts.
    """
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"override '{text}' must look like key=value (for example rounds=5)")
    return key, yaml_value(raw, f"override '{text}'")


def override_layer(text: str) -> dict[str, Any]:
    """One ``key=value`` override as the nested mapping it sets: ``'a.b=1'`` -> ``{'a': {'b': 1}}``."""
    key, value = parse_override(text)
    _refuse_deep({key: value}, f"override '{text}'")
    layer = OmegaConf.create()
    try:
        OmegaConf.update(layer, key, value, merge=False)
    except OmegaConfBaseException as exc:  # e.g. an interpolation that does not parse
        raise user_error(exc, f"override '{text}'", key) from None
    return OmegaConf.to_container(layer)


class Replace(dict):
    """A layer's section that replaces the section before it, keys and all, even where it names the
    same class (a config group's choice, ``fedlight.config.groups``)."""


def _renamed(config: DictConfig, layer: Mapping, named: set[str], defaults: DictConfig | None,
             prefix: str = "") -> None:
    """Reset each section of ``config`` to its default where ``layer`` names a different class
    than an earlier layer did (the paths in ``named``); record the names ``layer`` gives."""
    for key, value in layer.items():
        path = f"{prefix}{key}"
        if not isinstance(value, Mapping) or not isinstance(config.get(key) if key in config else None, DictConfig):
            continue
        default = defaults[key] if isinstance(defaults, DictConfig) and key in defaults else None
        if isinstance(value, Replace) or ("name" in value and path in named and config[key].get("name") != value["name"]):
            config[key] = copy.deepcopy(default) if isinstance(default, DictConfig) else {}
        else:
            _renamed(config[key], value, named, default, path + ".")
        if "name" in value:
            named.add(path)


MAX_DEPTH = 32  # mappings and lists inside one another; OmegaConf recurses through each (about 100 is its end)


def _too_deep(layer: Mapping) -> str | None:
    """The dotted key at which ``layer`` nests deeper than ``MAX_DEPTH``, or None (walked without recursion)."""
    stack: list[tuple[Any, str, int]] = [(layer, "", 0)]
    while stack:
        node, key, depth = stack.pop()
        if depth > MAX_DEPTH:
            return key
        children = node.items() if isinstance(node, Mapping) else enumerate(node) if isinstance(node, list) else ()
        stack += [(value, f"{key}.{k}" if key else str(k), depth + 1) for k, value in children]
    return None


def _refuse_deep(layer: Mapping, where: str) -> None:
    deep = _too_deep(layer)
    if deep is not None:
        shown = deep if len(deep) <= 60 else f"{deep[:60]}..."
        raise UserError(f"{where[:80]} nests more than {MAX_DEPTH} mappings or lists deep (at '{shown}'); "
                        "no recipe key takes that: flatten it")


def compose(layers: list[tuple[Mapping, str]]) -> DictConfig:
    """``layers`` of (mapping, where it comes from) merged in order into the recipe schema.

    Raises:
        UserError: naming the layer and the key that OmegaConf refused (unknown, wrong type), or
            one nested past ``MAX_DEPTH``.
    """
    config, defaults, named = new_config(), new_config(), set()
    for layer, where in layers:
        _refuse_deep(layer, where)
        _renamed(config, layer, named, defaults)
        for key, value in layer.items():  # key by key: a refused section is named even where OmegaConf names none
            try:
                config.merge_with({key: dict(value) if isinstance(value, Replace) else value})  # OmegaConf: no subclass
            except OmegaConfBaseException as exc:
                raise user_error(exc, where, key) from None
    return config


def resolve(config: DictConfig) -> dict[str, Any]:
    """The plain values of ``config`` with its ``${...}`` interpolations resolved.

    Raises:
        UserError: an interpolation names no key, or resolves to a value of the wrong type.
    """
    try:
        return OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException as exc:
        raise user_error(exc, "the composed recipe") from None


def load_recipe(path: str | Path, overrides: list[str] = ()) -> Recipe:
    """Compose, override (``override_layers``), resolve and type-check a recipe file."""
    return to_recipe(resolve(compose([*recipe_layers(path), *override_layers(overrides)])))


def recipe_layers(path: str | Path) -> list[tuple[dict[str, Any], str]]:
    """The layers of the recipe file at ``path``: its name (the file's stem), its fragments, its own keys."""
    return [({"name": Path(path).stem}, "the recipe's file name"), *_fragments(Path(path))]


def override_layers(overrides: list[str]) -> list[tuple[dict[str, Any], str]]:
    """``key=value`` overrides as layers, those naming a class (``method.name=byol``) first, so the keys
    given for the new class land in a fresh section."""
    ordered = sorted(overrides, key=lambda text: text.partition("=")[0].rpartition(".")[2] != "name")
    return [(override_layer(text), f"override '{text}'") for text in ordered]
