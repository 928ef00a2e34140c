"""The benchmarks' command line: their own options, and fedlight recipe overrides anywhere.

Kept apart from ``vs_flower.py`` (which needs psutil for process trees) so that a benchmark
without psutil can share it.
"""

from __future__ import annotations

import argparse
import sys


def parse_with_overrides(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parses the command line; ``key=value`` arguments anywhere in it land in ``args.overrides``
    (fedlight recipe overrides)."""
    argv = sys.argv[1:]
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    parser.epilog = "key=value arguments (anywhere) are passed to fedlight as recipe overrides."
    args = parser.parse_args([a for a in argv if a not in overrides])
    args.overrides = overrides
    return args
