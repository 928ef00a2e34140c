"""Config groups: ``configs/method/*.yaml`` and ``configs/server/*.yaml``, each a whole ``method`` or
``server`` section with its paper's defaults (a fragment a recipe may also list under ``defaults``),
chosen by name: ``method:moon``, as Hydra's group overrides choose. ``fedlight.sweep.carry`` puts a
recipe's settings into the chosen section.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedlight.config.bundled import BUNDLED
from fedlight.config.files import read_yaml_mapping
from fedlight.errors import UserError

GROUPS = ("method", "server")
CONFIGS = BUNDLED / "configs"


def options(group: str) -> list[str]:
    """The choices of ``group``: its files' names."""
    return sorted(path.stem for path in (CONFIGS / group).glob("*.yaml"))


@dataclass(frozen=True)
class Choice:
    """``method:moon``: the section ``group`` taken from ``configs/<group>/<option>.yaml``."""

    group: str
    option: str

    @property
    def path(self) -> Path:
        return CONFIGS / self.group / f"{self.option}.yaml"

    def section(self) -> dict[str, Any]:
        """The file's section: a fragment holding only ``<group>: {name: ..., ...}``."""
        data = read_yaml_mapping(self.path, "config group file", "fix the file")
        section = data.get(self.group)
        if set(data) != {self.group} or not isinstance(section, dict) or "name" not in section:
            raise UserError(f"config group file '{self.path}' must hold only '{self.group}: {{name: ..., ...}}'; "
                            "fix the file")
        return dict(section)


def parse_choice(text: str, where: str) -> Choice:
    """``'method:moon'`` -> its ``Choice``; an unknown group or option raises a UserError naming the valid ones."""
    group, _, option = text.partition(":")
    if group not in GROUPS:
        raise UserError(f"{where}: '{text}' names no config group; groups: {', '.join(GROUPS)} (e.g. method:moon)")
    if option not in options(group):
        raise UserError(f"{where}: unknown {group} choice '{option}'; valid: {', '.join(options(group))} "
                        f"(the files in {CONFIGS / group})")
    return Choice(group, option)
