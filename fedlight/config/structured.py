"""The recipe schema (``schema.Recipe``) as an OmegaConf structured config, and back to a ``Recipe``.

OmegaConf owns the shape and the types of a recipe: merged into ``new_config()``, an unknown
key or a value of the wrong type is refused (naming its full dotted key), a value is converted
to its field's type (``1`` -> ``1.0`` for a float, ``"5"`` -> ``5`` for an int), and
``${data.root}`` interpolations resolve. What OmegaConf does not do stays here and in
``coerce``:

- choices: OmegaConf 2.3 has no ``Literal`` type, so a choice field is a ``str`` node (a list of
  choices a list of ``str``) in the config and its value is checked against the choices when the
  ``Recipe`` is built;
- the range markers (``schema.check`` metadata, ``fedlight.config.checks``), finite numbers and
  names without NUL characters;
- one-line errors: OmegaConf's exceptions become a ``UserError`` naming the key and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (ConfigKeyError, GrammarParseError, InterpolationResolutionError,
                             OmegaConfBaseException)

from fedlight.config.coerce import apply_check, coerce
from fedlight.config.schema import Recipe
from fedlight.errors import UserError


def _omegaconf_hint(hint: Any) -> Any:
    """``hint`` as OmegaConf 2.3 can type it: a ``Literal`` choice becomes ``str`` (checked later)."""
    if typing.get_origin(hint) is Literal:
        return str
    args = typing.get_args(hint)
    if type(None) in args and any(typing.get_origin(a) is Literal for a in args):
        return str | None
    if typing.get_origin(hint) is list and typing.get_origin(args[0]) is Literal:
        return list[str]
    if dataclasses.is_dataclass(hint):
        return schema_class(hint)
    return hint


@functools.cache
def schema_class(cls: type) -> type:
    """A twin of dataclass ``cls`` (same name, fields and defaults) whose hints OmegaConf can type."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        hint = _omegaconf_hint(hints[f.name])
        if dataclasses.is_dataclass(hints[f.name]):
            default = dataclasses.field(default_factory=hint)
        elif f.default_factory is not dataclasses.MISSING:
            default = dataclasses.field(default_factory=f.default_factory)
        else:
            default = dataclasses.field(default=f.default)
        fields.append((f.name, hint, default))
    return dataclasses.make_dataclass(cls.__name__, fields)


def new_config() -> DictConfig:
    """Every recipe key at its default, typed, in struct mode (an unknown key is refused)."""
    return OmegaConf.structured(schema_class(Recipe))


def section_keys(dotted: str) -> list[str] | None:
    """The keys valid in the section ``dotted`` ('' for the top level), or None where any key goes
    (``method``, ``server``: their classes check them, ``fedlight.registry``)."""
    cls: Any = Recipe
    for part in filter(None, dotted.split(".")):
        hint = typing.get_type_hints(cls).get(part) if dataclasses.is_dataclass(cls) else None
        if not dataclasses.is_dataclass(hint):
            return None
        cls = hint
    return [f.name for f in dataclasses.fields(cls)]


def user_error(exc: OmegaConfBaseException, where: str, section: str = "") -> UserError:
    """OmegaConf's refusal of ``where`` (a recipe file, an override) as one line naming the key
    (``section`` where OmegaConf names none, as in a merge of a scalar into a section)."""
    key = str(getattr(exc, "full_key", "") or getattr(exc, "key", "") or section)
    problem = str(getattr(exc, "msg", exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, ConfigKeyError) or "not in" in problem:  # struct mode: a key the schema lacks
        if exc.key == "" and key:  # an empty key: OmegaConf's full key stops at its section
            key += "."
        section, _, name = key.rpartition(".")
        valid = section_keys(section)
        if valid is not None and name not in valid:
            near = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean '{section + '.' if section else ''}{near[0]}'?)" if near else ""
            return UserError(f"unknown recipe key '{key}' in {where}{hint}; valid keys here: {', '.join(sorted(valid))}")
    if isinstance(exc, (InterpolationResolutionError, GrammarParseError)):
        return UserError(f"recipe key '{key}' in {where}: {problem}; fix the interpolation (${{section.key}})")
    return UserError(f"recipe key '{key}' in {where}: {problem}; fix the recipe or override")


def to_recipe(values: dict[str, Any], cls: type = Recipe, prefix: str = "") -> Any:
    """The typed ``cls`` from resolved, OmegaConf-typed ``values``: each choice and range checked.

    Raises:
        UserError: naming the key whose value is not one of its choices or fails its check.
    """
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key, value = prefix + f.name, values[f.name]
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = to_recipe(value, hints[f.name], key + ".")
            continue
        kwargs[f.name] = coerce(value, hints[f.name], key)  # choices, finite numbers, no NUL
        apply_check(f.metadata.get("check"), kwargs[f.name], value, key)
    return cls(**kwargs)
