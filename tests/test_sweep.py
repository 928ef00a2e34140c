"""`fedlight sweep`: grid expansion, manifest, re-runs that never touch finished tasks, errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.sweep.grid import expand, parse_grid, split_values
from fedlight.sweep.names import MAX_LENGTH, key_labels, run_names, safe_name
from fedlight.sweep.plan import to_submit
from fedlight.sweep.slurm import array_spec

REPO = Path(__file__).resolve().parents[1]

GRID = ["--grid", "partition.alpha=0.01,1,100", "--grid", "method.name=simclr,byol"]


def _sweep(recipe: Path, out: Path, *extra: str) -> int:
    return main(["sweep", "--recipe", str(recipe), *GRID, "--seeds", "2", "--out", str(out), *extra])


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _names(out: Path) -> list[str]:
    """The sweep's run names in task order (tasks.txt, which the array script reads)."""
    return (out / "tasks.txt").read_text().splitlines()


def _finish(run_dir: Path, rounds: int) -> None:
    """What a finished run leaves: results.json with every round and final accuracies."""
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps({"rounds_completed": rounds, "final": {"knn_acc": 0.5}}))


def test_grid_expands_in_a_fixed_order() -> None:
    axes = parse_grid(["partition.alpha=0.01,1,100", "method.name=simclr,byol"])
    assert [a.values for a in axes] == [(0.01, 1, 100), ("simclr", "byol")]
    tasks = expand(axes, [3, 4])
    assert len(tasks) == 12 and [t.index for t in tasks] == list(range(12))
    assert tasks[0].overrides == ["partition.alpha=0.01", "method.name=simclr", "seed=3"]
    assert tasks[1].overrides == ["partition.alpha=0.01", "method.name=simclr", "seed=4"]
    assert tasks[2].overrides == ["partition.alpha=0.01", "method.name=byol", "seed=3"]
    assert tasks[11].overrides == ["partition.alpha=100", "method.name=byol", "seed=4"]
    assert expand(parse_grid(["partition.alpha=0.01,1,100", "method.name=simclr,byol"]), [3, 4]) == tasks
    assert split_values("0.5,[0.1,0.2],{a: 1, b: 2}") == ["0.5", "[0.1,0.2]", "{a: 1, b: 2}"]
    assert expand([], [7]) == expand(parse_grid([]), [7]) and expand([], [7])[0].overrides == ["seed=7"]


def test_array_spec_compacts_ranges() -> None:
    assert array_spec([0, 1, 2, 3, 4, 5], 2) == "0-5%2"
    assert array_spec([0, 1, 2, 5, 7, 8], None) == "0-2,5,7-8"
    assert array_spec([4], 1) == "4%1"


def test_sweep_writes_recipes_manifest_and_script(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out, "--max-running", "4", "--slurm-args", "--partition=cpu --time=0:10:00") == 0
    printed = capsys.readouterr().out
    assert re.search(r"sbatch --parsable --array=0-11%4 --partition=cpu --time=0:10:00 \S*array.sbatch", printed)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["tasks"]) == 12 and manifest["seeds"] == [3, 4] and manifest["submissions"] == []
    task = manifest["tasks"][9]  # alpha=100, simclr, seed 4
    recipe = load_recipe(task["recipe"])
    assert (recipe.partition.alpha, recipe.method["name"], recipe.seed) == (100.0, "simclr", 4)
    assert recipe.method == {"name": "simclr", "hidden_dim": 64, "output_dim": 32}  # the base recipe's section
    assert load_recipe(manifest["tasks"][10]["recipe"]).method == {"name": "byol"}  # another name resets it
    assert task["name"] == _names(out)[9] == "alpha=100_name=simclr_seed=4"
    assert recipe.run_dir == task["run_dir"] == str(out / "runs/alpha=100_name=simclr_seed=4")
    assert task["recipe"] == str(out / "recipes/alpha=100_name=simclr_seed=4.yaml")
    assert recipe.rounds == load_recipe(tiny_recipe).rounds
    script = (out / "array.sbatch").read_text()
    assert "#SBATCH --signal=B:USR1@120" in script and "#SBATCH --requeue" in script
    assert f'recipe="{out}/recipes/$name.yaml"' in script and f'"{out}/tasks.txt"' in script and "@" + "OUT@" not in script
    assert (out / "logs").is_dir()


def test_rerun_keeps_finished_tasks_and_submits_the_rest(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out) == 0
    rounds, names = load_recipe(tiny_recipe).rounds, _names(out)
    for i in (0, 1, 5):
        _finish(out / "runs" / names[i], rounds)
    (out / f"recipes/{names[5]}.yaml").write_text("edited by hand\n")  # a finished task's files are left alone
    _finish(out / "runs" / names[6], rounds - 1)  # not all rounds: not finished
    before = {i: (out / "runs" / names[i] / "results.json").read_bytes() for i in (0, 1, 5)}
    capsys.readouterr()
    assert _sweep(tiny_recipe, out) == 0
    printed = capsys.readouterr().out
    assert "3 finished" in printed and " --array=2-4,6-11 " in printed
    assert (out / f"recipes/{names[5]}.yaml").read_text() == "edited by hand\n"
    assert all((out / "runs" / names[i] / "results.json").read_bytes() == b for i, b in before.items())
    assert len(json.loads((out / "manifest.json").read_text())["tasks"]) == 12


def test_a_full_disk_mid_sweep_says_to_run_the_sweep_again(tmp_path: Path, tiny_recipe: Path, capsys,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep is continued by its own command (it has no --resume): a failed write must say so."""
    from fedlight import atomic_files

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    real = atomic_files.write_synced
    monkeypatch.setattr(atomic_files, "write_synced", full_disk)
    assert _sweep(tiny_recipe, tmp_path / "sweep") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json" in err and "free space on that disk" in err, err
    assert err.rstrip().endswith("then run the same sweep command again"), err
    # the disk fills between sbatch and the manifest's record of it: running the sweep again submits it twice
    from fedlight.sweep import command

    monkeypatch.setattr(atomic_files, "write_synced", real)
    monkeypatch.setattr(command, "require_sbatch", lambda: None)

    def submitted_then_full(sbatch: list[str]) -> str:
        monkeypatch.setattr(atomic_files, "write_synced", full_disk)
        return "4242"

    monkeypatch.setattr(command, "submit", submitted_then_full)
    assert _sweep(tiny_recipe, tmp_path / "submitted", "--submit") == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("wait for array job 4242 to end (or scancel it), then run the same sweep command "
                                 "again"), err


def test_plan_never_duplicates_a_submission() -> None:
    manifest = {"tasks": [{"index": i} for i in range(5)], "submissions": [{"job_id": "7", "tasks": [0, 1, 2]}]}
    assert to_submit(manifest, finished={0}, resubmit_failed=False) == [3, 4]
    assert to_submit(manifest, finished={0}, resubmit_failed=True) == [1, 2, 3, 4]
    assert to_submit(manifest, finished={0, 1, 2, 3, 4}, resubmit_failed=True) == []
    assert to_submit(manifest, finished={0}, resubmit_failed=True, queued={2, 3}) == [1, 4]  # still in SLURM


@pytest.mark.parametrize("grid, fragment", [
    (["--grid", "partition.alpah=0.1,1"], "valid keys under partition: alpha, classes_per_client"),
    (["--grid", "partition=0.1,1"], "--grid key 'partition' is not a recipe key; 'partition' is a section"),
    (["--grid", "partition.alpha="], "--grid partition.alpha has an empty value list"),
    (["--grid", "partition.alpha=1,,2"], "--grid partition.alpha has an empty value list"),
    (["--grid", "partition.alpha=1", "--grid", "partition.alpha=2"], "given twice"),
    (["--grid", "seed=1,2"], "use --seeds"),
    (["--grid", "method.bogus=1,2"], "unknown recipe key 'method.bogus'"),
    (["--grid", "partition.alpha=-1,1"], "recipe key 'partition.alpha' must be >= 0.001"),
    (["--grid", "exchange.policy=none,uniform"], "exchange.policy=uniform needs local.iterations"),  # fit's check
    # ran one experiment twice under two names
    (["--grid", "local.lr=1e-3,0.001"], "--grid local.lr: '1e-3' and '0.001' are one value (0.001)"),
    (["--grid", "partition.alpha=0.1,0.1"], "'0.1' and '0.1' are one value"),
    # a stray bracket stopped the split: one value 'a]b,c'
    (["--grid", "data.root=a]b,c"], "--grid data.root 'a]b,c': an unbalanced bracket"),
    (["--grid", "data.root='a,b"], "an unbalanced quote"),
])
def test_bad_grid_is_one_line_exit_2_and_nothing_written(tmp_path: Path, tiny_recipe: Path, capsys,
                                                         grid: list[str], fragment: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *grid, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1
    assert not out.exists()


def test_a_quoted_grid_value_keeps_its_commas() -> None:
    """Split at the quoted comma, the tasks read '"/data/a', 'b"' and '/data/c' as data.root."""
    from fedlight.sweep.grid import parse_axis
    axis = parse_axis('data.root="/data/a,b",/data/c')
    assert axis.values == ("/data/a,b", "/data/c")


def test_submit_without_sbatch_is_refused_before_writing(tmp_path: Path, tiny_recipe: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out, "--submit") == 2
    err = capsys.readouterr().err
    assert "sbatch" in err and "not on PATH" in err and err.count("\n") == 1
    assert not out.exists()


def test_out_holding_another_sweep_is_refused(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out) == 0
    before = _tree(out)
    capsys.readouterr()
    assert main(["sweep", "--recipe", str(tiny_recipe), "--grid", "partition.alpha=5,6", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out '{out}' holds another sweep" in err and err.count("\n") == 1
    assert _tree(out) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert _sweep(tiny_recipe, other) == 2
    assert "holds no sweep" in capsys.readouterr().err and _tree(other) == {"notes.txt": b"mine"}


# ---------------------------------------------------------------- damaged input

def _damage(manifest: dict, how: str) -> object:
    if how == "no tasks":
        return {k: v for k, v in manifest.items() if k != "tasks"}
    if how == "no submissions":
        return {k: v for k, v in manifest.items() if k != "submissions"}
    if how == "a task without its digest":
        return {**manifest, "tasks": [{k: v for k, v in t.items() if k != "digest"} for t in manifest["tasks"]]}
    if how == "a task index as text":
        return {**manifest, "tasks": [{**t, "index": str(t["index"])} for t in manifest["tasks"]]}
    if how == "a submission without its job id":
        return {**manifest, "submissions": [{"tasks": [0]}]}
    if how == "a submission of task names":
        return {**manifest, "submissions": [{"job_id": "1", "tasks": ["a"]}]}
    if how == "tasks as a mapping":
        return {**manifest, "tasks": {"0": manifest["tasks"][0]}}
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["no tasks", "no submissions", "a task without its digest", "a task index as text",
                                 "a submission without its job id", "a submission of task names",
                                 "tasks as a mapping", "binary", "latin-1"])
def test_a_damaged_manifest_is_one_line_and_nothing_is_written(tmp_path: Path, tiny_recipe: Path, capsys,
                                                                how: str) -> None:
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out) == 0
    manifest = out / "manifest.json"
    if how == "binary":
        manifest.write_bytes(bytes(range(256)))
    elif how == "latin-1":
        manifest.write_bytes(manifest.read_text().replace("tiny", "tin\u00ff").encode("latin-1"))
    else:
        manifest.write_text(json.dumps(_damage(json.loads(manifest.read_text()), how)))
    before = _tree(out)
    capsys.readouterr()
    assert _sweep(tiny_recipe, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and str(manifest) in err, err
    assert "new --out" in err
    assert _tree(out) == before


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_out_that_is_or_is_under_a_file(tmp_path: Path, tiny_recipe: Path, capsys, where: str) -> None:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    out = blocker if where == "a file" else blocker / "sweep"
    assert _sweep(tiny_recipe, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(blocker) in err and "--out" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "tiny.yaml"]
    assert blocker.read_text() == "mine"


def test_unclosed_quote_in_slurm_args_writes_nothing(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    """Today the manifest, recipes and array script were written before the quotes were read."""
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out, "--slurm-args", '--partition="gpu --time=1:00:00') == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--slurm-args" in err and "quotes" in err, err
    assert not out.exists()


@pytest.mark.parametrize("args", ["--array=0-99", "-a 0-3", "--chdir /elsewhere", "-D/x", "--output=x.log", "-e err"])
def test_an_sbatch_option_the_sweep_sets_is_refused_in_slurm_args(tmp_path: Path, tiny_recipe: Path, capsys,
                                                                  args: str) -> None:
    """sbatch takes the last of a repeated option: --array=0-99 ran tasks the manifest does not list."""
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out, "--slurm-args", f"--partition=cpu {args}") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is the sweep's own" in err, err
    assert not out.exists()


@pytest.mark.parametrize("results", [b"[1, 2]", b'{"rounds_completed": "3", "final": {}}', bytes(range(256)),
                                     b'{"rounds_completed": 3, "final": [1]}', b"[" * 100_000])
def test_a_garbage_results_json_is_an_unfinished_task(tmp_path: Path, tiny_recipe: Path, capsys,
                                                      results: bytes) -> None:
    """A task whose results.json is hand-edited or garbage is not finished: it is submitted again
    (its --resume rewrites the file) instead of the sweep ending in a traceback."""
    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out) == 0
    run = out / "runs" / _names(out)[0]
    run.mkdir(parents=True)
    (run / "results.json").write_bytes(results)
    capsys.readouterr()
    assert _sweep(tiny_recipe, out, "--resubmit-failed") == 0
    assert "0 finished" in capsys.readouterr().out


# ---------------------------------------------------------------- overrides, run names, executors

def test_run_names_are_readable_safe_and_unique() -> None:
    assert key_labels(["partition.alpha", "method.name"]) == {"partition.alpha": "alpha", "method.name": "name"}
    assert key_labels(["method.name", "server.name", "data.seed"]) == {  # shared last parts keep their whole key
        "method.name": "method.name", "server.name": "server.name", "data.seed": "data.seed"}
    assert safe_name("weights=[0.5, 0.5]") == "weights=-0.5-0.5-"
    long = safe_name("x=" + "9" * 500)
    assert len(long) == MAX_LENGTH and long != safe_name("x=" + "9" * 499)  # cut, but the digest tells them apart
    tasks = expand(parse_grid(["partition.alpha=0.1,1", "method.name=simclr,byol"]), [0])
    assert list(run_names(tasks).values()) == ["alpha=0.1_name=simclr_seed=0", "alpha=0.1_name=byol_seed=0",
                                               "alpha=1_name=simclr_seed=0", "alpha=1_name=byol_seed=0"]
    alike = expand(parse_grid(["data.root=a/b,a:b"]), [0])  # both become root=a-b_seed=0
    assert run_names(alike) == {0: "root=a-b_seed=0_task0", 1: "root=a-b_seed=0_task1"}
    x = "x" * (MAX_LENGTH - len("root=a-b_seed=0"))  # alike at exactly MAX_LENGTH: the suffix must not overflow it
    long_alike = run_names(expand(parse_grid([f"data.root=a/b{x},a:b{x}"]), [0]))
    assert len(set(long_alike.values())) == 2 and all(len(n) <= MAX_LENGTH for n in long_alike.values())


def test_sweep_takes_overrides_as_fit_does(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), "rounds=1", "--grid", "partition.alpha=0.1,1",
                 "--out", str(out), "clients.num=3"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["overrides"] == ["rounds=1", "clients.num=3"]
    recipes = [load_recipe(t["recipe"]) for t in manifest["tasks"]]
    assert [(r.rounds, r.clients.num, r.partition.alpha) for r in recipes] == [(1, 3, 0.1), (1, 3, 1.0)]
    capsys.readouterr()
    assert main(["sweep", "--recipe", str(tiny_recipe), "--grid", "partition.alpha=0.1,1", "--out", str(out)]) == 2
    assert "holds another sweep" in capsys.readouterr().err  # other overrides: other recipes


@pytest.mark.parametrize("override, fragment", [
    ("run.dir=/tmp/x", "override 'run.dir=/tmp/x': the sweep puts each run under --out"),
    ("partition.alpha=3", "sets the --grid key 'partition.alpha'"),
    ("rounds=-1", "must be"),
    ("=1", "override '=1' must look like key=value"),
])
def test_a_bad_sweep_override_is_one_line_and_nothing_written(tmp_path: Path, tiny_recipe: Path, capsys,
                                                              override: str, fragment: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), "--grid", "partition.alpha=0.1,1", override,
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err
    assert not out.exists()


def test_slurm_args_value_may_start_with_a_dash(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), "--out", str(out), "--slurm-args", "--cpus-per-task=1"]) == 0
    assert " --cpus-per-task=1 " in capsys.readouterr().out


@pytest.mark.parametrize("flags, fragment", [
    (["--executor", "local", "--submit"], "--submit is for --executor slurm"),
    (["--executor", "local", "--slurm-args", "--time=5"], "--slurm-args is for --executor slurm"),
    (["--executor", "local", "--parallel", "0"], "--parallel 0: give at least 1"),
    (["--parallel", "2"], "--parallel is for --executor local"),
    (["--executor", "cloud"], "invalid choice: 'cloud'"),
])
def test_executor_options_that_do_not_fit(tmp_path: Path, tiny_recipe: Path, capsys, flags: list[str],
                                          fragment: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_sweep_keeps_the_run_names_its_manifest_records(tmp_path: Path, tiny_recipe: Path, monkeypatch) -> None:
    """A later fedlight that names runs otherwise must not orphan a sweep's finished runs."""
    import fedlight.sweep.command as command

    out = tmp_path / "sweep"
    assert _sweep(tiny_recipe, out) == 0
    before = _names(out)
    monkeypatch.setattr(command, "run_names", lambda tasks: {t.index: f"renamed{t.index}" for t in tasks})
    assert _sweep(tiny_recipe, out) == 0
    assert _names(out) == before and not (out / "runs/renamed0").exists()


def test_a_sweep_from_before_keeps_its_index_names(tmp_path: Path, tiny_recipe: Path, capsys, monkeypatch) -> None:
    """A format-1 sweep folder (runs/0003, no tasks.txt) is refreshed, not refused or renamed."""
    import fedlight.sweep.command as command
    import fedlight.sweep.manifest as mf

    out = tmp_path / "sweep"
    with monkeypatch.context() as old_fedlight:
        old_fedlight.setattr(mf, "FORMAT", mf.INDEX_NAMES)
        old_fedlight.setattr(command, "run_names", lambda tasks: {t.index: f"{t.index:04d}" for t in tasks})
        assert _sweep(tiny_recipe, out) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tasks"] = [{k: v for k, v in t.items() if k != "name"} for t in manifest["tasks"]]
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "tasks.txt").unlink()
    for task in manifest["tasks"]:  # written before run.client_state, run.hparams and new_device: other digests now
        path = Path(task["recipe"])
        old_recipe = yaml.safe_load(path.read_text())
        del old_recipe["run"]["client_state"], old_recipe["run"]["hparams"], old_recipe["new_device"]
        path.write_text(yaml.safe_dump(old_recipe, sort_keys=False))
        task["digest"] = "0" * 16
    (out / "manifest.json").write_text(json.dumps(manifest))
    _finish(out / "runs/0002", load_recipe(tiny_recipe).rounds)
    capsys.readouterr()
    assert _sweep(tiny_recipe, out) == 0
    assert "1 finished" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["fedlight_sweep"] == mf.INDEX_NAMES
    assert _names(out) == [f"{i:04d}" for i in range(12)] and (out / "recipes/0011.yaml").is_file()
    assert not (out / "runs/alpha=0.01_name=simclr_seed=3").exists()


FOLDERS = {  # a run folder as it may be when a task starts or is requeued -> the flag it gets
    "none": ([], "--overwrite"),
    "recipe-only": (["recipe.yaml"], "--overwrite"),  # killed before its first checkpoint
    "checkpoint": (["recipe.yaml", "checkpoints/last.pt"], "--resume"),
    "prev-only": (["recipe.yaml", "checkpoints/last.pt.prev"], "--resume"),  # killed between the two renames
    "results-pruned": (["recipe.yaml", "results.json"], "--resume"),  # its *.pt pruned: fit refuses, not retrains
}


@pytest.mark.parametrize("state", FOLDERS)
def test_the_local_executor_and_the_slurm_scripts_overwrite_only_a_folder_with_no_saved_round(tmp_path: Path,
                                                                                            state: str) -> None:
    """The three places that pick --resume or --overwrite for the user agree, and --overwrite only where no
    round was saved: the scripts' own lines run in bash (milliseconds, no Python)."""
    from fedlight.sweep.local import resume_flag

    files, flag = FOLDERS[state]
    run = tmp_path / "run"
    run.mkdir()
    for name in files:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("{}")
    assert resume_flag(run) == flag
    for script, variable in (("array.sbatch", "run"), ("multinode.sbatch", "run_dir")):
        rule = [line for line in (REPO / "slurm" / script).read_text().splitlines()
                if line.startswith("mode=") or line.startswith("if [") and "mode=" in line]
        assert len(rule) == 2, (script, rule)
        chosen = subprocess.run(["bash", "-c", "\n".join([*rule, 'echo "$mode"'])], env={variable: str(run)},
                                capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        assert chosen == flag, script


@pytest.mark.usefixtures("forked_sweep_tasks")  # each task a process, forked
def test_local_executor_runs_skips_finished_and_resumes(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    """A tiny 2-run sweep as 2 processes here: the same manifest and files as SLURM's, finished
    tasks skipped on a re-run, and a task whose results are gone continued with --resume."""
    out = tmp_path / "sweep"
    sweep = ["sweep", "--recipe", str(tiny_recipe), "--grid", "partition.alpha=0.5,5", "--out", str(out),
             "--executor", "local", "rounds=1", "eval.projector_samples=0"]
    assert main([*sweep, "--parallel", "2"]) == 0
    printed = capsys.readouterr().out
    assert "2 to run now" in printed and printed.count(": finished") == 2, printed
    assert printed.count(": started; log ") == 2 and "(--overwrite)" not in printed  # new tasks, nothing overwritten
    names = _names(out)
    assert names == ["alpha=0.5_seed=3", "alpha=5_seed=3"]
    for name, alpha in zip(names, (0.5, 5.0)):
        results = json.loads((out / "runs" / name / "results.json").read_text())
        assert results["rounds_completed"] == 1 and results["final"] is not None
        assert results["recipe"]["partition"]["alpha"] == alpha
        assert "--overwrite" in (out / "logs" / f"{name}.out").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["submissions"] == [{"job_id": "local", "tasks": [0, 1], "executor": "local", "parallel": 2}]

    assert main(sweep) == 0  # both finished: nothing runs
    assert "2 finished" in capsys.readouterr().out
    # and it says so without importing torch (seconds on a busy machine: what made a finished sweep slow)
    probe = f"import sys; from fedlight.cli import main; assert main({sweep!r}) == 0; print('torch' in sys.modules)"
    again = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == "False", again.stderr[-2000:]
    assert "2 finished, 0 submitted before and not finished, 0 to run now" in again.stdout
    (out / "runs" / names[1] / "results.json").unlink()  # as if killed after its checkpoint
    assert main(sweep) == 0
    printed = capsys.readouterr().out
    assert "1 finished" in printed and "1 to run now" in printed
    assert f"{names[1]}: resumed from its checkpoint" in printed
    assert json.loads((out / "runs" / names[1] / "results.json").read_text())["final"] is not None


def test_a_sweep_whose_tasks_read_a_relative_data_root_is_run_from_where_it_was_planned(
        tmp_path: Path, tiny_recipe: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its array script's --chdir, and the local tasks' folder, followed the last invocation: a task started
    from elsewhere read data.root 'data' under another folder."""
    planned, elsewhere = tmp_path / "planned", tmp_path / "elsewhere"
    planned.mkdir(), elsewhere.mkdir()
    out = tmp_path / "sweep"
    monkeypatch.chdir(planned)
    assert _sweep(tiny_recipe, out, "data.root=data") == 0
    assert json.loads((out / "manifest.json").read_text())["cwd"] == str(planned)
    before = _tree(out)
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert _sweep(tiny_recipe, out, "data.root=data") == 2
    err = capsys.readouterr().err
    assert f"a sweep planned from '{planned}', and its tasks read data.root 'data'" in err and err.count("\n") == 1
    assert _tree(out) == before
    monkeypatch.chdir(planned)
    assert _sweep(tiny_recipe, out, "data.root=data") == 0
    absolute = tmp_path / "absolute"
    assert _sweep(tiny_recipe, absolute, f"data.root={tmp_path}") == 0
    monkeypatch.chdir(elsewhere)
    assert _sweep(tiny_recipe, absolute, f"data.root={tmp_path}") == 0  # nothing relative: any folder
