"""Reading the text files users hand fedlight: recipes, a run's ``recipe.yaml``, a sweep's
``manifest.json``, a run's ``results.json``; and checking a folder fedlight is asked to write.

Each failure is a one-line ``UserError`` naming the file (what it is, why it cannot be read)
and the caller's fix, instead of a ``UnicodeDecodeError`` or a parser's own exception.
Torch-free: ``fedlight report`` uses it on a login node.
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path
from typing import Any

import yaml

from fedlight.errors import UserError

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


def read_yaml_mapping(path: Path, what: str, fix: str) -> dict[str, Any]:
    """The mapping a YAML file holds (an empty file holds ``{}``).

    Raises:
        UserError: naming ``path`` and ``fix``: unreadable, not text, not YAML, or not a mapping.
    """
    text = read_text(path, what, fix)
    try:
        data = yaml.safe_load(text)
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


def output_folder_problem(path: Path) -> str | None:
    """Why fedlight cannot make or use folder ``path`` to write into (a file in the way, no write
    permission), or None."""
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
