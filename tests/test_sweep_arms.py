"""``fedlight sweep --arm``: named arms (recipes, or whole method / server sections from config
groups) crossed with the grid and seeds; settings carried into a new section or refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedlight.cli import main

# fedavg_fmnist (MOON's network, supervised with a 256 head) shrunk to seconds: synthetic data, 1 round
TINY = ["data.name=synthetic", "data.subset=300", "data.test_subset=100", "rounds=1", "clients.num=2",
        "local.epochs=1", "eval.knn_k=5", "eval.probe_epochs=5", "fabric.accelerator=cpu"]
# the README's FedAvg vs SCAFFOLD vs MOON command
ALGORITHMS = ["sweep", "--recipe", "fedavg_fmnist", "--arm", "fedavg", "--arm", "scaffold=method:scaffold,server:scaffold",
              "--arm", "moon=method:moon,~method.projection_dim"]


def _recipe(out: Path, name: str) -> dict:
    return yaml.safe_load((out / "recipes" / f"{name}.yaml").read_text())


@pytest.mark.usefixtures("forked_sweep_tasks")  # each task a process, forked
def test_fedavg_scaffold_moon_in_one_command(tmp_path: Path, capsys) -> None:
    """One command, three arms with different method and server sections: SLURM's task list is the
    one the local executor runs; each run records its arm; SCAFFOLD keeps the recipe's 256 head."""
    out = tmp_path / "algos"
    assert main([*ALGORITHMS, "--seeds", "3", "--out", str(out), *TINY]) == 0  # SLURM: prints sbatch
    names = (out / "tasks.txt").read_text().split()
    assert names == [f"arm={arm}_seed={seed}" for arm in ("fedavg", "scaffold", "moon") for seed in (0, 1, 2)]
    assert "--array=0-8" in capsys.readouterr().out
    assert [a["name"] for a in json.loads((out / "manifest.json").read_text())["arms"]] == ["fedavg", "scaffold", "moon"]

    local = tmp_path / "here"
    # two rounds: in round 1 MOON (no previous model) and SCAFFOLD (zero control variates) are FedAvg exactly
    two_rounds = [o for o in TINY if o != "rounds=1"] + ["rounds=2"]
    assert main([*ALGORITHMS, "--seeds", "3", "--out", str(local), "--executor", "local", "--parallel", "2",
                 *two_rounds]) == 0
    assert "9 to run now" in capsys.readouterr().out
    runs = {arm: json.loads((local / "runs" / f"arm={arm}_seed=0" / "results.json").read_text())
            for arm in ("fedavg", "scaffold", "moon")}
    # the README's next command: every arm against FedAvg, paired by seed
    assert main(["report", str(local), "--metric", "knn_acc", "--reference", "fedavg"]) == 0
    lines = (local / "compare.md").read_text().splitlines()
    cells = lambda line: [c.strip() for c in line.split("|")[1:-1]]  # noqa: E731
    header = cells(next(line for line in lines if line.startswith("| arm | seeds |")))
    rows = {arm: dict(zip(header, cells(next(line for line in lines if line.startswith(f"| {arm} | 3 |")))))
            for arm in ("scaffold", "moon")}
    for row in rows.values():  # two tiny rounds: an arm may not have trained, and compare.md says so
        assert row["pairs"] == "3" and row["95% interval"].startswith("[")
        assert row["verdict"] in ("ahead", "behind", "can't tell", "did not train", "reference did not train")
    assert rows["moon"]["difference (points)"] != "+0.00"  # MOON's second round differs from FedAvg's
    for arm, results in runs.items():
        assert results["recipe"]["arm"] == arm and results["final"] is not None
    fedavg, scaffold, moon = (runs[a]["recipe"] for a in ("fedavg", "scaffold", "moon"))
    assert (fedavg["method"], fedavg["server"]) == ({"name": "supervised", "projection_dim": 256}, {"name": "fedavg"})
    assert scaffold["server"] == {"name": "scaffold"}
    assert scaffold["resolved"]["method"] == {"name": "scaffold", "objective": "supervised", "projection_dim": 256}
    assert (moon["method"], moon["server"]) == ({"name": "moon", "mu": 5.0, "tau": 0.5}, {"name": "fedavg"})
    assert fedavg["local"] == scaffold["local"] == moon["local"]  # the recipe's other sections are shared


def test_arms_carry_settings_and_grid_only_the_arms_that_take_a_key(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    """FedProx around the recipe's SimCLR keeps its head sizes; --grid method.mu varies that arm only;
    an arm's own recipe and overrides apply to it alone."""
    other = tmp_path / "other.yaml"
    other.write_text(f"defaults: [{tiny_recipe.name}]\nmethod: {{temperature: 0.2}}\n")
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), "--arm", "plain", "--arm", "prox=method:fedprox",
                 "--arm", f"warm={other},method.temperature=0.3", "--arm", f"cold={other},method:fedprox",
                 "--grid", "method.mu=0.1,1", "--out", str(out), "rounds=1"]) == 0
    names = (out / "tasks.txt").read_text().split()
    assert names == ["arm=plain_seed=3", "arm=prox_mu=0.1_seed=3", "arm=prox_mu=1_seed=3", "arm=warm_seed=3",
                     "arm=cold_mu=0.1_seed=3", "arm=cold_mu=1_seed=3"]
    assert _recipe(out, "arm=plain_seed=3")["method"] == {"name": "simclr", "hidden_dim": 64, "output_dim": 32}
    assert _recipe(out, "arm=prox_mu=1_seed=3")["method"] == {"name": "fedprox", "mu": 1, "objective": "simclr",
                                                              "hidden_dim": 64, "output_dim": 32}
    assert _recipe(out, "arm=warm_seed=3")["method"]["temperature"] == 0.3
    assert _recipe(out, "arm=cold_mu=0.1_seed=3")["method"]["temperature"] == 0.2  # carried from its own recipe
    assert _recipe(out, "arm=cold_mu=0.1_seed=3")["arm"] == "cold"


@pytest.mark.parametrize("arms, message", [
    (["--arm", "moon=method:moon"], "arm 'moon': method.projection_dim=256, set by the recipe for method supervised, "
                                    "is not a key of method moon; drop it for this arm with ~method.projection_dim"),
    (["--arm", "moon=method:mooon"], "unknown method choice 'mooon'; valid: "),
    (["--arm", "moon=model:moon_cnn"], "'model:moon_cnn' names no config group; groups: method, server"),
    (["--arm", "a", "--arm", "a=method:moon"], "two arms are named 'a'"),
    (["--arm", "null=method:moon"], "not a number or a YAML word such as null or true"),
    (["--arm", "1e3"], "not a number or a YAML word such as null or true"),
    # recorded as arm: 16 and arm: 10, not as named
    (["--arm", "0x10"], "not a number or a YAML word such as null or true"),
    (["--arm", "1_0"], "not a number or a YAML word such as null or true"),
    # trained SimCLR in the arm named for BYOL: the shared name reset each arm's chosen section
    (["--arm", "a", "--arm", "b=method:byol", "method.name=simclr"],
     "override 'method.name=simclr' would replace every arm's method choice; choose the method per arm"),
    (["--arm", "b=method:moon,method.name=byol"],
     "override 'method.name=byol' of arm 'b' would replace its own method"),
    (["--arm", "a=method:moon,method:scaffold"], "gives two method choices; keep one"),
    (["--arm", "a=~method.mu"], "arm 'a': ~method.mu drops nothing: the recipe sets no method.mu"),
    (["--arm", "a", "--grid", "method.name=moon,supervised"], "--grid method.name with arms: choose the method per arm"),
    (["--arm", "a", "--grid", "method.mu=1,5"], "--grid method.mu: no arm's method takes 'mu'"),
    (["--arm", "a", "--grid", "arm=x,y"], "--grid key 'arm' is set by the sweep"),
    (["--arm", "a=rounds=2", "rounds=3"], "override 'rounds=2' of arm 'a' sets 'rounds', which the sweep sets"),
    # ran both arms at seed 5: the first arm's recipe gives the sweep its seeds
    (["--arm", "a=seed=5", "--arm", "b"], "--arm 'a=seed=5': an arm cannot set the seed"),
    # ran FedAvg labelled scaffold: SCAFFOLD's server without its clients' control variates is a weighted mean
    (["--arm", "a=server:scaffold"], "server.name=scaffold needs method.name=scaffold (got 'supervised')"),
])
def test_arm_mistakes_are_one_line_and_nothing_written(tmp_path: Path, capsys, arms: list[str], message: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", "fedavg_fmnist", *arms, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_setting_the_group_file_sets_otherwise_must_be_decided(tmp_path: Path, capsys) -> None:
    """FedProx's mu 0.01 is not MOON's mu 5: the arm says which, or it is refused."""
    out = tmp_path / "sweep"
    moon = ["sweep", "--recipe", "fedprox_fmnist", "--out", str(out), "--arm"]
    assert main([*moon, "moon=method:moon,~method.projection_dim"]) == 2
    err = capsys.readouterr().err
    assert "arm 'moon': method.mu is 0.01 in the recipe but 5.0 in" in err and "~method.mu for the file's" in err
    assert main([*moon, "moon=method:moon,~method.projection_dim,~method.mu"]) == 0
    assert _recipe(out, "arm=moon_seed=0")["method"] == {"name": "moon", "mu": 5.0, "tau": 0.5}


def test_a_nested_server_key_varies_the_arms_whose_server_takes_its_section(tmp_path: Path) -> None:
    """server.dp.clip was checked as the key 'dp.clip' of each arm's server, which none takes: refused."""
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", "fedavg_fmnist", "--arm", "a", "--arm", "b=server:fedadam",
                 "--grid", "server.dp.clip=0.5,1.0", "--out", str(out), "server.dp.noise_multiplier=1.0"]) == 0
    clips = sorted((r.name, _recipe(out, r.stem)["server"]["dp"]["clip"]) for r in (out / "recipes").iterdir())
    assert [clip for _, clip in clips] == [0.5, 1.0, 0.5, 1.0]
