"""docs/papers_map.md stays true: every path it lists exists, and every module a paper may own is mapped."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "docs" / "papers_map.md"
MAPPED_ROOMS = ("fedlight/methods/*.py", "fedlight/server/*.py", "fedlight/engine/parts/*/*.py")


def _rows() -> list[list[str]]:
    """The map's one table: a list of cells per row (header and separator left out)."""
    lines = [line for line in MAP.read_text().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def _listed() -> list[str]:
    """Every path (or glob) the table names: a backticked token with a slash."""
    return [token for row in _rows() for cell in row for token in re.findall(r"`([^`\s]+/[^`\s]*)`", cell)]


def test_the_map_is_one_table_of_seven_columns_with_a_row_per_paper() -> None:
    rows = _rows()
    assert {len(row) for row in rows} == {7}
    papers = " ".join(row[0] for row in rows)
    for paper in ("FLESD", "LG-FedAvg", "SOFed", "MOON", "CF-CL", "FedU", "FedEMA", "FedProx", "SCAFFOLD"):
        assert paper in papers


def test_every_path_the_map_lists_exists() -> None:
    listed = _listed()
    assert len(listed) > 50
    assert [p for p in listed if not any(REPO.glob(p))] == []


def test_every_module_a_paper_may_own_is_on_the_map() -> None:
    """A new file in ``methods/``, ``server/`` or a part's folder fails here until a row names it."""
    mapped = {path for pattern in _listed() for path in REPO.glob(pattern)}
    unmapped = sorted(str(p.relative_to(REPO)) for room in MAPPED_ROOMS for p in REPO.glob(room)
                      if p.name != "__init__.py" and p not in mapped)
    assert unmapped == []
