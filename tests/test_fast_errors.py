"""User errors that need no torch (keys, types, names, data paths, the run folder, a recipe's name) come
before torch and Lightning are imported: the CLI imports them lazily, after those checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# runs each `fedlight fit` in one fresh interpreter and reports its exit code, its one error line
# and whether torch / lightning were imported by then
PROBE = """
import contextlib, io, json, sys
from fedlight.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    out.append([code, err.getvalue(), sorted(m for m in ("torch", "lightning") if m in sys.modules)])
print(json.dumps(out))
"""


def test_user_errors_that_need_no_torch_come_before_torch_is_imported(tmp_path: Path) -> None:
    used = tmp_path / "used_run"
    used.mkdir()
    (used / "results.json").write_text("{}")
    quick = ["fit", "--recipe", "quickstart_fmnist"]  # by name: the shipped recipe, from tmp_path
    cases = {
        "unknown recipe key 'bogus'": [*quick, "bogus=1"],
        "rounds": [*quick, "rounds=many"],
        "unknown method.name 'simclrr'; valid names: barlow_twins, byol,": [*quick, "method.name=simclrr"],
        "unknown server.name 'fedavgg'": [*quick, "server.name=fedavgg"],
        "unknown method.name ['simclr']": [*quick, "method.name=[simclr]"],
        "unknown model.backbone 'resnet'": [*quick, "model.backbone=resnet"],
        "has no Fashion-MNIST file": [*quick, f"data.root={tmp_path / 'nothing'}"],
        "cifar10 not found in data.root": [*quick, "data.name=cifar10", f"data.root={tmp_path / 'nothing'}"],
        f"run folder '{used}' is not empty": [*quick, f"run.dir={used}"],
        "has no checkpoint to resume": [*quick, "--resume", f"run.dir={tmp_path / 'new_run'}"],
        "is neither a file here nor a recipe fedlight ships": ["fit", "--recipe", "quickstart_fmist"],
    }
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(cases.values()))], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for (named, argv), (code, err, heavy) in zip(cases.items(), json.loads(done.stdout)):
        assert code == 2 and err.count("\n") == 1 and named in err, (argv, err)
        assert heavy == [], (argv, heavy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["used_run"]  # nothing written, no folder made
    assert [p.name for p in used.iterdir()] == ["results.json"]  # not even the run lock
