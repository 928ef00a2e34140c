from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.config.loader import compose, override_layer
from fedlight.errors import UserError


def test_fragments_merge_then_recipe_then_overrides(tiny_recipe: Path) -> None:
    r = load_recipe(tiny_recipe, ["rounds=7", "partition.alpha=0.1", "method.temperature=0.2"])
    assert r.data.name == "synthetic"          # from a fragment
    assert r.views.grayscale_p == 0.2          # from a fragment
    assert r.clients.num == 2                  # from the recipe
    assert (r.rounds, r.partition.alpha) == (7, 0.1)
    assert r.method == {"name": "simclr", "hidden_dim": 64, "output_dim": 32, "temperature": 0.2}
    assert r.name == "tiny"


def _composed(*layers: dict) -> dict:
    return OmegaConf.to_container(compose([(layer, f"layer {i}") for i, layer in enumerate(layers)]))


def test_layers_merge_key_by_key_and_override_values_are_yaml() -> None:
    merged = _composed({"local": {"lr": 0.5, "epochs": 3}}, {"local": {"epochs": 4}})
    assert (merged["local"]["lr"], merged["local"]["epochs"]) == (0.5, 4)
    assert [override_layer(t) for t in ["x.y=[1, 2]", "flag=true", "name=abc", "none=null", "lr=1e-3", "e="]] == \
        [{"x": {"y": [1, 2]}}, {"flag": True}, {"name": "abc"}, {"none": None}, {"lr": 0.001}, {"e": None}]


def test_interpolation_resolves_against_the_whole_recipe(tiny_recipe: Path, tmp_path: Path, monkeypatch) -> None:
    """``${data.root}`` (and OmegaConf's ``oc.env`` resolver) resolve after every layer and override."""
    recipe = tmp_path / "interpolated.yaml"
    recipe.write_text(f"defaults: [{tiny_recipe}]\ndata: {{root: /datasets}}\nrun: {{dir: '${{data.root}}/runs/${{name}}'}}\n")
    assert load_recipe(recipe).run.dir == "/datasets/runs/interpolated"
    assert load_recipe(recipe, ["data.root=/elsewhere"]).run.dir == "/elsewhere/runs/interpolated"
    monkeypatch.setenv("FEDLIGHT_TEST_DATA", "/from/env")
    assert load_recipe(recipe, ["data.root=${oc.env:FEDLIGHT_TEST_DATA}"]).run.dir == "/from/env/runs/interpolated"
    assert load_recipe(recipe, ["rounds=${seed}"]).rounds == 3  # typed after resolving: an int
    with pytest.raises(UserError, match=r"'run.dir'.*'data.rot' not found"):
        load_recipe(recipe, ["run.dir=${data.rot}"])
    with pytest.raises(UserError, match=r"'rounds'.*could not be converted to Integer"):
        load_recipe(recipe, ["rounds=${data.root}"])


def test_an_unknown_key_suggests_the_near_one(tiny_recipe: Path) -> None:
    with pytest.raises(UserError, match=r"unknown recipe key 'local.lrr' in override 'local.lrr=1' "
                                        r"\(did you mean 'local.lr'\?\); valid keys here: batch_size, (\w+, )*epochs"):
        load_recipe(tiny_recipe, ["local.lrr=1"])


def test_int_is_accepted_for_float_but_not_the_reverse(tiny_recipe: Path) -> None:
    assert load_recipe(tiny_recipe, ["local.lr=1"]).local.lr == 1.0
    with pytest.raises(UserError, match="'rounds'"):
        load_recipe(tiny_recipe, ["rounds=2.5"])


BAD = [
    (["rounds=0"], "'rounds'"),
    (["partition.alpha=0"], "'partition.alpha'"),
    (["partition.alpha=-1"], "'partition.alpha'"),
    (["clients.fraction=0"], "'clients.fraction'"),
    (["clients.fraction=1.5"], "'clients.fraction'"),
    (["partition.kind=banana"], "'partition.kind'"),
    (["partition.alhpa=1"], "'partition.alhpa'"),
    (["local.epochs=two"], "'local.epochs'"),
    (["method.name=nope"], "method.name"),
    (["method.tmperature=1"], "'method.tmperature'"),
    (["method.temperature=hot"], "'method.temperature'"),
    (["server.name=nope"], "server.name"),
    (["clients.num=5000"], "clients.num"),
    (["data.subset=100000"], "data.subset"),
    (["data.name=fashion_mnist", "data.root=/nonexistent"], "data.root"),
    (["data.name=cifar10", "data.root=/nonexistent"], "data.download"),
    (["novalue"], "key=value"),
    (["partition.public_client=9"], "partition.public_client"),
    (["server.name=flesd"], "partition.public_client"),
    (["method.name=scaffold"], "server.name=scaffold"),
    (["server.name=scaffold"], "server.name=scaffold needs method.name=scaffold"),  # it ran FedAvg, labelled scaffold
    (["method={name: fedprox, objective: fedprox}"], "method.objective"),
    (["name=.."], "recipe key 'name'"),  # runs/.. : the working folder, which --overwrite would replace whole
]


@pytest.mark.parametrize("overrides,named", BAD)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tiny_recipe: Path, capsys, overrides, named) -> None:
    code = main(["fit", "--recipe", str(tiny_recipe), *overrides])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ")
    assert named in err
    assert not (tiny_recipe.parent / "run").exists()


@pytest.mark.parametrize("name", ["''", ".", "..", "exp1/..", "exp1/", "/exp1", "exp1\\..\\.."])
def test_a_name_that_is_not_a_folder_under_runs_is_refused(tiny_recipe: Path, name: str) -> None:
    """runs/<name> must be a run's own folder: '' or '.' is runs/ (every run), '..' the working folder."""
    with pytest.raises(UserError, match="recipe key 'name' must name a folder under runs/"):
        load_recipe(tiny_recipe, [f"name={name}"])
    for fine in ("v2.1_alpha=0.5", "exp1/seed0"):  # dots and = are fine, and a path of folders (runs before them)
        assert load_recipe(tiny_recipe, [f"name={fine}"]).name == fine


def test_missing_recipe_file(capsys) -> None:
    assert main(["fit", "--recipe", "/nonexistent/recipe.yaml"]) == 2
    assert "/nonexistent/recipe.yaml" in capsys.readouterr().err


def test_invalid_yaml_names_the_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: [1, 2\n")
    assert main(["fit", "--recipe", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_a_section_naming_another_class_replaces_the_inherited_one() -> None:
    assert _composed({"method": {"name": "moon", "mu": 5}}, {"method": {"name": "supervised"}})["method"] == \
        {"name": "supervised"}
    assert _composed({"method": {"name": "moon", "mu": 5}}, {"method": {"tau": 1}})["method"] == \
        {"name": "moon", "mu": 5, "tau": 1}
    # a section no earlier layer named keeps its keys: only a change of class resets it
    assert _composed({"data": {"root": "/x"}}, {"data": {"name": "cifar10"}})["data"]["root"] == "/x"
    assert _composed({"data": {"name": "mnist", "root": "/x"}}, {"data": {"name": "cifar10"}})["data"]["root"] == "data"


def test_an_override_naming_a_class_applies_first(tiny_recipe: Path) -> None:
    r = load_recipe(tiny_recipe, ["method.momentum=0.9", "method.name=byol"])
    assert r.method == {"name": "byol", "momentum": 0.9}


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_asking_for_a_missing_gpu_is_a_user_error(tiny_recipe: Path, capsys) -> None:
    assert main(["fit", "--recipe", str(tiny_recipe), "fabric.accelerator=gpu"]) == 2
    assert "fabric.accelerator" in capsys.readouterr().err
    assert not (tiny_recipe.parent / "run").exists()


def test_a_resolved_recipe_reads_back_as_written(tiny_recipe: Path, tmp_path: Path) -> None:
    """A run's recipe.yaml and a sweep's task recipes are read back in OmegaConf's YAML, where
    ``1e3`` is a number: text that looks like one stays text through the round trip."""
    from dataclasses import asdict

    from fedlight.config.files import read_yaml_mapping
    from fedlight.engine.state.run_files import write_yaml

    recipe = asdict(load_recipe(tiny_recipe, ["name='1e3'", "data.root='1e-3'", "run.dir='2024-01-01'"]))
    assert (recipe["name"], recipe["data"]["root"]) == ("1e3", "1e-3")
    write_yaml(tmp_path / "recipe.yaml", recipe)
    assert read_yaml_mapping(tmp_path / "recipe.yaml", "the run's recipe", "-") == recipe
    copy = tmp_path / "copy.yaml"
    copy.write_text((tmp_path / "recipe.yaml").read_text())
    assert asdict(load_recipe(copy)) == recipe
