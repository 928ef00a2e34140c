"""Recipe schema, and its composition, overrides and interpolation through OmegaConf."""

from fedlight.config.loader import load_recipe
from fedlight.config.schema import Recipe

__all__ = ["Recipe", "load_recipe"]
