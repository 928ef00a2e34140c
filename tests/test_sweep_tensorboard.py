"""A sweep in TensorBoard: each run lists as hparams only what varies across the sweep (with method and
seed), and ``<out>/tensorboard`` names each run by those values (``byol-s3``)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
from tensorboard.plugins.hparams import plugin_data_pb2

from fedlight.cli import main
from fedlight.sweep.grid import Task, expand, parse_grid
from fedlight.sweep.tensorboard_view import board_names, hparam_keys


def _tasks(grid: list[str], seeds: list[int]) -> list[Task]:
    return expand(parse_grid(grid), seeds)


def test_names_and_hparams_are_made_of_what_varies() -> None:
    methods = _tasks(["method.name=simclr,byol"], [3, 4])
    assert list(board_names(methods).values()) == ["simclr-s3", "simclr-s4", "byol-s3", "byol-s4"]
    assert hparam_keys(methods) == ["method.name", "seed"]
    grid = _tasks(["partition.alpha=0.1,1", "fabric.channels_last=true,false", "local.epochs=2"], [0])
    assert list(board_names(grid).values()) == ["alpha=0.1-channels_last=true-s0", "alpha=0.1-channels_last=false-s0",
                                               "alpha=1-channels_last=true-s0", "alpha=1-channels_last=false-s0"]
    assert hparam_keys(grid) == ["partition.alpha", "fabric.channels_last", "method.name", "seed"]  # epochs: one value
    arms = [Task(i, (), seed, arm) for i, (arm, seed) in enumerate([("fedavg", 0), ("fedavg", 1), ("moon", 0)])]
    assert list(board_names(arms).values()) == ["fedavg-s0", "fedavg-s1", "moon-s0"]
    assert hparam_keys(arms) == ["arm", "method.name", "seed"]
    alike = _tasks(["data.root=a/b,a:b"], [0])  # two values alike once made safe
    assert board_names(alike) == {0: "root=a-b-s0-task0", 1: "root=a-b-s0-task1"}


def _hparams(accumulator) -> dict[str, object]:
    for content in accumulator.PluginTagToContent("hparams").values():
        plugin = plugin_data_pb2.HParamsPluginData.FromString(content)
        if plugin.HasField("session_start_info"):
            values = plugin.session_start_info.hparams
            return {k: v.string_value or v.number_value for k, v in values.items()}
    raise AssertionError("no hparams written")


def test_a_sweep_of_two_methods_and_two_seeds_in_tensorboard(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    """2 methods x 2 seeds run here: TensorBoard, pointed where the sweep says, finds 4 runs named
    ``simclr-s3`` .. ``byol-s4``, whose hparams are their method and seed alone; the sweep ends with a
    summary line and the commands that come next."""
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), "--grid", "method.name=simclr,byol", "--seeds", "2",
                 "--out", str(out), "--executor", "local", "--parallel", "2", "rounds=1", "data.subset=200",
                 "eval.probe_epochs=2", "eval.projector_samples=0"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (f"sweep {out}: 4 of the 4 tasks run here finished, 0 failed; compare the finished runs: "
                    f"fedlight report {out}; watch them: tensorboard --logdir {out / 'tensorboard'}")
    board = EventMultiplexer().AddRunsFromDirectory(str(out / "tensorboard"))
    board.Reload()
    assert sorted(board.Runs()) == ["byol-s3", "byol-s4", "simclr-s3", "simclr-s4"]
    for run in board.Runs():
        method, seed = run.split("-s")
        assert _hparams(board.GetAccumulator(run)) == {"method/name": method, "seed": float(seed)}
    recipe = yaml.safe_load(next((out / "recipes").glob("name=byol_seed=3.yaml")).read_text())
    assert recipe["run"]["hparams"] == ["method.name", "seed"]
    results = json.loads((out / "runs/name=byol_seed=3/results.json").read_text())
    assert results["recipe"]["run"]["hparams"] == ["method.name", "seed"]
