"""Check a YAML value against a type hint, with errors that name the recipe key."""

from __future__ import annotations

import dataclasses
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


def _number(text: str) -> float | str:
    """``'1e-3'`` -> 0.001; anything that is not a number stays text."""
    try:
        return float(text)
    except ValueError:
        return text


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
    elif dataclasses.is_dataclass(hint):
        if isinstance(value, dict):
            return build_dataclass(hint, value, key)
    elif hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as text
            value = _number(value)
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


def build_dataclass(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``values``: unknown keys, wrong types and failed checks raise."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in fields:
            raise UserError(f"unknown recipe key '{key}'; valid keys here: {', '.join(sorted(fields))}")
        kwargs[name] = coerce(value, hints[name], key)
        apply_check(fields[name].metadata.get("check"), kwargs[name], value, key)
    return cls(**kwargs)


def apply_check(check: Callable[[Any], str | None] | None, value: Any, raw: Any, key: str) -> None:
    """Raise a UserError naming ``key`` if ``value`` (``raw`` as written) fails ``check``; None passes."""
    problem = check(value) if check is not None and value is not None else None
    if problem:
        raise UserError(f"recipe key '{key}' {problem} (got {raw!r}); fix the recipe or override")
