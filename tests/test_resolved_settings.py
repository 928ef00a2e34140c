"""Every effective setting recorded: what a run's method, server, backbone and round plug-ins were
built with (constructor defaults included) is in its recipe.yaml, results.json and hparams, and
``--resume`` refuses in one line when the installed code would build them otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TINY
from fedlight.cli import main
from fedlight.engine.output.tensorboard import used_hparams
from fedlight.methods.simclr import SimCLR

FAST = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0"]


@pytest.fixture
def one_round(tmp_path: Path) -> tuple[list[str], Path]:
    """(``fit`` arguments of the tiny recipe, its run folder after one round)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO) + f"run: {{dir: {tmp_path / 'run'}}}\n")
    args = ["fit", "--recipe", str(recipe), *FAST]
    assert main([*args, "rounds=1"]) == 0
    return args, tmp_path / "run"


def edit_record(run: Path, change) -> None:
    """Apply ``change`` to the run's record of its recipe: results.json's, which ``--resume`` compares, and
    the recipe.yaml copy (as an older fedlight, or a later release's code, would have written both)."""
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    change(saved)
    (run / "recipe.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    results = json.loads((run / "results.json").read_text())
    change(results["recipe"])
    (run / "results.json").write_text(json.dumps(results, indent=2))


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("fedlight: error:")]
    return line


def test_the_run_records_what_its_classes_were_built_with(one_round) -> None:
    _, run = one_round
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    # the recipe sets hidden_dim and output_dim; temperature and loss are SimCLR's defaults
    assert saved["method"] == {"name": "simclr", "hidden_dim": 64, "output_dim": 32}
    resolved = saved["resolved"]
    assert resolved["method"] == {"name": "simclr", "hidden_dim": 64, "output_dim": 32, "temperature": 0.5,
                                  "loss": "ntxent"}
    assert resolved["server"] == {"name": "fedavg"} and resolved["plugins"] == {}
    # the synthetic data is 3 x 16 x 16: small_cnn's 32-64-128 conv blocks with BatchNorm
    convs = 3 * 3 * (3 * 32 + 32 * 64 + 64 * 128)
    batch_norms = 2 * (32 + 64 + 128)
    assert resolved["backbone"] == {"name": "small_cnn", "feature_dim": 128, "parameters": convs + batch_norms}
    results = json.loads((run / "results.json").read_text())
    assert results["recipe"]["resolved"] == resolved
    hparams = used_hparams(results["recipe"], ())
    assert hparams["resolved/method/temperature"] == 0.5 and hparams["resolved/backbone/parameters"] == 93472


def test_resume_refuses_in_one_line_when_a_default_changed_in_code(one_round, capsys, monkeypatch) -> None:
    args, run = one_round
    before = (run / "recipe.yaml").read_bytes()
    later = list(SimCLR.__init__.__defaults__)
    later[later.index(0.5)] = 0.7  # a later release changes SimCLR's temperature default
    monkeypatch.setattr(SimCLR.__init__, "__defaults__", tuple(later))
    assert main([*args, "--resume", "rounds=2"]) == 2
    line = error_line(capsys)
    assert "the run recorded method.temperature=0.5" in line and "would run method.temperature=0.7" in line
    assert "set method.temperature=0.5 to resume as recorded" in line
    assert (run / "recipe.yaml").read_bytes() == before
    # pinning the recorded value resumes the same experiment
    assert main([*args, "--resume", "rounds=2", "method.temperature=0.5"]) == 0
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 2


def test_a_run_folder_without_the_record_resumes_silently(one_round, capsys, monkeypatch) -> None:
    args, run = one_round
    edit_record(run, lambda saved: (saved.pop("resolved"), saved.pop("plugins")))  # before they were recorded
    later = list(SimCLR.__init__.__defaults__)
    later[later.index(0.5)] = 0.7
    monkeypatch.setattr(SimCLR.__init__, "__defaults__", tuple(later))  # nothing recorded to compare it with
    capsys.readouterr()
    assert main([*args, "--resume", "rounds=2"]) == 0
    assert "resolved" not in capsys.readouterr().err
    assert yaml.safe_load((run / "recipe.yaml").read_text())["resolved"]["method"]["temperature"] == 0.7


def test_resume_still_names_a_changed_recipe_key(one_round, capsys) -> None:
    args, _ = one_round
    assert main([*args, "--resume", "rounds=2", "method.output_dim=16"]) == 2
    assert "the run recorded method.output_dim=32" in error_line(capsys)


def test_a_backbone_that_builds_otherwise_is_named(one_round, capsys) -> None:
    args, run = one_round
    edit_record(run, lambda saved: saved["resolved"]["backbone"].update(parameters=1000))  # small_cnn changed since
    assert main([*args, "--resume", "rounds=2"]) == 2
    line = error_line(capsys)
    assert "model.backbone.parameters=1000" in line and "model.backbone.parameters=93472" in line


def test_a_report_groups_by_the_recipe_not_by_the_record() -> None:
    """Runs of two methods differ in every ``resolved.method.*`` key; ``method.name`` tells them apart."""
    from fedlight.report.runs import Run, varying_keys

    def run(name: str, options: dict) -> Run:
        return Run(Path(name), {"recipe": {"seed": 0, "method": {"name": name},
                                           "resolved": {"method": {"name": name, **options}}}})

    assert varying_keys([run("simclr", {"temperature": 0.5}), run("byol", {"momentum": 0.99})]) == ["method.name"]
