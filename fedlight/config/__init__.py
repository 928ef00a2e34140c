"""Recipe schema, YAML composition and overrides."""

from fedlight.config.loader import load_recipe
from fedlight.config.schema import Recipe

__all__ = ["Recipe", "load_recipe"]
