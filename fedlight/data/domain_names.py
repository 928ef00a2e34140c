"""The names ``partition.domains`` takes, torch-free so that the recipe schema can check them
(the transforms themselves: ``fedlight.data.domains``)."""

from __future__ import annotations

DOMAIN_NAMES = ("identity", "rotate", "contrast", "blur", "noise", "invert", "colour", "style")


def known_domains(names: list[str]) -> str | None:
    """The schema's check of ``partition.domains``: every entry one of ``DOMAIN_NAMES``."""
    unknown = [name for name in names if name not in DOMAIN_NAMES]
    return f"has unknown domain transform '{unknown[0]}'; use {', '.join(DOMAIN_NAMES)}" if unknown else None
