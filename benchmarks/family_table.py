"""The v3 study's top table: every block's claims (``reproduce.py --rule v3`` wrote them as
``claims-v3-<metric>.jsonl``) with raw and Holm-adjusted verdicts over the whole family.

    python benchmarks/family_table.py runs/v3            # every claims-v3-*.jsonl below runs/v3
    python benchmarks/family_table.py runs/v3 --out benchmarks/results/v3-table.md

Holm runs over every claim that was tested (void, counted and beside rows are not in the family).
``--family K`` names the pre-registered family's size while blocks are still running: claims not
on disk yet count as p = 1, so an interim adjusted verdict is never bolder than the final one.
Below the table, each block's provenance: its finished runs, the commits their code was at (a
resumed run counts under each commit it ran at), whether any tree was dirty, torch, device and the
UTC span, all read from the runs' ``results.json``. ``--into FILE`` also puts the same text in FILE
between the lines ``<!-- v3-table -->`` and ``<!-- /v3-table -->``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import rule_v3
from fedlight.report.runs import Run

BEGIN, END = "<!-- v3-table -->", "<!-- /v3-table -->"

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


def provenance(root: Path) -> str:
    """A Markdown table of where each block's finished runs came from (every folder below ``root``
    that holds a ``claims-v3-*.jsonl`` is a block; its runs are the ``results.json`` below it)."""
    lines = ["| block | finished runs | commits (runs) | resumed (of them, at 2+ commits) | dirty | torch | device | "
             "first start, last end (UTC) |", "|---|---|---|---|---|---|---|---|"]
    for folder in sorted({path.parent for path in root.rglob("claims-v3-*.jsonl")}):
        block = rule_v3.read(next(folder.glob("claims-v3-*.jsonl")))[0].block
        runs = [Run(path.parent, json.loads(path.read_text())) for path in sorted(folder.rglob("results.json"))]
        runs = [run for run in runs if run.finished]
        starts = [(run.results.get("provenance") or {}).get("segments") or [] for run in runs]
        segments = [seg for run_starts in starts for seg in run_starts]
        commits = Counter(c.removesuffix("+dirty")[:7] for run in runs for c in run.commits)
        resumed = sum(len(run_starts) > 1 for run_starts in starts)
        mixed = sum(len({c[:7] for c in run.commits}) > 1 for run in runs)
        dirty = sum(any(c.endswith("+dirty") for c in run.commits) for run in runs)
        unrecorded = len(runs) - sum(bool(run.commits) for run in runs)

        def values(key: str) -> str:
            return ", ".join(sorted({str(seg.get(key)) for seg in segments})) or "-"

        span = (f"{min(seg['start'] for seg in segments)}, {max(seg['end'] for seg in segments)}"
                if segments else "-")
        lines.append(f"| `{block}` | {len(runs)} | "
                     + (", ".join(f"{c} ({k})" for c, k in sorted(commits.items())) or "-")
                     + (f", none recorded ({unrecorded})" if unrecorded else "")
                     + f" | {resumed} ({mixed}) | {dirty} | {values('torch')} | {values('device')} | {span} |")
    return "\n".join(lines) + "\n"


def put_into(path: Path, text: str) -> None:
    """Replace what lies between ``BEGIN`` and ``END`` in ``path`` by ``text``."""
    old = path.read_text()
    if old.count(BEGIN) != 1 or old.count(END) != 1 or old.index(BEGIN) > old.index(END):
        raise SystemExit(f"{path}: needs one line {BEGIN} and, after it, one line {END} around the table")
    head, rest = old.split(BEGIN + "\n", 1)
    path.write_text(f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--into", type=Path, help="also put the table between the v3-table marks of this file")
    parser.add_argument("--family", type=int, help="the pre-registered number of tested claims (default: those on disk)")
    args = parser.parse_args()
    text = f"{table(args.root, args.family)}\n{provenance(args.root)}"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    if args.into:
        put_into(args.into, text)


if __name__ == "__main__":
    main()
