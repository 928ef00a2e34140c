"""Check a value against a type hint, with errors that name the recipe key.

OmegaConf types the schema's sections (``fedlight.config.structured``); what it cannot type is
checked here: ``Literal`` choices, ``Annotated`` range markers, finite numbers, text without NUL,
and the options of ``method`` / ``server``, whose types are their class's constructor hints
(``fedlight.registry``).
"""

from __future__ import annotations

import math
import types
import typing
from typing import Annotated, Any, Callable, Literal, Union

from fedlight.errors import UserError


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " | ".join(str(a) for a in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if origin is list:
        return f"a list of {_describe(typing.get_args(hint)[0])}"
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Return ``value`` as type ``hint`` or raise a UserError naming ``key``."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin is Annotated:  # a constructor parameter with its constraints (fedlight.config.checks)
        base, *checks = typing.get_args(hint)
        out = coerce(value, base, key)
        for check in filter(callable, checks):
            apply_check(check, out, value, key)
        return out
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
    elif origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg, key)
            except UserError:
                pass
    elif origin is list:
        if isinstance(value, list):
            (item,) = typing.get_args(hint)
            return [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, dict):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise UserError(f"recipe key '{key}': expected a finite number, got {value!r}; "
                                "fix the recipe or override")
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is str:
        if isinstance(value, str):
            if "\x00" in value:  # names and paths: no file system takes it
                raise UserError(f"recipe key '{key}' must not contain a NUL character (got {value!r}); "
                                "fix the recipe or override")
            return value
    elif isinstance(value, hint):
        return value
    raise UserError(f"recipe key '{key}': expected {_describe(hint)}, got {value!r}; fix the recipe or override")


def apply_check(check: Callable[[Any], str | None] | None, value: Any, raw: Any, key: str) -> None:
    """Raise a UserError naming ``key`` if ``value`` (``raw`` as written) fails ``check``; None passes."""
    problem = check(value) if check is not None and value is not None else None
    if problem:
        raise UserError(f"recipe key '{key}' {problem} (got {raw!r}); fix the recipe or override")
