"""The recipes fedlight ships: finding one by name (``fedlight fit --recipe sofed_cifar10``) and
listing them (``fedlight recipes``).

They are package data (``pyproject.toml``): ``fedlight/bundled/`` holds ``recipes/``, ``configs/``
and ``slurm/``, links to the repository's top-level folders in a clone and the files themselves
in a wheel, so a recipe's ``defaults: [../configs/...]`` resolve the same in both. Torch-free:
the CLI resolves a name before any heavy import.
"""

from __future__ import annotations

import difflib
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


def first_comment(path: Path) -> str:
    """The text of the first ``#`` comment line of ``path`` (a recipe's one-line description), or ''."""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
    return ""


def describe_recipes() -> str:
    """Every shipped recipe with its one-line description, one a line (``fedlight recipes``)."""
    recipes = bundled_recipes()
    width = max(map(len, recipes), default=0)
    lines = [f"recipes ({RECIPES}; run one with fedlight fit --recipe NAME):"]
    lines += [f"  {name:<{width}}  {first_comment(path)}" for name, path in recipes.items()]
    return "\n".join(lines)
