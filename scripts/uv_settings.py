"""pip's configuration as uv's environment variables, for scripts/setup.sh (uv reads none of pip's).

Reads ``pip config list`` on stdin (pip's files and its ``PIP_*`` variables, ``:env:`` lines, which win)
and prints ``export UV_...=...`` lines for ``eval``: pip's index, extra indexes, find-links and
constraints, and, where there are several places to look, pip's choice among them (the best version
on any of them; uv's default takes the first index that has the project).
"""

from __future__ import annotations

import ast
import re
import shlex
import sys

UV = {"index-url": "UV_DEFAULT_INDEX", "extra-index-url": "UV_EXTRA_INDEX_URL", "find-links": "UV_FIND_LINKS",
      "constraint": "UV_CONSTRAINT"}
SEPARATOR = {"find-links": ","}  # uv's list separator where it is not a space


def uv_exports(pip_config: str) -> list[str]:
    """The ``export`` lines for ``pip config list``'s output ``pip_config``."""
    found: dict[str, str] = {}
    from_env: set[str] = set()
    for line in pip_config.splitlines():
        match = re.fullmatch(r"(:env:|[\w-]+)\.([\w-]+)=(.*)", line.strip())
        if not match or match[2] not in UV or (match[2] in from_env and match[1] != ":env:"):
            continue
        found[match[2]] = SEPARATOR.get(match[2], " ").join(ast.literal_eval(match[3]).split())
        if match[1] == ":env:":
            from_env.add(match[2])
    lines = [f"export {UV[key]}={shlex.quote(value)}" for key, value in found.items()]
    if "extra-index-url" in found or "find-links" in found:
        lines.append("export UV_INDEX_STRATEGY=unsafe-best-match")
    return lines


if __name__ == "__main__":
    print("\n".join(uv_exports(sys.stdin.read())))
