"""A composed recipe as one self-contained file (``fedlight fit --print-recipe`` / ``--write-recipe``).

Every fragment, default and override is folded in: the file lists every recipe key at the value
a run gets (a run folder's ``recipe.yaml`` holds the same, plus its ``resolved`` record), has no
``defaults:``, and runs from any folder. Torch-free: it prints before anything heavy is imported.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path

from fedlight import __version__
from fedlight.atomic_files import atomic_write_bytes
from fedlight.config.files import dump_yaml, escape_interpolations, output_folder_problem
from fedlight.config.schema import Recipe
from fedlight.errors import UserError


def recipe_text(recipe: Recipe) -> str:
    """The resolved recipe as written to its file, which ``fedlight fit`` reads back (``load_recipe``,
    OmegaConf's dialect): a literal ``${...}`` in a value stays escaped, so it is not resolved again."""
    return dump_yaml(escape_interpolations(asdict(recipe)))


def standalone_text(recipe: Recipe, source: str, overrides: list[str], file: str) -> str:
    """``recipe`` (composed from the file ``source`` and ``overrides``) as a self-contained recipe
    file, headed by comments that say where it came from and how to run it (as ``file``)."""
    made_from = shlex.join([source, *overrides])
    return (f"# Composed by fedlight {__version__} from: {made_from}\n"
            "# Every recipe key at its value, no 'defaults:'; edit it, then run it from any folder with\n"
            f"#   fedlight fit --recipe {shlex.quote(file)}\n"
            "# method.* / server.* options not listed take their class defaults (fedlight methods; a run's\n"
            "# recipe.yaml records them under 'resolved:'). 'name' sets the run folder runs/<name>.\n"
            + recipe_text(recipe))


def write_standalone(text: str, path: Path, overwrite: bool) -> None:
    """Write ``text`` to ``path`` (its folder made if missing).

    Raises:
        UserError: ``path`` is already there (without ``overwrite``), is a folder, or cannot be written.
    """
    problem = (f"'{path}' is a folder" if path.is_dir()
               else f"'{path}' exists (add --overwrite to replace it)" if path.exists() and not overwrite
               else output_folder_problem(path.parent))
    if problem is not None:
        raise UserError(f"--write-recipe: {problem}; give another file path")
    # whole or not at all: with --overwrite a kill leaves the old recipe or the new one
    atomic_write_bytes(path, text.encode("utf-8"), then="run --write-recipe again")
