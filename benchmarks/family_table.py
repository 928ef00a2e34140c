"""The v3 study's top table: every block's claims (``reproduce.py --rule v3`` wrote them as
``claims-v3-<metric>.jsonl``) with raw and Holm-adjusted verdicts over the whole family.

    python benchmarks/family_table.py runs/v3            # every claims-v3-*.jsonl below runs/v3
    python benchmarks/family_table.py runs/v3 --out benchmarks/results/v3-table.md

Holm runs over every claim that was tested (void, counted and beside rows are not in the family).
``--family K`` names the pre-registered family's size while blocks are still running: claims not
on disk yet count as p = 1, so an interim adjusted verdict is never bolder than the final one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import rule_v3

HEADER = ("| claim | paper's numbers | fedlight (CPU twin, rule v3) | raw verdict | Holm-adjusted verdict | "
          "`bash benchmarks/claims.sh` |\n"
          "|---|---|---|---|---|---|")


def table(root: Path, family: int | None = None) -> str:
    """The Markdown table of every record under ``root``, in path order, Holm-adjusted over
    ``family`` tested claims (default: those on disk)."""
    records = [r for path in sorted(root.rglob("claims-v3-*.jsonl")) for r in rule_v3.read(path)]
    if not records:
        raise SystemExit(f"{root}: no claims-v3-*.jsonl below it; run a block's reproduce.py --rule v3 first")
    adjusted = rule_v3.adjust(records, family)
    tested = sum(r.p is not None for r in records)
    size = family - sum(r.verdict.startswith(rule_v3.VOID) for r in records) if family else tested
    lines = [HEADER, *(rule_v3.markdown(r, a) for r, a in zip(records, adjusted))]
    return "\n".join(lines) + (f"\n\nHolm over a family of {size} tested claims (family-wise 5%), {tested} of them "
                               f"on disk (the others count as p = 1); {len(records) - tested} rows not tested.\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--family", type=int, help="the pre-registered number of tested claims (default: those on disk)")
    args = parser.parse_args()
    text = table(args.root, args.family)
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
