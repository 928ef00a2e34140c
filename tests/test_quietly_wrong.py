"""Input that used to pass quietly or noisily: a key given twice in YAML, argparse's
usage blocks, library warnings in front of a handled error. Each is one line, exit 2, nothing written."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import REPO
from fedlight.cli import main
from fedlight.engine.state.checkpoint import load_checkpoint
from fedlight.errors import UserError

# a recipe the duplicate check lets through fails fast on these (with another message) instead of training
MISSING_DATA = ["data.name=fashion_mnist", "data.root=/nonexistent/fedlight"]


def _one_line(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and "Traceback" not in err, err
    return err


def _with_duplicate(tmp_path: Path, tiny_recipe: Path, where: str) -> tuple[Path, str, str, str]:
    """(recipe, the file that repeats a key, the key, its two lines): ``local`` given twice in the
    recipe itself (its first block's lr would be lost), or ``local.lr`` twice in a fragment."""
    text = tiny_recipe.read_text()
    recipe = tmp_path / "twice.yaml"
    if where == "recipe":
        recipe.write_text(text + "local: {epochs: 2}\n")
        first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("local:"))
        return recipe, "twice.yaml", "'local'", f"lines {first} and {len(text.splitlines()) + 1}"
    fragment = tmp_path / "fragment.yaml"
    fragment.write_text("local:\n  lr: 0.1\n  epochs: 1\n  lr: 0.01\n")
    recipe.write_text(text.replace("defaults:\n", f"defaults:\n  - {fragment}\n", 1))
    return recipe, "fragment.yaml", "'local.lr'", "lines 2 and 4"


@pytest.mark.parametrize("where", ["recipe", "fragment"])
def test_a_key_given_twice_in_a_recipe_file_is_refused(tmp_path: Path, tiny_recipe: Path, capsys, where: str) -> None:
    recipe, file, key, lines = _with_duplicate(tmp_path, tiny_recipe, where)
    run = tmp_path / "run"
    err = _one_line(capsys, main(["fit", "--recipe", str(recipe), *MISSING_DATA, f"run.dir={run}"]))
    assert file in err and key in err and lines in err, err
    assert not run.exists()


def test_a_key_given_twice_in_an_override_is_refused(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    run = tmp_path / "run"
    twice = "method={name: byol, name: simclr}"
    err = _one_line(capsys, main(["fit", "--recipe", str(tiny_recipe), twice, *MISSING_DATA, f"run.dir={run}"]))
    assert "'name'" in err and twice in err and not run.exists()


def test_the_first_of_two_keys_is_not_dropped_when_yaml_merges_on_purpose(tmp_path: Path) -> None:
    from fedlight.config.files import load_yaml

    assert load_yaml("base: &b {lr: 1, epochs: 2}\nlocal:\n  <<: *b\n  lr: 0.5\n", "x")["local"] == {"lr": 0.5,
                                                                                                 "epochs": 2}


@pytest.mark.parametrize("args", [
    ["fit", "--recipe", "r.yaml", "--resume", "--overwrite"],
    ["fit", "--recipe", "r.yaml", "--overwirte"],
    ["fit"],
    ["sweep", "--recipe", "r.yaml", "--out", "o", "--seeds", "abc"],
    ["sweep", "--recipe", "r.yaml", "--out", "o", "--max-running", "x"],
    ["sweep", "--recipe", "r.yaml", "--out", "o", "--parallel", "x"],
    ["report", "--out"],
    ["report", "runs", "--bogus"],
    ["nosuch"],
    [],
], ids=["resume-and-overwrite", "misspelt-flag", "no-recipe", "seeds-abc", "max-running-x", "parallel-x",
        "report-no-value", "report-unknown-flag", "unknown-command", "no-command"])
def test_a_command_line_mistake_is_one_line_not_a_usage_block(args: list[str], capsys) -> None:
    err = _one_line(capsys, main(args))
    assert "usage:" not in err and "--help" in err


def test_a_misspelt_flag_gets_a_suggestion(capsys) -> None:
    err = _one_line(capsys, main(["fit", "--recipe", "r.yaml", "--overwirte"]))
    assert "--overwirte" in err and "did you mean --overwrite?" in err


def test_the_console_command_prints_one_line_too(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fedlight", "sweep", "--recipe", "r.yaml", "--out", "o", "--seeds",
                           "abc"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--seeds" in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_refused_pickle_checkpoint_brings_no_torch_warning(tmp_path: Path, recwarn) -> None:
    """A plain pickle (protocol 4) makes torch's weights-only loader warn, then refuse it."""
    path = tmp_path / "last.pt"
    path.write_bytes(pickle.dumps({"rounds_completed": 1}, protocol=4))
    with pytest.raises(UserError, match="last.pt"):
        load_checkpoint(path)
    assert [str(w.message) for w in recwarn] == []


def test_warnings_of_a_call_that_works_are_still_shown(recwarn) -> None:
    from fedlight.errors import warnings_if_it_works

    with warnings_if_it_works():
        warnings.warn("kept", UserWarning)
    with pytest.raises(ValueError), warnings_if_it_works():
        warnings.warn("dropped", UserWarning)
        raise ValueError
    assert [str(w.message) for w in recwarn] == ["kept"]
