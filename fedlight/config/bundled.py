"""The recipes fedlight ships: finding one by name (``fedlight fit --recipe sofed_cifar10``) and
listing them (``fedlight recipes``).

They are package data (``pyproject.toml``): ``fedlight/bundled/`` holds ``recipes/``, ``configs/``
and ``slurm/``, links to the repository's top-level folders in a clone and the files themselves
in a wheel, so a recipe's ``defaults: [../configs/...]`` resolve the same in both. Torch-free:
the CLI resolves a name before any heavy import.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from pathlib import Path

from fedlight.errors import UserError

BUNDLED = Path(__file__).resolve().parents[1] / "bundled"
RECIPES = BUNDLED / "recipes"
SUFFIX = ".yaml"


def bundled_recipes() -> dict[str, Path]:
    """Every shipped recipe, name (the file's stem) -> path, sorted by name."""
    return {path.stem: path for path in sorted(RECIPES.glob(f"*{SUFFIX}"))}


def resolve_recipe(given: str) -> str:
    """``--recipe`` as a file path: a file here wins, else the shipped recipe a bare name names.

    ``given`` itself when it is a file or folder here; else, for a bare name (no folder part),
    ``./<given>.yaml`` when that file is here, else the shipped recipe of that name (``.yaml``
    optional). A path with a folder part stays a path, which the loader reads (or refuses).

    Raises:
        UserError: a bare name that is neither a file here nor a shipped recipe; a path that is not
            there whose file name is a shipped recipe's (the README's ``recipes/sofed_cifar10.yaml``
            outside a clone), suggesting that recipe by name.
    """
    path = Path(given)
    recipes = bundled_recipes()
    if path.exists() or not given.strip():
        return given
    if path.name != given:
        if path.suffix == SUFFIX and path.stem in recipes:
            raise UserError(f"recipe file '{given}' not found here; fedlight ships a recipe of that name: "
                            f"--recipe {path.stem} runs it from any folder")
        return given
    local = Path(given + SUFFIX)
    if not given.endswith(SUFFIX) and local.is_file():
        return str(local)
    name = given.removesuffix(SUFFIX)
    if name in recipes:
        return str(recipes[name])
    near = difflib.get_close_matches(name, list(recipes), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    raise UserError(f"--recipe '{given}' is neither a file here nor a recipe fedlight ships{hint}; "
                    "give a recipe file's path, or a name 'fedlight recipes' lists")


# a sentence's end: . ! or ? then a space, not after an abbreviation the recipes use (sec. III, et al. 2022)
ABBREVIATIONS = ("sec.", "al.", "Fig.", "Eq.", "eq.", "cf.", "vs.", "e.g.", "i.e.", "i.i.d.")
SENTENCE_END = re.compile("".join(rf"(?<!\b{re.escape(a)})" for a in ABBREVIATIONS) + r"(?<=[.!?])\s+(?=\S)")


def first_comment(path: Path) -> str:
    """The first sentence of the first ``#`` comment block of ``path`` (a recipe's description), or ''.

    A sentence ends at ``.``, ``!`` or ``?`` before a space or the block's end; it may run
    over several comment lines, which are joined."""
    block: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            if block:
                break
            continue
        block.append(stripped.lstrip("#").strip())
    return SENTENCE_END.split(" ".join(block).strip(), maxsplit=1)[0]


def describe_recipes(width: int = 100) -> str:
    """Every shipped recipe with its description, the whole first sentence, wrapped to ``width``
    columns under its own indent (``fedlight recipes``)."""
    recipes = bundled_recipes()
    name_width = max(map(len, recipes), default=0)
    lines = [f"recipes ({RECIPES}; run one with fedlight fit --recipe NAME):"]
    for name, path in recipes.items():
        lines += textwrap.wrap(first_comment(path) or "-", width, initial_indent=f"  {name:<{name_width}}  ",
                               subsequent_indent=" " * (name_width + 4), break_on_hyphens=False)
    return "\n".join(lines)
