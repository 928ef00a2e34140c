"""A sweep refuses what `fit` refuses, before it writes anything; escaped interpolations survive
a sweep; `--recipe` finds the file it names; absurd values are refused or clamped."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlight.cli import main

FMNIST = "/usr/share/datasets/fashion-mnist"  # where fit finds the data the sweep could not
LG = ["method.name=lg", "method.objective=supervised"]


def _errors(capsys) -> list[str]:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(line.startswith("fedlight: error: ") for line in lines), err
    return lines


@pytest.mark.parametrize(("args", "bad_task", "fragment"), [
    # the data check (the data is on this machine): fit's take_subset refuses it
    (["--grid", "data.subset=100,5000"], "data.subset=5000 seed=3", "'data.subset' is 5000 but the dataset has 1200"),
    # the method's constructor: LG's layer names
    ([*LG, "--grid", "method.global_layers=[classifier],[no_such_layer]"], "method.global_layers=[no_such_layer] seed=3",
     "method.global_layers entry 'no_such_layer'"),
    # data that is not on this machine: the constructor still runs, against the dataset's shape
    ([*LG, "data.name=fashion_mnist", "data.root=/no/such/root", "--grid",
      "method.global_layers=[classifier],[no_such_layer]"], "method.global_layers=[no_such_layer] seed=3",
     "method.global_layers entry 'no_such_layer'"),
    # the new device against the test split
    (["new_device.rotation=90", "new_device.train=10", "--grid", "new_device.test=10,301"], "new_device.test=301 seed=3",
     "'new_device.test' is 301 but the test split has 300"),
])
def test_a_sweep_refuses_each_task_fit_would_refuse(tmp_path: Path, tiny_recipe: Path, capsys, args: list[str],
                                                    bad_task: str, fragment: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *args, "--out", str(out)]) == 2
    (line,) = _errors(capsys)
    assert f"({bad_task})" in line and fragment in line, line
    assert not out.exists()
    # fit refuses the same task with the same words (the same check, not a copy of it)
    task = [a.replace("/no/such/root", FMNIST) for a in args if a != "--grid" and "," not in a] + bad_task.split()
    assert main(["fit", "--recipe", str(tiny_recipe), *task]) == 2
    (fit_line,) = _errors(capsys)
    assert fragment in fit_line and not (tiny_recipe.parent / "run").exists()


def test_each_problem_is_one_line_naming_its_tasks(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *LG, "--grid", "data.subset=100,5000",
                 "--grid", "method.global_layers=[classifier],[no_such_layer]", "--out", str(out)]) == 2
    lines = _errors(capsys)
    assert len(lines) == 2, lines
    layers = next(line for line in lines if "global_layers entry" in line)
    (subset,) = set(lines) - {layers}
    assert "tasks 2 (data.subset=5000 method.global_layers=[classifier] seed=3), 3 (" in subset, subset
    assert "'data.subset' is 5000" in subset
    assert "task 1 (data.subset=100 method.global_layers=[no_such_layer] seed=3): " in layers  # 3 fails on its data first
    assert not out.exists()


def test_an_escaped_interpolation_stays_literal_in_a_task_recipe(tmp_path: Path, tiny_recipe: Path) -> None:
    """fit reads '\\${seed}' as the text '${seed}'; the task recipe a sweep writes must too (not
    the seed, nor an error), and a re-run sees the same sweep."""
    from fedlight.config import load_recipe

    base = tmp_path / "base.yaml"
    base.write_text(tiny_recipe.read_text() + 'name: "lit\\\\${seed}"\ndata: {root: "/data/\\\\${seed}\\\\\\\\${seed}"}\n')
    fit_sees = load_recipe(base)
    assert (fit_sees.name, fit_sees.data.root) == ("lit${seed}", "/data/${seed}\\3")
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(base), "--grid", "partition.alpha=0.5,5", "--out", str(out)]) == 0
    for written in sorted((out / "recipes").glob("*.yaml")):
        task = load_recipe(written)  # as `fedlight fit --recipe <task recipe>` reads it
        assert (task.name, task.data.root) == (fit_sees.name, fit_sees.data.root)
    assert main(["sweep", "--recipe", str(base), "--grid", "partition.alpha=0.5,5", "--out", str(out)]) == 0
