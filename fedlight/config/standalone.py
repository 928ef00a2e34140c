"""A composed recipe as one self-contained file (``fedlight fit --print-recipe`` / ``--write-recipe``).

Every fragment, default and override is folded in: the file lists every recipe key at the value
a run gets (a run folder's ``recipe.yaml`` holds the same, plus its ``resolved`` record), has no
``defaults:``, and runs from any folder. Torch-free: it prints before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from fedlight.config.files import dump_yaml, escape_interpolations
from fedlight.config.schema import Recipe


def recipe_text(recipe: Recipe) -> str:
    """The resolved recipe as written to its file, which ``fedlight fit`` reads back (``load_recipe``,
    OmegaConf's dialect): a literal ``${...}`` in a value stays escaped, so it is not resolved again."""
    return dump_yaml(escape_interpolations(asdict(recipe)))
