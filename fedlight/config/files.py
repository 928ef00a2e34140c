"""Reading the text files users hand fedlight: recipes, a run's ``recipe.yaml``, a sweep's
``manifest.json``, a run's ``results.json``; and checking a folder fedlight is asked to write.

Every YAML fedlight reads (recipe files, fragments, override values, a run's ``recipe.yaml``) goes
through ``load_yaml``: OmegaConf's own YAML dialect (``1e-3`` is a number, no timestamps) with a key
given twice refused in one line naming its dotted path and both lines.

Each failure is a one-line ``UserError`` naming the file (what it is, why it cannot be read)
and the caller's fix, instead of a ``UnicodeDecodeError`` or a parser's own exception.
Torch-free: ``fedlight report`` uses it on a login node.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
# OmegaConf's loader (the dialect its configs and dotlists are read in; it refuses a repeated key)
# and the dumper that quotes what that loader would read back as another type
from omegaconf._utils import get_omega_conf_dumper, get_yaml_loader

from fedlight.errors import UserError

SWEEP_MANIFEST = "manifest.json"  # in a sweep's --out: which task is which (fedlight/sweep/manifest.py)
MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *anchor` merges keys on purpose
_LOADER = get_yaml_loader()
_INTERPOLATION = re.compile(r"(\\*)\$\{")  # the start of an interpolation, and the backslashes before it

# a text editor's byte-order mark names the encoding (UTF-32's marks start like UTF-16's: first)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))

# every way PyYAML fails on text that is not valid YAML: besides its own errors, a date with
# month 13 or a bad ``!!float`` raise ValueError, a bad ``!!timestamp`` AttributeError, and
# nesting deeper than Python's recursion limit RecursionError
YAML_ERRORS = (yaml.YAMLError, ValueError, TypeError, AttributeError, RecursionError)
JSON_ERRORS = (ValueError, RecursionError)  # json.JSONDecodeError is a ValueError


def read_text(path: Path, what: str, fix: str) -> str:
    """The text of ``path``: UTF-8, or UTF-16 / UTF-32 with a byte-order mark (a Windows editor).

    Raises:
        UserError: ``path`` cannot be read, or is not text in those encodings (a binary file).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{what} '{path}' cannot be read ({exc.strerror or exc}); {fix}") from None
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} '{path}' is not {encoding.removesuffix('-sig').upper()} text "
                        f"(byte {data[exc.start]:#04x} at offset {exc.start}); {fix}") from None


def yaml_problem(exc: BaseException) -> str:
    """`` at line N`` where PyYAML knows the line of the mistake, else ``''``."""
    line = getattr(getattr(exc, "problem_mark", None), "line", None)
    return f" at line {line + 1}" if line is not None else ""


def _repeated_key(node: yaml.Node | None, prefix: str = "",
                  seen: set[int] | None = None) -> tuple[str, int, int] | None:
    """The first mapping key that ``node`` (a composed YAML document) gives twice, as
    (dotted key, first line, second line), or None.

    OmegaConf's loader refuses the key but names neither its section nor its first line: this says both.
    """
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


def load_yaml(text: str, where: str, fix: str = "keep one of them") -> Any:
    """``text`` read as YAML in OmegaConf's dialect, refusing a key given twice in one mapping
    (PyYAML alone would keep the last one and drop the first without a word).

    Raises:
        UserError: naming ``where``, the dotted key and, when ``text`` has several lines, both lines.
        yaml.YAMLError: ``text`` is not YAML (also the other ``YAML_ERRORS``).
    """
    try:
        return yaml.load(text, Loader=_LOADER)
    except yaml.constructor.ConstructorError as exc:
        repeated = _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader))
        if not repeated or "duplicate key" not in str(exc.problem):
            raise
    key, first, second = repeated
    lines = f" (lines {first} and {second})" if "\n" in text.strip() else ""
    raise UserError(f"{where} gives key '{key}' twice{lines}; {fix}")


def dump_yaml(obj: Any) -> str:
    """``obj`` as block-style YAML that ``load_yaml`` reads back equal (``yaml.safe_dump``'s format,
    but a string such as ``'1e-3'``, a number in OmegaConf's dialect, is quoted)."""
    return yaml.dump(obj, Dumper=get_omega_conf_dumper(), sort_keys=False)


def escape_interpolations(obj: Any) -> Any:
    """``obj`` (resolved recipe values) with each ``${`` in its strings escaped as OmegaConf reads it
    back literally: ``'/data/${seed}'`` -> ``'/data/\\${seed}'`` (backslashes right before it doubled,
    as OmegaConf's grammar asks), so a recipe written from resolved values resolves to them again."""
    if isinstance(obj, str):
        return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", obj)
    if isinstance(obj, dict):
        return {k: escape_interpolations(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [escape_interpolations(v) for v in obj]
    return obj


def yaml_value(text: str, where: str) -> Any:
    """A value given on the command line, read as YAML (text that is not YAML stays text; '' is None)."""
    try:
        return load_yaml(text, where) if text else None
    except YAML_ERRORS:  # not YAML (e.g. an unclosed bracket): the text itself
        return text


def read_yaml_mapping(path: Path, what: str, fix: str, twice_fix: str | None = None) -> dict[str, Any]:
    """The mapping a YAML file holds (an empty file holds ``{}``); ``twice_fix`` is the fix for a
    key given twice (default: ``fix``).

    Raises:
        UserError: naming ``path`` and ``fix``: unreadable, not text, not YAML, a key given twice,
            or not a mapping.
    """
    text = read_text(path, what, fix)
    try:
        data = load_yaml(text, f"{what} '{path}'", twice_fix or fix)
    except YAML_ERRORS as exc:
        raise UserError(f"{what} '{path}' is not valid YAML{yaml_problem(exc)}; {fix}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise UserError(f"{what} '{path}' holds {type(data).__name__} {_short(data)}, not a mapping of keys; {fix}")
    return data


def read_json(path: Path, what: str, fix: str) -> Any:
    """The JSON value of ``path``.

    Raises:
        UserError: naming ``path`` and ``fix``: unreadable, not text, or not JSON.
    """
    text = read_text(path, what, fix)
    try:
        return json.loads(text)
    except JSON_ERRORS:
        raise UserError(f"{what} '{path}' is not valid JSON; {fix}") from None


def length_problem(path: str | Path) -> str | None:
    """Why ``path`` is too long to name a file on its file system (a component over ``NAME_MAX``
    bytes, the whole over ``PATH_MAX``), or None; every ``stat`` of such a path raises ``OSError:
    File name too long``, so this is asked first."""
    full = os.path.abspath(path)
    anchor = next(p for p in (full, *Path(full).parents) if os.path.exists(p))  # exists() swallows the OSError
    try:
        name_max, path_max = os.pathconf(anchor, "PC_NAME_MAX"), os.pathconf(anchor, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    shown = str(path) if len(str(path)) <= 60 else f"{str(path)[:60]}..."
    long = next((part for part in Path(full).parts if len(os.fsencode(part)) > name_max), None)
    if long is not None:
        return (f"'{shown}' has a name of {len(os.fsencode(long))} bytes ('{long[:20]}...'), longer than the "
                f"{name_max} its file system allows")
    if len(os.fsencode(full)) >= path_max:
        return f"'{shown}' is {len(os.fsencode(full))} bytes long, longer than the {path_max - 1} allowed"
    return None


def output_folder_problem(path: Path) -> str | None:
    """Why fedlight cannot make or use folder ``path`` to write into (a name too long, a file in the
    way, no write permission), or None."""
    too_long = length_problem(path)
    if too_long:
        return too_long
    if path.exists() and not path.is_dir():
        return f"'{path}' is a file, not a folder"
    anchor = next((p for p in (path, *path.parents) if p.exists()), None)
    if anchor is None:
        return None
    if not anchor.is_dir():
        return f"'{anchor}' is a file, so no folder can be made under it"
    if not os.access(anchor, os.W_OK | os.X_OK):
        return f"'{anchor}' is not writable"
    return None


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
