"""Run recipes over seeds and tabulate them (mean +- sample std over seeds), for REPRODUCTION.md.

    python benchmarks/reproduce.py --out runs/repro/moon --seeds 0 1 2 \
        --metric test_acc --reference fedavg_fmnist \
        recipes/moon_fmnist.yaml recipes/fedavg_fmnist.yaml ...
    python benchmarks/reproduce.py --out runs/repro/sofed --metric linear_probe_acc@1 \
        --row fedu-fifo recipes/sofed_fmnist.yaml method.name=fedu buffer.policy=fifo ...

Each row (a recipe, or ``--row LABEL RECIPE OVERRIDE...``) and seed is one task of
``fedlight sweep --executor local`` into ``<out>/<label>/seed<k>`` (the tool's own sweep path:
resolved recipe, manifest, logs, ``--resume`` of a killed task); finished runs are reused, and
seeds run seed-major, so a block stopped early holds complete seeds (``--jobs N`` or
``REPRO_JOBS=N bash benchmarks/claims.sh BLOCK`` runs N at once, in that order). The table gives the final metric,
the total bytes and the first round at which each run reaches the reference row's final
accuracy (MOON's Table 2); ``--extra`` adds columns: a final metric (mean +- std, in %), a run
total from ``comm`` such as ``params_up`` (mean over seeds), or a per-round history value such
as ``buffer_rescored`` (mean over rounds and seeds).

``--claim A OP B [PAPER]`` (repeatable) judges a paper's claim on the metric by the rule in
``verdict.py``, written before the runs: ``moon '>' fedavg_fmnist 'MOON 69.1 vs FedAvg 66.3'``
(rule v2, this paragraph); with ``--rule v3`` by ``rule_v3.py`` (REPRODUCTION.md's "Pre-registration
v3"), which needs the block's ``--block``, ``--control`` and ``--min-lift``, has no ``--by`` and no ``--ratio``,
and writes ``<out>/claims-v3-<metric>.jsonl`` for ``family_table.py``; ``--rule v4`` (``rule_v4.py``, "Rule v4")
takes the same arguments, judges each claim at a plateau of the verdict runs, prints its horizon line and each
row's design target, and writes ``claims-v4-<metric>.jsonl`` and ``v4-reading-<metric>.md``.
Each row's floor is its own random-init value of the metric (``results.json``'s ``baseline``;
an AUC without one has chance, 50); a row without a floor is an error.
Its rows (claim | paper's numbers | fedlight's | verdict | command) go to
``<out>/verdicts-<metric>.md`` for the table at the top of REPRODUCTION.md. A side may be a per-seed difference of
two rows, ``'sup100 - sup001' '>' 'ssl100 - ssl001'``, or the best of the rows a glob matches
(mean over seeds), ``'best(moon-*)' '>' 'best(l2-*)'``, or ``rounds(ROW)``: the rounds ROW
takes to reach the ``--reference`` row's mean final metric, per seed (never: one past the last
round), so ``'rounds(moon)' '<' 'rounds(fedavg)'`` is MOON's Table 2. ``--ratio A B KEYS
THRESHOLD [PAPER]`` judges a communication claim: A's ``comm`` totals (``KEYS`` joined by
``+``) over B's, holds if at most THRESHOLD in every seed, does not hold if above it in every
seed. ``--beside A B [PAPER]`` prints A - B's row with no verdict (a comparison reported beside
the claims, such as SOLO at FedAvg's budget). Claims on another metric re-run the command with
that ``--metric`` (finished runs are reused). ``--at-round R`` reads every run as if it had stopped
after round R: MOON's v3 block trains 60 rounds and is judged at its registered R = 30.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

import rule_v3
import rule_v4
from rule_v3 import BESIDE, rounds_to_reach
from verdict import OPS, compare, verdict

CHANCE_AUC = 0.5  # the floor of an AUC whose random-init value a run does not measure


def finished(run_dir: Path) -> dict | None:
    """``run_dir``'s results when the run finished, else None."""
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return results if results.get("final") is not None else None


def at_round(results: dict, round_: int, metric: str) -> dict:
    """``results`` as if the run had stopped after ``round_`` (a block trained past its registered R; with no
    lr schedule the first R rounds of a longer run are an R-round run): round R's evaluation is its
    ``final``, later history rows are dropped; ``comm`` and ``wall_seconds`` stay the whole run's."""
    rows = [h for h in results["history"] if h["round"] <= round_]
    last = rows[-1] if rows and rows[-1]["round"] == round_ else {}
    if last.get(metric) is None:
        raise SystemExit(f"--at-round {round_}: a run has no {metric} at round {round_}; evaluate every round "
                         "(eval.every=1) or choose an evaluated round")
    final = {k: v for k, v in last.items() if k != "round" and v is not None}
    return {**results, "history": rows, "final": final, "rounds_completed": round_}


def run(label: str, recipe: Path, seed: int, out: Path, overrides: list[str]) -> dict:
    """The results of ``recipe`` + ``overrides`` at ``seed``: a one-task ``fedlight sweep --executor
    local`` into ``<out>/<label>/seed<seed>`` (a killed task resumes), reused once finished."""
    folder = out / label / f"seed{seed}"
    run_dir = folder / "runs" / f"seed={seed}"
    results = finished(run_dir)
    if results is None:
        cmd = [sys.executable, "-m", "fedlight", "sweep", "--recipe", str(recipe), "--out", str(folder),
               "--seeds", "1", "--executor", "local", f"seed={seed}", *overrides]
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            raise SystemExit(f"run failed, see {folder}/logs")
        results = finished(run_dir)
        if results is None:
            raise SystemExit(f"{run_dir}: the sweep ended without final results; see {folder}/logs")
    return results


def per_round_table(table: dict[str, list[dict]], metric: str) -> str:
    """| row | the metric's mean over seeds at each evaluated round | (in %; '-' where a run did not evaluate)."""
    def at(res: dict) -> dict[int, float]:
        return {h["round"]: h[metric] for h in res["history"] if h.get(metric) is not None}
    rounds = sorted(set.union(*(set(at(res)) for runs in table.values() for res in runs)))
    lines = ["| round | " + " | ".join(map(str, rounds)) + " |", "|---|" + "---|" * len(rounds)]
    for name, runs in table.items():
        cells = [f"{np.mean([at(res)[r] for res in runs]) * 100:.1f}" if all(r in at(res) for res in runs) else "-"
                 for r in rounds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_table(table: dict[str, list[dict]], metric: str, seeds: list[int]) -> str:
    """| row | the final metric of each seed | its random-init value of each seed | (in %)."""
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:.1f}"
    lines = ["| row | final, seed " + " / ".join(map(str, seeds)) + " | random init, seed "
             + " / ".join(map(str, seeds)) + " |", "|---|---|---|"]
    for name, runs in table.items():
        lines.append(f"| {name} | " + " / ".join(cell(res["final"].get(metric)) for res in runs) + " | "
                     + " / ".join(cell(res["baseline"].get(metric)) for res in runs) + " |")
    return "\n".join(lines)


def sample_std(values: np.ndarray) -> float:
    """The seeds' sample standard deviation (ddof 1, as the verdict's interval uses; 0 for one seed)."""
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def extra_cell(runs: list[dict], key: str) -> str:
    """A final metric as mean +- std in %, else a history value averaged over rounds and seeds."""
    if key in runs[0]["final"]:
        values = np.array([res["final"][key] for res in runs]) * 100
        return f"{values.mean():.2f} +- {sample_std(values):.2f}"
    if key in runs[0]["comm"]:  # e.g. params_up: a run total (mean over seeds)
        return f"{np.mean([res['comm'][key] for res in runs]):.3g}"
    return f"{np.mean([h[key] for res in runs for h in res['history'] if h.get(key) is not None]):.3g}"


def best_row(side: str, table: dict[str, list[dict]], metric: str) -> str:
    """``side``, or for ``best(GLOB)`` the row whose label matches GLOB with the highest mean
    ``metric`` over seeds, the first listed on a tie (a paper that tunes a value and reports its
    best, MOON's Table 5)."""
    if not (side.startswith("best(") and side.endswith(")")):
        return side
    matches = [label for label in table if fnmatch.fnmatchcase(label, side[5:-1])]
    if not matches:
        raise SystemExit(f"--claim side {side}: no row matches; rows are {', '.join(table)}")
    return max(matches, key=lambda label: np.mean([res["final"][metric] for res in table[label]]))


def row_floor(runs: list[dict], metric: str) -> float:
    """The row's floor in points: the mean over its seeds of the metric's random-init value
    (chance for an AUC the runs do not measure at random init)."""
    values = [res["baseline"].get(metric) for res in runs if res.get("baseline")]
    if len(values) == len(runs) and None not in values:
        return float(np.mean(values)) * 100
    if "auc" in metric:
        return CHANCE_AUC * 100
    raise SystemExit(f"{metric}: a row has no random-init value in results.json's baseline; "
                     "rule v2 judges no claim without a floor")


def rounds_claim_row(claim: list[str], table: dict[str, list[dict]], metric: str, target: float, out: Path) -> str:
    """A claim on ``rounds(A) OP rounds(B)``: rounds to reach ``target``, per seed, by the interval alone."""
    a, op, b, *paper = claim
    values = {side: rounds_to_reach(table[side[7:-1]], metric, target) for side in (a, b)}
    c = compare(values[a], values[b], floor=None)
    per_seed = "; ".join(f"{side} " + ", ".join(str(int(v)) for v in vals) for side, vals in values.items())
    ours = (f"n {len(values[a])}; target {target * 100:.2f}; {per_seed}; "
            f"A - B {c.mean:+.2f} [{c.low:+.2f}, {c.high:+.2f}] rounds")
    return f"| {a} {op} {b} ({metric}) | {paper[0] if paper else '-'} | {ours} | {verdict(op, c)} | `--out {out}` |"


def ratio_row(spec: list[str], table: dict[str, list[dict]], out: Path) -> str:
    """``--ratio A B KEYS THRESHOLD [PAPER]``: A's summed ``comm`` KEYS over B's, per seed, against THRESHOLD."""
    a, b, keys, threshold, *paper = spec
    def total(res: dict) -> float:
        return sum(res["comm"][k] for k in keys.split("+"))
    ratios = np.array([total(ra) / total(rb) for ra, rb in zip(table[a], table[b])])
    limit = float(threshold)
    said = "holds" if (ratios <= limit).all() else "does not hold" if (ratios > limit).all() else "inconclusive"
    ours = f"{keys}: " + ", ".join(f"{r:.3f}" for r in ratios) + f" (per seed; threshold {limit:g})"
    return f"| {a} / {b} <= {limit:g} ({keys}) | {paper[0] if paper else '-'} | {ours} | {said} | `--out {out}` |"


def claim_sides(claim: list[str], table: dict[str, list[dict]], metric: str) -> tuple[dict[str, str], list[list[str]]]:
    """A claim's two sides as row labels, ``[[A]]`` or ``[[X, Y]]`` (X - Y) each, with ``best(GLOB)``
    resolved (``best_row``); and how the table names each side (``best(moon-*) = moon-mu5``)."""
    picked = {side: best_row(side, table, metric) for side in claim[0:3:2]}
    named = {side: side if row == side else f"{side} = {row}" for side, row in picked.items()}
    sides = [picked[side].split(" - ") for side in claim[0:3:2]]
    if any(label not in table for side in sides for label in side) or any(len(side) > 2 for side in sides):
        raise SystemExit(f"--claim {' '.join(claim)}: a side is a row or 'X - Y'; rows are {', '.join(table)}")
    return named, sides


def claim_row(claim: list[str], table: dict[str, list[dict]], metric: str, margin: float, out: Path,
              by: float = 0.0, judged: bool = True) -> str:
    """One row of the verdict table for ``claim`` = [A, OP, B] or [A, OP, B, PAPER]; a side may
    be a difference of two rows, ``"X - Y"`` (per seed), or ``best(GLOB)``, the best of the rows
    it matches (``best_row``; the chosen row is named). Rows at or below their floor are named.
    ``by`` > 0 makes ``A > B`` (``A < B``) mean "by at least ``by`` points": the interval is
    judged against ``by`` (``-by``) instead of 0; the printed interval is A - B's own. ``judged``
    False prints the row with no verdict (``A vs B``, verdict cell ``BESIDE``)."""
    a, op, b, *paper = claim
    named, sides = claim_sides(claim, table, metric)
    labels = [label for side in sides for label in side]
    values = {k: np.array([res["final"][metric] for res in table[k]]) * 100 for k in labels}
    side_values = [values[side[0]] - (values[side[1]] if len(side) == 2 else 0) for side in sides]
    rows = list(dict.fromkeys(labels))
    floors = {k: row_floor(table[k], metric) for k in rows}
    try:
        c = compare(*side_values, [floors[k] for k in rows], rows=[values[k] for k in rows])
    except ValueError as exc:
        raise SystemExit(f"--claim {' '.join(claim)}: {exc}") from None
    said = (f"{named[claim[0]]} vs {named[claim[2]]}" if not judged else
            f"{named[claim[0]]} {op} {named[claim[2]]}" + (f" (within {margin:g})" if op == "~" else
                                                          f" (by >= {by:g})" if by else ""))
    ours = f"n {len(side_values[0])}; " + "; ".join(f"{k} {v.mean():.2f} +- {sample_std(v):.2f}" for k, v in values.items())
    floor_text = ", ".join(f"{floors[k]:.2f}" for k in rows)
    ours += (f"; A - B {c.mean:+.2f} [{c.low:+.2f}, {c.high:+.2f}]"
             + f"; seed spread {c.spread:.2f}; floors {floor_text}, signal {c.signal:.1f}"
             + "".join(f"; {rows[i]} at or below its floor" for i in c.collapsed))
    shift = 0.0 if op == "~" else by if op == ">" else -by
    shifted = replace(c, mean=c.mean - shift, low=c.low - shift, high=c.high - shift)
    said_verdict = verdict(op, shifted, margin) if judged else BESIDE
    return f"| {said} ({metric}) | {paper[0] if paper else '-'} | {ours} | {said_verdict} | `--out {out}` |"


def v3_options(args: argparse.Namespace, table: dict[str, list[dict]]) -> rule_v3.Options:
    """The block's registered values (rule v3 and v4), every named row checked against the table."""
    o = rule_v3.Options(args.min_lift, tuple(args.learns), tuple(args.control), args.chance, args.margin)
    unknown = [k for k in (*o.learns, *o.controls) if k not in table]
    if unknown:
        raise SystemExit(f"--learns / --control {', '.join(unknown)}: not a row; rows are {', '.join(table)}")
    return o


def v3_judges(args: argparse.Namespace, table: dict[str, list[dict]],
              o: rule_v3.Options) -> list[tuple[tuple[str, ...], rule_v4.Judge]]:
    """Each ``--claim``, ``--beside`` and ``--count`` as (the rows it reads, a function from a table of runs to
    its rule v3 record); a rounds claim's target is the reference row's mean final metric in that table."""
    block, metric = args.block, args.metric

    def target(t: dict[str, list[dict]]) -> float:
        return float(np.mean([res["final"][metric] for res in t[args.reference]]))

    def rows(*labels: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*labels, *o.controls]))

    out: list[tuple[tuple[str, ...], rule_v4.Judge]] = []
    for c in args.claim:
        if c[0].startswith("rounds("):
            out.append((rows(c[0][7:-1], c[2][7:-1], args.reference),
                        lambda t, c=c: rule_v3.rounds_claim(block, c, t, metric, target(t), o)))
        else:
            sides = claim_sides(c, table, metric)[1]
            out.append((rows(*(k for side in sides for k in side)),
                        lambda t, c=c, sides=sides: rule_v3.mean_claim(block, c, sides, t, metric, o)))
    for a, b, *paper in args.beside:
        sides = claim_sides([a, ">", b], table, metric)[1]
        out.append((rows(*(k for side in sides for k in side)), lambda t, c=[a, ">", b, *paper], sides=sides:
                    rule_v3.mean_claim(block, c, sides, t, metric, o, judged=False)))
    out += [((spec[0], spec[1]), lambda t, spec=spec: rule_v3.count_claim(block, spec, t)) for spec in args.count]
    return out


def write_v3(args: argparse.Namespace, table: dict[str, list[dict]]) -> None:
    """Rule v3's records of ``--claim`` and ``--count``: ``<out>/claims-v3-<metric>.jsonl`` (for
    ``family_table.py``) and the same rows, unadjusted, in ``<out>/verdicts-v3-<metric>.md``."""
    records = [judge(table) for _, judge in v3_judges(args, table, v3_options(args, table))]
    text = "\n".join(rule_v3.markdown(r) for r in records)
    print(text)
    rule_v3.write(records, args.out / f"claims-v3-{args.metric}.jsonl")
    (args.out / f"verdicts-v3-{args.metric}.md").write_text(text + "\n")


def write_v4(args: argparse.Namespace, full: dict[str, list[dict]], table: dict[str, list[dict]]) -> None:
    """Rule v4 (``rule_v4.py``) from the uncut runs ``full`` (``table``: the same at the judged round): each
    claim at a plateau of the verdict runs, its horizon line, each row's design target;
    ``<out>/claims-v4-<metric>.jsonl`` (for ``family_table.py --rule v4``) and ``<out>/v4-reading-<metric>.md``."""
    o = v3_options(args, table)
    records, readings = [], []
    for rows, judge in v3_judges(args, table, o):
        record = judge(table)
        if record.kind in ("mean", "rounds"):
            readings.append(rule_v4.read_claim(judge, rows, full, args.metric, args.at_round, at_round))
            record = readings[-1].verdict
        records.append(record)
    text = "\n".join(rule_v3.markdown(r) for r in records)
    reading = rule_v4.reading_text(readings, rule_v4.design(table, args.metric, o), args.at_round)
    print(f"{text}\n\n{reading}")
    rule_v3.write(records, args.out / f"claims-v4-{args.metric}.jsonl")
    (args.out / f"v4-reading-{args.metric}.md").write_text(f"{text}\n\n{reading}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", type=Path)
    parser.add_argument("--row", nargs="+", action="append", default=[], metavar="LABEL RECIPE OVERRIDE",
                        help="a labelled row: a recipe and overrides of its own (repeatable)")
    parser.add_argument("--extra", action="append", default=[], metavar="KEY", help="another column (repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--metric", default="test_acc")
    parser.add_argument("--reference", help="recipe stem whose mean final accuracy is the rounds-to-reach target")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run (repeatable)")
    parser.add_argument("--claim", nargs="+", action="append", default=[], metavar="A OP B [PAPER]",
                        help="judge 'A > B', 'A < B' or 'A ~ B' on --metric by verdict.py's rule (repeatable); "
                        "a side is a row, 'X - Y' or 'best(GLOB)'")
    parser.add_argument("--beside", nargs="+", action="append", default=[], metavar="A B [PAPER]",
                        help="A - B's row on --metric with no verdict, reported beside the claims (repeatable)")
    parser.add_argument("--ratio", nargs="+", action="append", default=[], metavar="A B KEYS THRESHOLD [PAPER]",
                        help="judge A's comm KEYS (joined by +) over B's against THRESHOLD in every seed (repeatable)")
    parser.add_argument("--margin", type=float, default=2.0, help="points within which 'A ~ B' holds")
    parser.add_argument("--by", type=float, default=0.0, help="'A > B' and 'A < B' mean by at least this many points")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("REPRO_JOBS", "1")),
                        help="runs at once, each its own process (default $REPRO_JOBS or 1: a GPU machine's cores)")
    parser.add_argument("--per-round", action="store_true", help="also the metric's mean over seeds at every round")
    parser.add_argument("--per-seed", action="store_true", help="also the final metric and its floor of every seed")
    v3 = parser.add_argument_group("rule v3 (rule_v3.py; each block's values fixed in its pre-registration)")
    v3.add_argument("--rule", choices=("v2", "v3", "v4"), default="v2",
                    help="the verdict rule (v2: verdict.py; v4: v3 with its plateau, horizon and design checks)")
    v3.add_argument("--block", help="the block's name in the study's table (rule v3: required)")
    v3.add_argument("--min-lift", type=float, help="points over its floor a row needs to count as trained")
    v3.add_argument("--learns", action="append", default=[], metavar="ROW", help="a row the paper expects to learn")
    v3.add_argument("--control", action="append", default=[], metavar="ROW",
                    help="the block's positive control: a row that must train, or every claim is void")
    v3.add_argument("--at-round", type=int, metavar="R",
                    help="judge every run at round R, its registered horizon, though it trained longer "
                    "(its tables: table-roundR.md, ...; the same command without it tabulates the runs' end)")
    v3.add_argument("--chance", type=float, help="the reference (points) of a metric the paper wants lowered")
    v3.add_argument("--count", nargs="+", action="append", default=[], metavar="A B KEYS CONVENTION [PAPER]",
                    help="A's comm KEYS (joined by +) over B's, stated as a counted fact (repeatable)")
    args = parser.parse_args()
    bad = [c for c in args.claim if len(c) not in (3, 4) or c[1] not in OPS]
    if bad:
        parser.error(f"--claim takes A OP B [PAPER] with OP one of > < ~, got {' '.join(bad[0])}")
    if any(len(c) not in (4, 5) for c in args.count):
        parser.error("--count takes A B KEYS CONVENTION [PAPER]")
    if args.rule in ("v3", "v4") and args.ratio:
        parser.error("rule v3 states a ratio as a counted fact: --count A B KEYS CONVENTION, not --ratio")
    if args.rule in ("v3", "v4") and (args.min_lift is None or not args.control or not args.block or args.by):
        parser.error("rule v3 has no defaults for a block's registered values: name its --block, --control and "
                     "--min-lift (and no --by: a claim's margin is its interval)")
    if any(len(b) not in (2, 3) for b in args.beside):
        parser.error("--beside takes A B [PAPER]")
    if any(c[0].startswith("rounds(") for c in args.claim) and not args.reference:
        parser.error("a rounds(ROW) claim needs --reference, the row whose mean final metric is the target")
    rows = [(r.stem, r, []) for r in args.recipes] + [(label, Path(recipe), list(more))
                                                       for label, recipe, *more in args.row]
    tasks = [(label, recipe, s, more) for s in args.seeds for label, recipe, more in rows]  # seed-major

    stop = threading.Event()  # set by the first failure: a worker that frees up then starts nothing more

    def one(task: tuple) -> tuple[tuple[str, int], dict | None]:
        label, recipe, s, more = task
        if stop.is_set():  # not started: no result, and no error that pool.map could raise before the failure's
            return (label, s), None
        try:
            return (label, s), run(label, recipe, s, args.out, [*args.set, *more])
        except BaseException:
            stop.set()
            raise

    if args.jobs == 1:
        done = dict(map(one, tasks))
    else:  # each run is its own fedlight process; a failed run or Ctrl-C cancels those not started
        pool = ThreadPoolExecutor(args.jobs)
        try:
            done = dict(pool.map(one, tasks))
        except BaseException:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    table = full = {label: [done[label, s] for s in args.seeds] for label, _, _ in rows}
    if args.at_round is not None:
        table = {label: [at_round(res, args.at_round, args.metric) for res in runs] for label, runs in table.items()}
    target = None
    if args.reference:
        target = float(np.mean([res["final"][args.metric] for res in table[args.reference]]))
    reach_head = f"rounds to reach {args.reference} ({target * 100:.2f})" if target is not None else "-"
    lines = [f"| recipe | {args.metric} (mean +- std, {len(args.seeds)} seeds) | random-init encoder | "
             f"spread over clients | {reach_head} | bytes up+down | wall s |" + "".join(f" {e} |" for e in args.extra),
             "|---|---|---|---|---|---|---|" + "---|" * len(args.extra)]
    for name, runs in table.items():
        acc = np.array([res["final"][args.metric] for res in runs]) * 100
        spread = [res["final"].get(f"{args.metric}_std") for res in runs]
        spread_text = f"{np.mean(spread) * 100:.2f}" if all(s is not None for s in spread) else "-"
        reach = "-"
        if target is not None:
            hits = [next((h["round"] for h in res["history"] if h[args.metric] is not None
                          and h[args.metric] >= target), None) for res in runs]
            reach = ", ".join("never" if h is None else str(h) for h in hits)
        comm = np.mean([res["comm"]["bytes_up"] + res["comm"]["bytes_down"] for res in runs])
        wall = np.mean([res["wall_seconds"] for res in runs])
        floor = [res["baseline"][args.metric] for res in runs if res["baseline"].get(args.metric) is not None]
        floor_text = f"{np.mean(floor) * 100:.2f}" if floor else "-"
        lines.append(f"| {name} | {acc.mean():.2f} +- {sample_std(acc):.2f} | {floor_text} | {spread_text} | {reach} | "
                     f"{comm:.3g} | {wall:.0f} |" + "".join(f" {extra_cell(runs, e)} |" for e in args.extra))
    text = "\n".join(lines)
    print(text)
    at = f"-round{args.at_round}" if args.at_round is not None else ""  # beside the same runs' tables at their end
    (args.out / f"table{at}.md").write_text(text + "\n")
    if args.per_round:
        text = per_round_table(table, args.metric)
        print(text)
        (args.out / f"per-round-{args.metric}{at}.md").write_text(text + "\n")
    if args.per_seed:
        text = per_seed_table(table, args.metric, args.seeds)
        print(text)
        (args.out / f"per-seed-{args.metric}{at}.md").write_text(text + "\n")
    if args.rule == "v3":
        write_v3(args, table)
    elif args.rule == "v4":
        write_v4(args, full, table)
    elif args.claim or args.beside or args.ratio:
        claims = "\n".join([*(rounds_claim_row(c, table, args.metric, target, args.out) if c[0].startswith("rounds(")
                               else claim_row(c, table, args.metric, args.margin, args.out, args.by) for c in args.claim),
                             *(claim_row([a, ">", b, *paper], table, args.metric, args.margin, args.out, judged=False)
                               for a, b, *paper in args.beside),
                             *(ratio_row(r, table, args.out) for r in args.ratio)])
        print(claims)
        (args.out / f"verdicts-{args.metric}.md").write_text(claims + "\n")


if __name__ == "__main__":
    main()
