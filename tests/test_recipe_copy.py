"""``fit --print-recipe`` / ``--write-recipe``: the composed recipe seen before anything runs, and
copied as one self-contained file that runs from any folder; a copied shipped recipe still finds
its fragments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.config.bundled import bundled_recipes
from fedlight.config.files import load_yaml, read_yaml_mapping

REPO = Path(__file__).resolve().parents[1]
QUICK = bundled_recipes()["quickstart_fmnist"]
# quickstart on synthetic data, shrunk to seconds
TINY = ["data.name=synthetic", "rounds=1", "clients.num=2", "partition.min_size=5", "local.batch_size=64",
        "method.hidden_dim=64", "method.output_dim=32", "eval.probe_epochs=5", "eval.knn_k=20",
        "eval.projector_samples=50", "fabric.accelerator=cpu"]


def test_the_printed_recipe_is_the_loaders_with_the_overrides_applied(capsys) -> None:
    overrides = ["rounds=3", "method.temperature=0.2"]
    assert main(["fit", "--recipe", "quickstart_fmnist", *overrides, "--print-recipe"]) == 0
    printed = load_yaml(capsys.readouterr().out, "the printed recipe")
    assert printed == asdict(load_recipe(QUICK, overrides))
    assert "defaults" not in printed
    assert (printed["rounds"], printed["method"]["temperature"]) == (3, 0.2)  # the overrides
    assert (printed["data"]["name"], printed["partition"]["alpha"]) == ("fashion_mnist", 0.5)  # fragment, recipe
    assert printed["run"]["min_free_mb"] == 256  # a key neither sets: the schema's default


def test_a_written_copy_runs_from_another_folder_and_records_what_was_printed(tmp_path: Path, monkeypatch,
                                                                               capsys) -> None:
    copy, run_dir = tmp_path / "elsewhere" / "mine.yaml", tmp_path / "run"
    assert main(["fit", "--recipe", "quickstart_fmnist", *TINY, f"run.dir={run_dir}", "--write-recipe", str(copy)]) == 0
    assert f"fedlight fit --recipe {copy}" in capsys.readouterr().out
    assert not run_dir.exists()  # nothing ran
    written = read_yaml_mapping(copy, "the copy", "-")
    monkeypatch.chdir(tmp_path)  # outside the repository, away from the copy
    assert main(["fit", "--recipe", str(copy)]) == 0
    recorded = read_yaml_mapping(run_dir / "recipe.yaml", "the run's recipe", "-")
    assert recorded.pop("resolved")["method"]["name"] == "simclr"  # the one record the copy does not set
    assert recorded == written
    assert (written["rounds"], written["data"]["name"]) == (1, "synthetic")


def test_a_copied_shipped_recipe_finds_the_shipped_fragments_unless_its_own_are_there(tmp_path: Path) -> None:
    copy = tmp_path / "recipes" / QUICK.name
    copy.parent.mkdir()
    shutil.copy(QUICK, copy)  # its defaults, ../configs/..., name nothing beside it
    assert load_recipe(copy) == load_recipe(QUICK)
    own = tmp_path / "configs" / "data" / "fashion_mnist.yaml"
    own.parent.mkdir(parents=True)
    own.write_text("data: {name: fashion_mnist, root: /elsewhere}\n")
    assert load_recipe(copy).data.root == "/elsewhere"


def test_write_recipe_keeps_an_existing_file_unless_told_to_overwrite(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("rounds: 7\n")
    argv = ["fit", "--recipe", "quickstart_fmnist", "--write-recipe", str(mine)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists (add --overwrite" in err and str(mine) in err
    assert mine.read_text() == "rounds: 7\n"
    assert main([*argv[:-1], "", "--overwrite"]) == 2  # '' is this folder, not a file: nothing runs
    assert "--write-recipe: '.' is a folder" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    assert load_recipe(mine) == load_recipe(QUICK)


@pytest.mark.parametrize("argv,named", [
    (["--recipe", "/nonexistent/recipe.yaml"], "/nonexistent/recipe.yaml"),
    (["--recipe", "quickstart_fmnist", "rounds=many"], "rounds"),
    (["--recipe", "quickstart_fmnist", "method.name=simclrr"], "unknown method.name 'simclrr'"),
    (["--recipe", "{bad}"], "--write-recipe my.yaml"),  # a fragment found nowhere says how to get a copy
])
def test_a_bad_recipe_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys, argv, named) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICK.read_text().replace("fashion_mnist.yaml", "fmnist.yaml"))
    monkeypatch.chdir(tmp_path)
    argv = [str(bad) if a == "{bad}" else a for a in argv]
    assert main(["fit", *argv, "--print-recipe", "--write-recipe", "out.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and named in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_printing_and_writing_a_recipe_import_no_torch(tmp_path: Path) -> None:
    probe = ("import sys\nfrom fedlight.cli import main\n"
             "assert main(['fit', '--recipe', 'quickstart_fmnist', '--print-recipe', '--write-recipe', 'm.yaml']) == 0\n"
             "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "[]"
    assert (tmp_path / "m.yaml").is_file()
