"""Recipes: YAML files composed from fragments, plus dotted ``key=value`` overrides.

A recipe may list ``defaults:``, paths (relative to the recipe file) of YAML fragments that
are deep-merged in order before the recipe's own keys. YAML stops here: the rest of
fedlight sees only the typed ``Recipe``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from fedlight.config.coerce import build_dataclass
from fedlight.config.files import YAML_ERRORS, read_text, yaml_problem
from fedlight.config.schema import Recipe
from fedlight.errors import UserError


MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *anchor` merges keys on purpose


def _repeated_key(node: yaml.Node | None, prefix: str = "",
                  seen: set[int] | None = None) -> tuple[str, int, int] | None:
    """The first mapping key that ``node`` (a composed YAML document) gives twice, as
    (dotted key, first line, second line), or None."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:  # aliases may point back at a node already walked
        return None
    seen.add(id(node))
    children: list[tuple[str, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            if isinstance(key, yaml.ScalarNode) and key.tag != MERGE_TAG:
                if name in lines:
                    return prefix + name, lines[name], key.start_mark.line + 1
                lines[name] = key.start_mark.line + 1
            children.append((f"{prefix}{name}.", value))
    elif isinstance(node, yaml.SequenceNode):
        children = [(f"{prefix}{i}.", item) for i, item in enumerate(node.value)]
    for child_prefix, child in children:
        found = _repeated_key(child, child_prefix, seen)
        if found:
            return found
    return None


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load``, refusing a key given twice in one mapping (PyYAML would keep the last
    one and drop the first without a word).

    Raises:
        UserError: naming ``where``, the key and, when ``text`` has several lines, both lines.
        yaml.YAMLError: ``text`` is not YAML.
    """
    repeated = _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader))
    if repeated:
        key, first, second = repeated
        lines = f" (lines {first} and {second})" if "\n" in text.strip() else ""
        raise UserError(f"{where} gives key '{key}' twice{lines}; keep one of them")
    return yaml.safe_load(text)


def yaml_value(text: str, where: str) -> Any:
    """A value given on the command line, read as YAML (text that is not YAML stays text; '' is None)."""
    try:
        return load_yaml(text, where) if text else None
    except YAML_ERRORS:  # not YAML (e.g. a date with month 13): the text itself
        return text


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"recipe file '{path}' not found; check the path")
    try:
        data = load_yaml(read_text(path, "recipe file", "save it as UTF-8 text"), f"recipe file '{path}'")
        data = {} if data is None else data  # an empty file is all defaults; 0 or [] is a mistake
    except YAML_ERRORS as exc:
        raise UserError(f"recipe file '{path}' is not valid YAML{yaml_problem(exc)}; fix its syntax") from None
    if not isinstance(data, dict):
        raise UserError(f"recipe file '{path}' must hold a mapping of keys; fix its top level")
    return data


def _renamed(old: Any, new: Any) -> bool:
    """A section that names a different class (``method``, ``server``) replaces the old one whole."""
    return isinstance(old, dict) and isinstance(new, dict) and "name" in new and old.get("name", new["name"]) != new["name"]


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged into a copy of ``base``; nested mappings merge (unless their ``name``
    differs: then the new section replaces the old), anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not _renamed(out[key], value):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def compose(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The recipe at ``path`` with its ``defaults`` fragments merged in (recursively)."""
    path = path.resolve()
    if path in _seen:
        raise UserError(f"recipe fragment '{path}' includes itself; remove the cycle from 'defaults'")
    data = _read_yaml(path)
    fragments = data.pop("defaults", []) or []
    if not isinstance(fragments, list):
        raise UserError(f"'defaults' in '{path}' must be a list of fragment paths")
    merged: dict[str, Any] = {}
    for fragment in fragments:
        if not isinstance(fragment, str) or not fragment.strip() or "\x00" in fragment:
            raise UserError(f"'defaults' in '{path}' lists {fragment!r}, which is not a fragment path; "
                            "list YAML file paths (relative to the recipe)")
        merged = deep_merge(merged, compose(path.parent / fragment, (*_seen, path)))
    return deep_merge(merged, data)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'partition.alpha=0.1'`` -> ``(['partition', 'alpha'], 0.1)``; values are read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"override '{text}' must look like key=value (for example rounds=5)")
    return key.split("."), yaml_value(raw, f"override '{text}'")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``key=value`` override set (missing sections are created)."""
    out = copy.deepcopy(data)
    parsed = [parse_override(text) + (text,) for text in overrides]
    # `x.name=...` first: naming a different class resets its section, then its keys apply
    for parts, value, text in sorted(parsed, key=lambda p: p[0][-1] != "name"):
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"override '{text}': '{'.'.join(parts[: i + 1])}' is not a section")
            node = child
        if parts[-1] == "name" and len(parts) > 1 and node.get("name", value) != value:
            node.clear()
        node[parts[-1]] = value
    return out


def load_recipe(path: str | Path, overrides: list[str] = ()) -> Recipe:
    """Compose, override and type-check a recipe file."""
    path = Path(path)
    data = apply_overrides(compose(path), list(overrides))
    data.setdefault("name", path.stem)
    for section in ("method", "server"):
        if not isinstance(data.get(section, {}), dict):
            raise UserError(f"recipe key '{section}' must be a section with a 'name' key")
    return build_dataclass(Recipe, data)

