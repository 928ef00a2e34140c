"""Third-party methods through entry points: the README's "Write your own method", run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedlight.errors import UserError
from fedlight.extensions import Table

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- write-your-own-method"


def readme_example() -> tuple[str, str]:
    """The README's example module and its entry-point line (``name = "module:attr"``)."""
    text = (REPO / "README.md").read_text()
    after = text[text.index(MARKER):]
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    entry = re.search(r'\[project\.entry-points\."fedlight\.methods"\]\n(.*?)\n', after).group(1)
    return code, entry


def install(site: Path, package: str, files: dict[str, str], entry_points: str) -> None:
    """A package importable from ``site`` with its ``.dist-info``, as ``pip install`` would leave it."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    for name, text in files.items():
        (site / package / name).write_text(text)
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


def fedlight(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fedlight", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def test_the_readme_method_trains_through_fedlight_fit(tmp_path: Path, tiny_recipe: Path) -> None:
    code, entry = readme_example()
    name, target = (s.strip().strip('"') for s in entry.split("="))
    package, module = target.split(":")[0].split(".")
    site = tmp_path / "site"
    install(site, package, {f"{module}.py": code}, f"[fedlight.methods]\n{name} = {target.strip()}\n")

    listed = fedlight(site, "methods")
    assert listed.returncode == 0, listed.stderr
    line = next(l for l in listed.stdout.splitlines() if l.strip().startswith(name + " "))
    assert "Barlow Twins" in line and target in line
    assert re.search(r"^\s+simclr\s+\S", listed.stdout, re.M)  # the built-ins are listed too

    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), f"method={{name: {name}, hidden_dim: 32, output_dim: 32}}",
                    "rounds=1", "eval.projector_samples=0")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["recipe"]["method"]["name"] == name and results["rounds_completed"] == 1
    assert results["history"][0]["answered"] == 2 and results["final"]["knn_acc"] is not None

    wrong = fedlight(site, "fit", "--recipe", str(tiny_recipe), "method={name: barlw}", f"run.dir={tmp_path / 'new'}")
    assert wrong.returncode == 2 and f"{name}, " in wrong.stderr and "simclr" in wrong.stderr  # listed among the valid


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    install(site, "broken_pkg", {"bad.py": "raise ImportError('no such thing')\n"},
            "[fedlight.methods]\nbroken = broken_pkg.bad:Nothing\n")
    monkeypatch.syspath_prepend(str(site))  # undone after the test
    table = Table("fedlight.methods", {})
    assert "broken" in table
    with pytest.raises(UserError, match="entry point 'broken' .*broken_pkg.bad:Nothing.* failed to load"):
        table["broken"]


def test_a_builtin_name_wins_over_an_entry_point(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    install(site, "shadow_pkg", {"m.py": "class X:\n    '''Not the real one.'''\n"},
            "[fedlight.methods]\nsimclr = shadow_pkg.m:X\nextra = shadow_pkg.m:X\n")
    monkeypatch.syspath_prepend(str(site))
    table = Table("fedlight.methods", {"simclr": int})
    assert table["simclr"] is int and list(table) == ["extra", "simclr"]
    assert table.description("extra") == "Not the real one." and table.origin("extra") == "shadow_pkg.m:X"


HALF_EPOCH = '''"""A client schedule from another package: one epoch over the first half of a client's samples."""

from __future__ import annotations

from typing import Any

import torch

from fedlight.engine.local_loop import train_client
from fedlight.engine.plugin import ClientSchedule, ClientWork, Report, State, ScheduleContext
from fedlight.methods.base import FederatedModule


class HalfEpoch(ClientSchedule):
    """One epoch over the first half of each client's samples."""

    def __init__(self, ctx: ScheduleContext) -> None:
        self.ctx = ctx

    def train(self, module: FederatedModule, client: int, round_: int, generator: torch.Generator,
              private: State, work: float) -> ClientWork:
        c = self.ctx
        half = c.parts[client][:len(c.parts[client]) // 2]
        result = train_client(c.fabric, module, c.images, c.labels, half.to(c.images.device), c.views, 1,
                              c.batch_size, generator)
        return ClientWork(result, float(len(half)))

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"trained_on": [rep["samples"] for rep in reports],
                "client_sizes": [len(self.ctx.parts[rep["client"]]) for rep in reports]}
'''


def test_a_schedule_from_another_package_is_listed_and_trains(tmp_path: Path, tiny_recipe: Path) -> None:
    site = tmp_path / "site"
    install(site, "half_pkg", {"schedule.py": HALF_EPOCH}, "[fedlight.schedules]\nhalf = half_pkg.schedule:HalfEpoch\n")

    listed = fedlight(site, "methods")
    assert listed.returncode == 0, listed.stderr
    schedules = listed.stdout[listed.stdout.index("client schedules (fedlight.schedules):"):]
    assert re.search(r"^\s+half\s+One epoch over the first half .*\[half_pkg\.schedule:HalfEpoch\]$", schedules, re.M)
    assert re.search(r"^\s+epochs\s+\S", schedules, re.M)  # beside the built-in ones

    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), "local.schedule=half", "rounds=1",
                    "eval.projector_samples=0")
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads((tmp_path / "run" / "results.json").read_text())["history"][0]
    assert row["answered"] == 2  # both clients trained through the package's schedule, on half their samples
    assert row["trained_on"] == [n // 2 for n in row["client_sizes"]] and min(row["client_sizes"]) > 1


def test_every_catalog_name_loads_the_object_it_names() -> None:
    """The catalog names its built-ins as "module:attr" strings (no import until used): each must
    resolve, to a class of the table's kind or a (channels, image_size) backbone factory."""
    from torch import nn

    from fedlight import catalog
    from fedlight.engine.plugin import ClientSchedule
    from fedlight.methods.base import FederatedModule
    from fedlight.server.base import Aggregator

    for table, kind in ((catalog.METHODS, FederatedModule), (catalog.SERVERS, Aggregator),
                        (catalog.SCHEDULES, ClientSchedule)):
        for name in list(table.builtins):
            assert isinstance(table[name], type) and issubclass(table[name], kind), name
    for name in list(catalog.BACKBONES.builtins):
        net = catalog.BACKBONES[name](1, 28)
        assert isinstance(net, nn.Module) and net.feature_dim > 0, name


AGGREGATOR = "<!-- write-your-own-aggregator"


def test_the_readme_aggregator_gives_the_same_model_with_two_workers_and_two_processes(tmp_path: Path,
                                                                                       tiny_recipe: Path) -> None:
    """The README's payloads-contract aggregator, installed from another package: 1 x 1, 1 process x 2
    workers and 2 processes x 1 worker end on the same global model, bit for bit."""
    import torch

    text = (REPO / "README.md").read_text()
    after = text[text.index(AGGREGATOR):]
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    entry = re.search(r'\[project\.entry-points\."fedlight\.aggregators"\]\n(.*?)\n', after).group(1)
    name, target = (s.strip().strip('"') for s in entry.split("="))
    package, module = target.split(":")[0].split(".")
    assert len(code.strip().splitlines()) <= 30  # about 20 lines of code under its docstring
    site = tmp_path / "site"
    install(site, package, {f"{module}.py": code}, f"[fedlight.aggregators]\n{name} = {target}\n")
    common = ["clients.num=4", "model.backbone=tiny_cnn", "eval.projector_samples=0", "fabric.threads=1",
              f"server={{name: {name}, bound: 0.5}}"]
    for run, extra in (("one", []), ("workers", ["fabric.workers=2"]), ("ranks", ["fabric.devices=2"])):
        done = fedlight(site, "fit", "--recipe", str(tiny_recipe), *common, *extra, f"run.dir={tmp_path / run}")
        assert done.returncode == 0, done.stderr[-2000:]
    one, *others = (torch.load(tmp_path / run / "checkpoints/last.pt", weights_only=True)["global"]
                    for run in ("one", "workers", "ranks"))
    for other in others:
        assert all(torch.equal(one[k], other[k]) for k in one)
