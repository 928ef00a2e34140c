"""The v3 study's top table: every block's claims (``reproduce.py --rule v3`` wrote them as
``claims-v3-<metric>.jsonl``) with raw and Holm-adjusted verdicts over the whole family.

    python benchmarks/family_table.py runs/v3            # every claims-v3-*.jsonl below runs/v3
    python benchmarks/family_table.py runs/v3 --out benchmarks/results/v3-table.md
    python benchmarks/family_table.py runs/v3 --family 30 --rule v4   # rule v4's re-reading (claims-v4-*.jsonl)

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
import re
from collections import Counter
from pathlib import Path

import rule_v3
from fedlight.report.runs import Run

BEGIN, END = "<!-- v3-table -->", "<!-- /v3-table -->"

HEADER = ("| claim | paper's numbers | fedlight (CPU twin, rule v3) | raw verdict | Holm-adjusted verdict | "
          "`bash benchmarks/claims.sh` |\n"
          "|---|---|---|---|---|---|")


def table(root: Path, family: int | None = None, rule: str = "v3") -> str:
    """The Markdown table of every record of ``rule`` (v3, or v4: ``claims-v4-*.jsonl``) under ``root``, in
    path order, Holm-adjusted over ``family`` tested claims (default: those on disk)."""
    records = [r for path in sorted(root.rglob(f"claims-{rule}-*.jsonl")) for r in rule_v3.read(path)]
    if not records:
        raise SystemExit(f"{root}: no claims-{rule}-*.jsonl below it; run a block's reproduce.py --rule {rule} first")
    adjusted = rule_v3.adjust(records, family)
    tested = sum(r.p is not None for r in records)
    size = family - sum(r.verdict.startswith(rule_v3.VOID) for r in records) if family else tested
    lines = [HEADER.replace("rule v3", f"rule {rule}"), *(rule_v3.markdown(r, a) for r, a in zip(records, adjusted))]
    return "\n".join(lines) + (f"\n\nHolm over a family of {size} tested claims (family-wise 5%), {tested} of them "
                               f"on disk (the others count as p = 1); {len(records) - tested} rows not tested.\n")


def _segments(run: Run) -> list[dict]:
    """The starts of ``run`` that results.json records (none for a run from before provenance)."""
    found = run.results.get("provenance")
    segments = found.get("segments") if isinstance(found, dict) else None
    return [seg for seg in segments if isinstance(seg, dict)] if isinstance(segments, list) else []


def provenance(root: Path) -> str:
    """Where each block's finished runs came from.

    Args:
        root: a folder whose subfolders holding a ``claims-v3-*.jsonl`` are the blocks; a block's runs
            are the ``results.json`` below its folder.

    Returns:
        A Markdown table, a row a block: finished runs, runs per commit (a run resumed at two commits
        counts under both), runs resumed (and of them, at 2+ commits), runs with a dirty tree, torch
        versions, devices, and the first start and last end (UTC).
    """
    lines = ["| block | finished runs | commits (runs) | resumed (of them, at 2+ commits) | dirty | torch | device | "
             "first start, last end (UTC) |", "|---|---|---|---|---|---|---|---|"]
    for folder in sorted({path.parent for path in root.rglob("claims-v3-*.jsonl")}):
        records = [r for path in sorted(folder.glob("claims-v3-*.jsonl")) for r in rule_v3.read(path)]
        if not records:
            continue
        block = records[0].block
        runs = [Run(path.parent, json.loads(path.read_text())) for path in sorted(folder.rglob("results.json"))]
        runs = [run for run in runs if run.finished]
        starts = [_segments(run) for run in runs]
        segments = [seg for run_starts in starts for seg in run_starts]
        at = [{c.removesuffix("+dirty")[:7] for c in run.commits} for run in runs]  # a run's commits, once each
        commits = Counter(c for run_commits in at for c in run_commits)
        resumed = sum(len(run_starts) > 1 for run_starts in starts)
        mixed = sum(len(run_commits) > 1 for run_commits in at)
        dirty = sum(any(c.endswith("+dirty") for c in run.commits) for run in runs)
        unrecorded = len(runs) - sum(bool(run.commits) for run in runs)

        def values(key: str) -> str:
            return ", ".join(sorted({str(seg.get(key)) for seg in segments})) or "-"

        first = [str(seg["start"]) for seg in segments if seg.get("start")]
        last = [str(seg["end"]) for seg in segments if seg.get("end")]
        span = f"{min(first)}, {max(last)}" if first and last else "-"
        lines.append(f"| `{block}` | {len(runs)} | "
                     + (", ".join(f"{c} ({k})" for c, k in sorted(commits.items())) or "-")
                     + (f", none recorded ({unrecorded})" if unrecorded else "")
                     + f" | {resumed} ({mixed}) | {dirty} | {values('torch')} | {values('device')} | {span} |")
    return "\n".join(lines) + "\n"


def put_into(path: Path, text: str) -> None:
    """Replace the lines between the line ``BEGIN`` and the line ``END`` of ``path`` by ``text``.

    Raises:
        SystemExit: ``path`` lacks either mark on a line of its own, in that order, or has one twice.
    """
    old = path.read_text()
    marks = re.compile(rf"^{re.escape(BEGIN)}\n(.*?)^{re.escape(END)}$", re.DOTALL | re.MULTILINE)
    if len(marks.findall(old)) != 1 or old.count(BEGIN) != 1 or old.count(END) != 1:
        raise SystemExit(f"{path}: needs one line {BEGIN} and, after it, one line {END} around the table")
    path.write_text(marks.sub(lambda _: f"{BEGIN}\n{text}{END}", old))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--into", type=Path, help="also put the table between the v3-table marks of this file")
    parser.add_argument("--family", type=int, help="the pre-registered number of tested claims (default: those on disk)")
    parser.add_argument("--rule", choices=("v3", "v4"), default="v3", help="whose claims files to read (claims-RULE-*)")
    args = parser.parse_args()
    text = f"{table(args.root, args.family, args.rule)}\n{provenance(args.root)}"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    if args.into:
        put_into(args.into, text)


if __name__ == "__main__":
    main()
