"""The docs' ``fedlight fit`` commands run as written after the quickstart, and a used run folder's refusal
puts another folder first, ``--resume`` where it applies and ``--overwrite`` last, saying what it deletes."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict
from pathlib import Path

import pytest

from fedlight.config.schema import Recipe
from fedlight.engine.run.run_folder import check_run_dir
from fedlight.errors import UserError
from fedlight.new_package import KINDS, files

REPO = Path(__file__).resolve().parents[1]
FIT = re.compile(r"(?:python3? -m fedlight|fedlight) fit (--recipe [^`#\n]*)")
QUICKSTART = re.compile(r"(^|/)quickstart_fmnist(\.yaml)?$")


def fit_commands() -> list[tuple[str, list[str]]]:
    """(where, the arguments) of every ``fedlight fit --recipe`` in README.md, docs/ and the README of each
    package ``fedlight new`` writes: continuation lines joined, comments dropped."""
    pages = {str(p.relative_to(REPO)): p.read_text() for p in [REPO / "README.md", *sorted(REPO.glob("docs/**/*.md"))]}
    pages.update({f"fedlight new {kind}: README.md": files(kind, f"my_{kind}")["README.md"] for kind in KINDS})
    found = []
    for where, text in pages.items():
        for match in FIT.finditer(re.sub(r"\\\n\s*", "", text)):
            found.append((where, shlex.split(match.group(1).rstrip(" `;."))))
    return found


def test_the_docs_fit_commands_leave_the_quickstarts_run_folder_alone() -> None:
    commands = fit_commands()
    assert len(commands) > 20
    quickstart = [(where, args) for where, args in commands if QUICKSTART.search(args[1])]
    assert len(quickstart) >= 10
    # a command on the quickstart's recipe that trains into runs/quickstart_fmnist would be refused there (or,
    # with --overwrite, delete the quickstart's run): it names its own folder, or continues the quickstart
    collide = [f"{where}: fedlight fit {shlex.join(args)}" for where, args in quickstart
               if not {"--resume", "--print-recipe"} & set(args)
               and not any(a.startswith(("name=", "run.dir=")) for a in args)]
    assert collide == []


def _used(tmp_path: Path, recipe: dict, finished: bool) -> Path:
    """runs/quickstart_fmnist under ``tmp_path``, holding a run of ``recipe`` with a checkpoint."""
    run = tmp_path / "runs" / "quickstart_fmnist"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"a checkpoint")
    results = {"recipe": recipe, "rounds_completed": 6 if finished else 2,
               "final": {"knn_acc": 0.5} if finished else None}
    (run / "results.json").write_text(json.dumps(results))
    return run


@pytest.mark.parametrize("finished", [True, False])
def test_a_used_folder_is_refused_with_another_folder_first_and_overwrite_last(tmp_path: Path,
                                                                                finished: bool) -> None:
    recipe = asdict(Recipe(name="quickstart_fmnist", rounds=6))
    run = _used(tmp_path, recipe, finished)
    (run.parent / "quickstart_fmnist_2").mkdir()
    with pytest.raises(UserError) as refused:
        check_run_dir(run, recipe, resume=False, overwrite=False)
    said = str(refused.value)
    assert "\n" not in said and said.startswith(f"run folder '{run}' is not empty")
    assert said.index("name=quickstart_fmnist_3 or run.dir=PATH") < said.index("--overwrite")
    assert said.endswith("--overwrite to replace it, which deletes what the folder holds (checkpoints, results.json) "
                         "once this run finishes")
    resume = "raise rounds and pass --resume to train it further" if finished else "pass --resume to continue it"
    assert resume in said
    other = {**recipe, "method": {"name": "byol"}}  # another experiment: --resume would be refused
    with pytest.raises(UserError, match=r"^(?!.*--resume).*run\.dir=PATH; or pass --overwrite"):
        check_run_dir(run, other, resume=False, overwrite=False)
    with pytest.raises(UserError, match="own folder with run.dir=PATH;"):  # run.dir set: name= would not move it
        check_run_dir(run, {**recipe, "run": {"dir": str(run)}}, resume=False, overwrite=False)
