"""benchmarks/rule_v3.py and family_table.py: rule v3's claim records on hand-made runs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import family_table  # noqa: E402
import rule_v3  # noqa: E402
from rule_v3 import Options  # noqa: E402

T_975_2 = 4.302652729911275


def runs(*finals: float, floor: float | None = 0.10) -> list[dict]:
    """One row's results: a final test accuracy per seed, each over its random-init ``floor``."""
    return [{"final": {"test_acc": f}, "baseline": {} if floor is None else {"test_acc": floor}} for f in finals]


def claim(a: str, op: str, b: str, table: dict, o: Options = Options()) -> rule_v3.Record:
    return rule_v3.mean_claim("blk", [a, op, b, "paper"], [a.split(" - "), b.split(" - ")], table, "test_acc", o)


def test_a_directional_claim_is_the_paired_t_test() -> None:
    table = {"moon": runs(0.70, 0.72, 0.74), "fedavg": runs(0.68, 0.69, 0.70)}  # A - B 2, 3, 4
    r = claim("moon", ">", "fedavg", table)
    assert r.verdict == "holds"
    assert r.p == pytest.approx(2 * (0.5 - 5.196152 / (2 * math.sqrt(29))), rel=1e-5)  # t = 3 sqrt(3), 2 df
    assert f"A - B +3.00 [{3 - T_975_2 / math.sqrt(3):+.2f}, {3 + T_975_2 / math.sqrt(3):+.2f}]" in r.text
    assert claim("moon", "<", "fedavg", table).verdict == "does not hold"


def test_a_control_that_did_not_train_voids_the_claim() -> None:
    table = {"moon": runs(0.70, 0.72, 0.74), "fedavg": runs(0.11, 0.12, 0.10)}  # fedavg 1 point above 10
    o = Options(min_lift=5, controls=("fedavg",))
    r = claim("moon", ">", "fedavg", table, o)
    assert r.verdict == "void: control fedavg did not train" and r.p is None
    assert "not trained, the control)" in r.text


def test_beating_a_comparator_that_never_trained_shows_nothing() -> None:
    """v2's SOLO at 11.56 over a 10.33 floor passed the signal gate; v3 voids FedAvg > SOLO."""
    table = {"fedavg": runs(0.68, 0.70, 0.69), "solo": runs(0.115, 0.12, 0.11)}
    assert claim("fedavg", ">", "solo", table, Options(learns=("solo",))).verdict.startswith("void: comparator solo")
    # a method that does not train is judged as measured: the paper's claim does not hold
    assert claim("solo", ">", "fedavg", table, Options(learns=("solo",))).verdict == "does not hold"
    # a comparator the paper expects to stay low (FLESD sec. 3's supervised at alpha 0.01) is not checked
    assert claim("fedavg", ">", "solo", table).verdict == "holds"


def test_equivalence_is_tost_and_ignores_the_rows_level() -> None:
    """Lazy T = 50 ~ full (v2: inconclusive at signal 4.2 though inside the margin)."""
    table = {"lazy": runs(0.670, 0.680, 0.675, 0.672), "full": runs(0.672, 0.676, 0.678, 0.671, floor=0.65)}
    r = claim("lazy", "~", "full", table, Options(margin=2.0))
    assert r.verdict == "holds" and "90% [" in r.text


def test_a_lowered_metric_reads_against_chance_and_a_missing_floor_is_an_error() -> None:
    table = {"fair": runs(0.89, 0.90, 0.88, floor=None), "noadv": runs(0.97, 0.96, 0.98, floor=None)}
    r = claim("fair", "<", "noadv", table, Options(chance=50.0))
    assert r.verdict == "holds" and "chance 50.00" in r.text
    with pytest.raises(SystemExit, match="no random-init value"):
        claim("fair", "<", "noadv", table)


def test_rounds_to_reach_with_censored_seeds_is_a_sign_test() -> None:
    def run(*accs: float) -> dict:
        return {"history": [{"round": r + 1, "test_acc": a} for r, a in enumerate(accs)],
                "final": {"test_acc": accs[-1]}, "baseline": {"test_acc": 0.1}}

    moon = [run(0.2, 0.6, 0.7)] * 6  # reaches 0.6 at round 2 in every seed
    fedavg = [run(0.2, 0.3, 0.5)] * 6  # never: censored at round 3
    r = rule_v3.rounds_claim("blk", ["rounds(moon)", "<", "rounds(fedavg)"], {"moon": moon, "fedavg": fedavg},
                             "test_acc", 0.6, Options())
    assert r.verdict == "holds" and r.p == pytest.approx(2 / 64)
    assert "moon first in 6, fedavg first in 0, tied 0" in r.text and "never" in r.text


def test_a_counted_ratio_is_stated_not_tested() -> None:
    table = {"lg": [{"comm": {"params_up": 509.0}}] * 3, "fedavg": [{"comm": {"params_up": 1000.0}}] * 3}
    r = rule_v3.count_claim("blk", ["lg", "fedavg", "params_up", "each round's uploaded parameters"], table)
    assert r.verdict == "counted, no test" and r.p is None
    assert "= 0.509 (counted: each round's uploaded parameters)" in r.text


def test_family_table_adjusts_by_holm_over_tested_claims_only(tmp_path: Path) -> None:
    strong = {"a": runs(0.70, 0.72, 0.74), "b": runs(0.60, 0.61, 0.62)}  # A - B 10, 11, 12: p 0.0027
    weak = {"a": runs(0.70, 0.72, 0.74), "b": runs(0.68, 0.69, 0.70)}  # p 0.035
    records = [claim("a", ">", "b", strong), claim("a", ">", "b", weak), claim("a", ">", "b", weak),
               claim("a", ">", "b", {"a": weak["a"], "b": runs(0.1, 0.1, 0.1)}, Options(controls=("b",)))]
    (tmp_path / "blk").mkdir()
    rule_v3.write(records, tmp_path / "blk" / "claims-v3-test_acc.jsonl")
    text = family_table.table(tmp_path)
    lines = text.splitlines()
    assert lines[2].endswith("| holds | holds | `blk` |")  # 3 x 0.0027 < 0.05
    assert lines[3].endswith("| holds | inconclusive | `blk` |")  # 2 x 0.035 > 0.05
    assert lines[4].endswith("| holds | inconclusive | `blk` |")
    assert lines[5].endswith("| void: control b did not train | void: control b did not train | `blk` |")
    assert "Holm over a family of 3 tested claims (family-wise 5%), 3 of them on disk" in text
    # 21 registered claims, the void one out, 17 not run yet: 20 x 0.0027 = 0.055, so even the strong one waits
    interim = family_table.table(tmp_path, family=21)
    assert interim.splitlines()[2].endswith("| holds | inconclusive | `blk` |")
    assert "Holm over a family of 20 tested claims (family-wise 5%), 3 of them on disk" in interim
    with pytest.raises(SystemExit, match="more than the family of 3"):
        family_table.table(tmp_path, family=3)


def test_at_round_reads_a_longer_run_at_its_registered_horizon() -> None:
    """A 4-round run judged at R = 2: round 2 is its final, and a target first met in round 3 is censored."""
    import reproduce

    history = [{"round": r, "test_acc": acc, "loss": 1.0 / r} for r, acc in enumerate((0.5, 0.6, 0.8, 0.9), 1)]
    res = {"history": history, "final": {"test_acc": 0.9}, "baseline": {"test_acc": 0.1}, "rounds_completed": 4,
           "comm": {"bytes_up": 7}}
    cut = reproduce.at_round(res, 2, "test_acc")
    assert cut["final"] == {"test_acc": 0.6, "loss": 0.5} and cut["rounds_completed"] == 2
    assert [h["round"] for h in cut["history"]] == [1, 2] and cut["baseline"] == res["baseline"]
    assert rule_v3.rounds_to_reach([cut], "test_acc", 0.7, never=math.inf).tolist() == [math.inf]
    assert rule_v3.rounds_to_reach([res], "test_acc", 0.7, never=math.inf).tolist() == [3]
    with pytest.raises(SystemExit, match="round 5"):
        reproduce.at_round(res, 5, "test_acc")


def test_jobs_run_every_row_and_seed_at_once_and_tabulate_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--jobs 2: every (row, seed) run once, two at a time, and the table has every row's mean."""
    import threading
    import time

    import reproduce

    lock, running, peak, calls = threading.Lock(), [0], [0], []

    def fake_run(label: str, recipe: Path, seed: int, out: Path, overrides: list[str]) -> dict:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            calls.append((label, seed, tuple(overrides)))
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        acc = 0.5 + 0.1 * (label == "b") + 0.01 * seed
        return {"final": {"test_acc": acc}, "baseline": {"test_acc": 0.1}, "history": [], "rounds_completed": 1,
                "comm": {"bytes_up": 1, "bytes_down": 1}, "wall_seconds": 1.0}

    monkeypatch.setattr(reproduce, "run", fake_run)
    argv = ["reproduce.py", "--out", str(tmp_path), "--seeds", "0", "1", "2", "--set", "rounds=1",
            "--row", "a", "a.yaml", "--row", "b", "b.yaml", "x=1"]
    monkeypatch.setattr(sys, "argv", argv + ["--jobs", "2"])
    reproduce.main()
    assert sorted(calls) == sorted((r, s, ("rounds=1",) + (("x=1",) if r == "b" else ())) for r in "ab" for s in (0, 1, 2))
    assert peak[0] == 2
    table = (tmp_path / "table.md").read_text()
    assert "| a | 51.00 +- 1.00" in table and "| b | 61.00 +- 1.00" in table

    def failing_run(label: str, recipe: Path, seed: int, out: Path, overrides: list[str]) -> dict:
        calls.append((label, seed))
        time.sleep(0.05)
        raise SystemExit(f"run failed, see {label}/seed{seed}/logs")

    for jobs in ("1", "2"):  # the first failure stops the block: a worker that frees up starts nothing more
        calls.clear()
        monkeypatch.setattr(reproduce, "run", failing_run)
        monkeypatch.setattr(sys, "argv", argv + ["--jobs", jobs])
        with pytest.raises(SystemExit, match="a/seed0"):
            reproduce.main()
        assert calls[0] == ("a", 0) and len(calls) <= int(jobs)


@pytest.mark.parametrize("missing", ["--block", "--control", "--min-lift", "--by"])
def test_rule_v3_has_no_default_for_a_registered_value(missing: str, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    import reproduce

    block = {"--block": ["--block", "blk"], "--control": ["--control", "a"], "--min-lift": ["--min-lift", "2"],
             "--by": []}
    argv = ["reproduce.py", "--rule", "v3", "--out", "x", "--seeds", "0", "--row", "a", "a.yaml",
            "--claim", "a", ">", "b"]
    argv += [arg for name, args in block.items() if name != missing for arg in args]
    monkeypatch.setattr(sys, "argv", argv + (["--by", "1"] if missing == "--by" else []))
    with pytest.raises(SystemExit) as stop:
        reproduce.main()
    assert stop.value.code == 2 and "name its --block, --control and --min-lift" in capsys.readouterr().err


def test_provenance_counts_each_blocks_finished_runs_per_commit(tmp_path: Path) -> None:
    def segment(commit: str, start: str, dirty: bool = False) -> dict:
        return {"commit": commit * 40, "dirty": dirty, "start": start, "end": start.replace("T0", "T1"),
                "torch": "2.14.1", "device": "cpu"}

    (tmp_path / "blk").mkdir()
    rule_v3.write([claim("a", ">", "b", {"a": runs(0.7, 0.72, 0.74), "b": runs(0.6, 0.61, 0.62)})],
                  tmp_path / "blk" / "claims-v3-test_acc.jsonl")
    made = {"a/s1": [segment("a", "2026-11-27T01:00:00Z")],
            "a/s2": [segment("a", "2026-11-27T02:00:00Z"), segment("b", "2026-11-27T03:00:00Z", dirty=True)],
            "b/s1": [segment("b", "2026-11-27T04:00:00Z")], "b/s2": [], "b/s3": None,
            "b/s4": [segment("b", "2026-11-27T05:00:00Z"), segment("b", "2026-11-27T06:00:00Z", dirty=True)]}
    for run, segments in made.items():
        (tmp_path / "blk" / run).mkdir(parents=True)
        (tmp_path / "blk" / run / "results.json").write_text(json.dumps(
            {"final": None if run == "b/s2" else {"test_acc": 0.7}}
            | ({} if segments is None else {"provenance": {"segments": segments}})))
    row = family_table.provenance(tmp_path).splitlines()[2]
    # the unfinished run is left out; a run resumed at two commits counts under both, one resumed at one
    # commit (clean, then dirty) once; both count as dirty; one records nothing
    assert row == ("| `blk` | 5 | aaaaaaa (2), bbbbbbb (3), none recorded (1) | 2 (1) | 2 | 2.14.1 | cpu | "
                   "2026-11-27T01:00:00Z, 2026-11-27T16:00:00Z |")
    target = tmp_path / "REPRODUCTION.md"
    target.write_text(f"before\n{family_table.BEGIN}\nold table\n{family_table.END}\nafter\n")
    family_table.put_into(target, "new table\n")
    assert target.read_text() == f"before\n{family_table.BEGIN}\nnew table\n{family_table.END}\nafter\n"
    begin, end = family_table.BEGIN, family_table.END
    for damaged in ("no marks\n", f"{end}\nx\n{begin}\n", f"{begin}\n{begin}\nx\n{end}\n", f"{begin} \nx\n{end}\n"):
        target.write_text(damaged)  # none, reversed, doubled, not on a line of its own
        with pytest.raises(SystemExit, match="needs one line <!-- v3-table -->"):
            family_table.put_into(target, "new table\n")
