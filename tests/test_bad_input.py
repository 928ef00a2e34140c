"""Generated bad input (hypothesis): every malformed recipe, override, data file or impossible
partition ends in one line naming the key or path, exit code 2, no traceback, nothing written."""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import pickle
import tempfile
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedlight import registry
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.config.schema import Recipe
from fedlight.data.partition import partition
from fedlight.errors import UserError

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _schema_keys(cls: type = Recipe, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, type hint, check) for every leaf key of the recipe schema."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, hint = prefix + f.name, hints[f.name]
        if dataclasses.is_dataclass(hint):
            out += _schema_keys(hint, key + ".")
        else:
            out.append((key, hint, f.metadata.get("check")))
    return out


KEYS = _schema_keys()


def _not_a_number(text: str) -> bool:
    try:
        float(text)
        return False
    except ValueError:
        return True


WORDS = st.from_regex(r"[A-Za-z][A-Za-z0-9_#\]\-]{0,7}", fullmatch=True).filter(_not_a_number)
NON_SCALARS = st.one_of(st.lists(st.integers(), min_size=1, max_size=3), st.dictionaries(WORDS, st.integers(),
                                                                                       min_size=1, max_size=2))


def _invalid_for(hint: Any, check: Any) -> st.SearchStrategy:
    """Values no recipe key typed ``hint`` with constraint ``check`` accepts."""
    if typing.get_origin(hint) is dict:  # method, server: a section, never a scalar or list
        return st.one_of(WORDS, st.integers(), st.lists(st.integers(), max_size=2))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if typing.get_origin(hint) not in (Literal, list) and args else hint
    if typing.get_origin(base) is Literal:
        return st.one_of(WORDS.filter(lambda w: w not in typing.get_args(base)), NON_SCALARS)
    if typing.get_origin(base) is list:  # a word alone, or words none of a list of choices takes
        (item,) = typing.get_args(base)
        choices = typing.get_args(item) if typing.get_origin(item) is Literal else ()
        return st.one_of(WORDS, st.lists(WORDS.filter(lambda w: w not in choices), min_size=1, max_size=2))
    if base is bool:  # OmegaConf reads an integer as a bool (0 is false), as Python does
        return st.one_of(WORDS.filter(lambda w: w.lower() not in ("true", "false", "yes", "no", "on", "off", "y", "n")),
                         NON_SCALARS)
    if base is int:
        wrong = st.one_of(WORDS, st.floats(allow_nan=False).filter(lambda v: v != int(v) if math.isfinite(v) else True),
                          NON_SCALARS)
        if check is None:
            return wrong
        return st.one_of(wrong, st.integers(-10**6, 10**6).filter(lambda v: check(v) is not None))
    if base is float:
        wrong = st.one_of(WORDS, NON_SCALARS, st.sampled_from([math.nan, math.inf, -math.inf]))
        if check is None:
            return wrong
        return st.one_of(wrong, st.floats(-1e6, 1e6).filter(lambda v: check(v) is not None))
    if base is str:  # OmegaConf takes a number as its text (run.dir=2024 is the folder '2024')
        return NON_SCALARS
    raise AssertionError(f"no invalid values for {hint}")


def _override(key: str, value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip()
    return f"{key}={text.removesuffix('...').strip()}"


def _assert_clean_failure(args: list[str], run: Path, capsys, named: str | None = None) -> str:
    run = Path(tempfile.mkdtemp(dir=run.parent)) / run.name  # examples never see each other's folders
    code = main([*args, *([] if any(a.startswith("run.dir=") for a in args) else [f"run.dir={run}"])])
    err = capsys.readouterr().err
    assert code == 2, (args, err)
    assert err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    assert "Traceback" not in err
    if named is not None:
        assert named in err, err
    assert not run.exists()
    return err


@st.composite
def bad_schema_overrides(draw: st.DrawFn) -> tuple[str, str]:
    key, hint, check = draw(st.sampled_from(KEYS))
    return _override(key, draw(_invalid_for(hint, check))), key


@settings(SETTINGS, max_examples=80)
@given(bad=bad_schema_overrides())
def test_a_bad_value_for_any_schema_key(tiny_recipe: Path, capsys, bad: tuple[str, str]) -> None:
    override, key = bad
    _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), override], tiny_recipe.parent / "run", capsys,
                          named=key)


SECTIONS = sorted({k.split(".")[0] for k, _, _ in KEYS if "." in k})


@SETTINGS
@given(section=st.sampled_from(["", *SECTIONS]), name=st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True),
       value=st.integers())
def test_an_unknown_key_anywhere(tiny_recipe: Path, capsys, section: str, name: str, value: int) -> None:
    key = f"{section}.{name}" if section else name
    known = {k for k, _, _ in KEYS} | {k.split(".")[0] for k, _, _ in KEYS}
    if key in known or (section and f"{section}.{name}" in known):
        return
    _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), f"{key}={value}"], tiny_recipe.parent / "run",
                          capsys, named=name)


def _numeric_params(table: dict[str, type], section: str) -> list[tuple[str, str, Any]]:
    out = []
    for name, cls in table.items():
        for p, param in registry._params(cls, section).items():
            if isinstance(param.default, (int, float)) and not isinstance(param.default, bool):
                out.append((name, p, param.default))
    return out


METHOD_PARAMS = [("method", *p) for p in _numeric_params(registry.METHODS, "method")]
SERVER_PARAMS = [("server", *p) for p in _numeric_params(registry.SERVERS, "server")]


@SETTINGS
@given(target=st.sampled_from(METHOD_PARAMS + SERVER_PARAMS), data=st.data())
def test_a_bad_method_or_server_option(tiny_recipe: Path, capsys, target: tuple, data: st.DataObject) -> None:
    section, name, param, default = target
    wrong = st.one_of(WORDS, NON_SCALARS, st.sampled_from([math.nan, math.inf]))
    negative = st.floats(-1e6, -1e-6) if isinstance(default, float) else st.integers(-10**6, -1)
    value = data.draw(st.one_of(wrong, negative, *([st.just(0)] if isinstance(default, int) and default > 0 else [])))
    extra = ["partition.public_client=0", "clients.num=3"] if (section, name) == ("server", "flesd") else []
    _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), f"{section}.name={name}", *extra,
                           _override(f"{section}.{param}", value)], tiny_recipe.parent / "run", capsys,
                          named=f"{section}.{param}")


TOP_LEVEL = st.one_of(st.lists(st.integers(), max_size=3), st.integers(), WORDS)


@SETTINGS
@given(kind=st.sampled_from(["top", "section", "syntax"]), section=st.sampled_from(SECTIONS + ["method", "server"]),
       junk=TOP_LEVEL, text=st.text(max_size=20))
def test_a_malformed_recipe_file(tmp_path_factory, capsys, kind: str, section: str, junk: Any, text: str) -> None:
    folder = tmp_path_factory.mktemp("recipe")
    recipe = folder / "bad.yaml"
    if kind == "top":
        recipe.write_text(yaml.safe_dump(junk))
    elif kind == "section":
        recipe.write_text(yaml.safe_dump({"rounds": 1, section: junk}))
    else:  # an unclosed flow sequence is never valid YAML
        recipe.write_text(f"rounds: [1, {text!r}\n")
    err = _assert_clean_failure(["fit", "--recipe", str(recipe)], folder / "run", capsys)
    assert "bad.yaml" in err or section in err


def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + \
        arr.astype(np.uint8).tobytes()


FMNIST = {"train-images-idx3-ubyte": (40, 28, 28), "train-labels-idx1-ubyte": (40,),
          "t10k-images-idx3-ubyte": (10, 28, 28), "t10k-labels-idx1-ubyte": (10,)}


@SETTINGS
@given(victim=st.sampled_from(sorted(FMNIST)), damage=st.sampled_from(["truncate", "magic", "shape"]),
       cut=st.floats(0, 0.999), gz=st.booleans())
def test_a_damaged_fashion_mnist_file(tiny_recipe: Path, capsys, victim: str, damage: str, cut: float,
                                      gz: bool) -> None:
    with tempfile.TemporaryDirectory() as root:
        for name, shape in FMNIST.items():
            arr = np.arange(int(np.prod(shape))).reshape(shape) % 10
            if name == victim and damage == "shape":  # a valid file of the wrong length or rank
                arr = arr[:-1] if arr.ndim == 1 else arr[:, :, :1].reshape(-1)
            data = _idx(arr)
            if name == victim and damage == "truncate":
                data = data[: int(cut * len(data))]
            if name == victim and damage == "magic":
                data = bytes([0, 0, 0x0D]) + data[3:]  # float IDX, not uint8
            path = Path(root) / (name + (".gz" if gz else ""))
            path.write_bytes(gzip.compress(data) if gz else data)
        _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), "data.name=fashion_mnist", f"data.root={root}",
                               "views.blur_p=[0.0, 0.0]"], tiny_recipe.parent / "run", capsys, named=root)


@pytest.fixture
def no_md5(monkeypatch):
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda *a, **k: True)


@SETTINGS
@given(rows=st.integers(1, 4), width=st.sampled_from([3072, 3000, 1024]), labels=st.lists(st.integers(0, 30),
                                                                                          min_size=1, max_size=5),
       garbage=st.binary(max_size=30))
def test_a_malformed_cifar_pickle(tiny_recipe: Path, capsys, no_md5, rows: int, width: int, labels: list[int],
                                  garbage: bytes) -> None:
    if width == 3072 and len(labels) == rows and max(labels) < 10 and not garbage:
        return  # that one is well formed
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "cifar-10-batches-py"
        folder.mkdir()
        for b in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            obj = {"data": np.zeros((rows, width), dtype=np.uint8), "labels": labels}
            (folder / b).write_bytes(garbage if garbage and b == "test_batch" else pickle.dumps(obj))
        (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
        _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), "data.name=cifar10", f"data.root={root}"],
                              tiny_recipe.parent / "run", capsys, named=root)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(kind=st.sampled_from(["iid", "dirichlet", "shards", "classes", "class_ring"]), n=st.integers(1, 60),
       classes=st.integers(1, 6), clients=st.integers(1, 70), alpha=st.floats(0.01, 10),
       min_size=st.integers(0, 5), per_client=st.integers(1, 8), seed=st.integers(0, 3))
def test_a_partition_is_complete_or_one_line(kind: str, n: int, classes: int, clients: int, alpha: float,
                                            min_size: int, per_client: int, seed: int) -> None:
    labels = np.arange(n) % classes
    try:
        parts = partition(kind, labels, clients, np.random.default_rng(seed), alpha=alpha, min_size=min_size,
                          shards_per_client=per_client, classes_per_client=per_client)
    except UserError as exc:
        message = str(exc)
        assert "\n" not in message and ("partition" in message or "clients.num" in message)
        return
    assert len(parts) == clients and min(len(p) for p in parts) >= 1
    assert sorted(np.concatenate(parts).tolist()) == list(range(n))


def test_an_impossible_partition_end_to_end(tiny_recipe: Path, capsys) -> None:
    _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), "partition.kind=dirichlet", "partition.min_size=0",
                           "partition.alpha=0.01", "clients.num=1000"], tiny_recipe.parent / "run", capsys,
                          named="clients.num")


# ---------------------------------------------------------------- degenerate option values

def _declared_ranges(cls: type, section: str) -> dict[str, bool]:
    """Each numeric constructor option of ``cls`` a recipe sets in ``section`` -> whether it declares its range."""
    out = {}
    for name, hint in registry.hints(cls).items():
        if name not in registry._params(cls, section):
            continue
        base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
        if {int, float} & {base, *typing.get_args(base)}:
            # declared = an Annotated marker coerce will call (a bare note such as "a rate" checks nothing)
            out[name] = typing.get_origin(hint) is typing.Annotated and any(map(callable, typing.get_args(hint)[1:]))
    return out


@pytest.mark.parametrize("section, cls", sorted({*(("method", c) for c in registry.METHODS.values()),
                                                 *(("server", c) for c in registry.SERVERS.values())}, key=repr))
def test_every_numeric_method_and_server_option_declares_its_range(section: str, cls: type) -> None:
    """The constructor's hints are the one place a range lives: a new option cannot skip it."""
    assert all(_declared_ranges(cls, section).values()), f"{cls.__name__}: {_declared_ranges(cls, section)}"


DEGENERATE = [  # (overrides, the key the one line must name)
    (["views.blur_p=[]"], "views.blur_p"),
    (["views.solarize_p=[]"], "views.solarize_p"),
    (["method.temperature=0"], "method.temperature"),
    (["method.name=byol", "method.momentum=1.5"], "method.momentum"),
    (["method.name=fedema", "method.tau=2"], "method.tau"),
    (["method.name=moon", "model.backbone=moon_cnn", "method.tau=0"], "method.tau"),
    (["method.name=lg", "method.global_layers=[no_such_layer]"], "method.global_layers"),  # the constructor's own
    (["method.name=lg", "method.warmup_goal_acc=1.5"], "method.warmup_goal_acc"),
    (["server.name=flesd", "partition.public_client=0", "server.momentum=1.01"], "server.momentum"),
    (["server.name=flesd", "partition.public_client=0", "server.lr=0"], "server.lr"),
    (["server.name=flesd", "partition.public_client=0", "server.tau_s=0"], "server.tau_s"),
    (["local.iterations=0"], "local.iterations"),
    (["model.backbone=no_such_net"], "model.backbone"),
    (["local.schedule=no_such_schedule"], "local.schedule"),
    (["local.schedule=stream"], "stream.velocity"),
    (["local.batch_size=1"], "local.batch_size"),
    (["server.name=local_only", "server.args=1"], "server.args"),  # a class without its own constructor
    (["server.name=local_only", "server.kwargs={a: 1}"], "server.kwargs"),
    (['run.dir="a\\0b"'], "run.dir"),
    (['data.root="a\\0b"'], "data.root"),
    (["method.output_dim=1000000000000"], "method.output_dim"),  # a model no memory holds: torch's allocation error
]


@pytest.mark.parametrize(("overrides", "key"), DEGENERATE, ids=[" ".join(o) for o, _ in DEGENERATE])
def test_a_degenerate_value_is_one_line(tiny_recipe: Path, capsys, overrides: list[str], key: str) -> None:
    """Values that passed the type check and then crashed in torch or lightly, or ran meaninglessly."""
    _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), *overrides], tiny_recipe.parent / "run", capsys,
                          named=key)


# ---------------------------------------------------------------- files that are not UTF-8 YAML

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


RECIPE_TEXTS = {  # file contents -> what the one line must say
    "binary": (bytes(range(256)) * 2, "not UTF-8 text"),
    "latin-1": ("rounds: 1\nname: caf\u00e9\n".encode("latin-1"), "not UTF-8 text"),
    "utf-16 without its mark": ("rounds: 1\n".encode("utf-16-le"), "not valid YAML"),
    "a month 13": (b"rounds: 1\nseed: 2024-13-45\n", "'seed'"),  # OmegaConf's YAML has no dates: text, not an int
    "a bad !!float": (b"rounds: !!float abc\n", "not valid YAML"),
    "a bad !!timestamp": (b"rounds: !!timestamp x\n", "not valid YAML"),
    "nesting deeper than Python's recursion limit": (b"rounds: " + b"[" * 5000 + b"]" * 5000, "not valid YAML"),
    "a NUL fragment path": (b'defaults: ["a\\0b"]\n', "not a fragment path"),
    "a number as fragment": (b"defaults: [3]\n", "not a fragment path"),
}


@pytest.mark.parametrize("name", sorted(RECIPE_TEXTS))
def test_a_recipe_file_that_is_not_utf8_yaml(tmp_path: Path, capsys, name: str) -> None:
    data, says = RECIPE_TEXTS[name]
    recipe = tmp_path / "bad.yaml"
    recipe.write_bytes(data)
    err = _assert_clean_failure(["fit", "--recipe", str(recipe)], tmp_path / "run", capsys, named="bad.yaml")
    assert says in err, err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_a_recipe_with_a_byte_order_mark_is_read(tmp_path: Path, encoding: str) -> None:
    """YAML allows UTF-16 and UTF-32 with a byte-order mark: what a Windows editor writes."""
    from fedlight.config import load_recipe

    recipe = tmp_path / "windows.yaml"
    recipe.write_bytes("rounds: 3\nname: caf\u00e9\n".encode(encoding))
    assert (load_recipe(recipe).rounds, load_recipe(recipe).name) == (3, "caf\u00e9")


@pytest.mark.parametrize(("override", "named"), [
    ("seed=2024-13-45", "seed"),  # PyYAML's ValueError: read as text, then refused as not an int
    ("na\nme=1", "na\\nme"),  # a key with a line break: escaped, still one line
    ("a\u2028b=1", "a\\u2028b"),
    ('data.root="/no/such\\rfolder"', "/no/such\\rfolder"),  # a path in the message (YAML's escape)
])
def test_an_override_with_odd_text_is_one_line(tiny_recipe: Path, capsys, override: str, named: str) -> None:
    _assert_clean_failure(["fit", "--recipe", str(tiny_recipe), override, "data.name=fashion_mnist"],
                          tiny_recipe.parent / "run", capsys, named=named)


@pytest.mark.parametrize("saved", [b"rounds: [1,\n", b"- a\n- b\n", bytes(range(256)), b"seed: !!float abc\n",
                                   b"seed: 1\nseed: 2\n"])
def test_a_damaged_recipe_yaml_in_the_run_folder(tiny_recipe: Path, capsys, saved: bytes) -> None:
    """--resume compares the recipe with the run's recipe.yaml: invalid YAML, a list or binary
    is one line naming that file, and the run folder is left as it was."""
    run = tiny_recipe.parent / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"not read before the recipe is compared")
    (run / "recipe.yaml").write_bytes(saved)
    before = _snapshot(run)
    code = main(["fit", "--recipe", str(tiny_recipe), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    assert str(run / "recipe.yaml") in err and "--resume" in err and "--overwrite" not in err, err
    assert _snapshot(run) == before


# ---------------------------------------------------------------- generated recipes and overrides

class _Validated(Exception):
    """Raised where ``fit`` would set up devices and the run folder: the recipe was accepted."""


@pytest.fixture
def validation_only(monkeypatch):
    """``fedlight fit`` up to the point where it touches devices or the run folder, in process:
    the recipe, data, partition and method are checked for real; no local rank is started (the
    launcher's own check still runs) and nothing trains."""
    from fedlight.engine.run import fit as fit_module
    from fedlight.engine.run import launch

    def stop(*args: Any, **kwargs: Any) -> None:
        raise _Validated

    def no_processes(devices: int, nodes: int, argv: list[str]) -> list:
        saved = dict(os.environ)  # rank 0's variables, set before it would start the others
        try:
            return real_start(devices, nodes, argv)
        finally:
            os.environ.clear()
            os.environ.update(saved)

    real_start = launch.start_local_ranks
    monkeypatch.setattr(fit_module, "make_fabric", stop)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=stop))
    monkeypatch.setattr(launch, "start_local_ranks", no_processes)


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)  # any unicode: NUL, line breaks, RTL
EDGES = st.sampled_from([0, 1, 2, -1, 0.0, 1.5, -0.5, 1e-300, 1e300, math.nan, math.inf, -math.inf, [], {}, "", [[]],
                         "\n", "a\x00b", "\u2028", "caf\u00e9", True, None])
VALUES = st.one_of(EDGES, st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(-2, 2), TEXT),
                                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                               st.dictionaries(TEXT, inner, max_size=2)),
                                       max_leaves=4))


def _edges(hint: Any) -> st.SearchStrategy:
    """Values at the edge of what a key typed ``hint`` takes: 0, negatives, above 1, huge and
    tiny numbers for numbers; empty lists; text with NUL and line breaks."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Annotated:
        return _edges(args[0])
    if typing.get_origin(hint) is list:
        return st.sampled_from([[], [[]], [-1], [1.5]])
    if {int, float} & {hint, *args}:
        return st.sampled_from([0, -1, 1, 2, 0.0, -0.5, 1.5, 100.5, 1e-300, 1e300, 10**9])
    return st.one_of(TEXT, st.sampled_from(["", "\n", "a\x00b", "\u2028", "x\ry"]))


def _keys(method: str, server: str) -> st.SearchStrategy[tuple[list[str], st.SearchStrategy]]:
    """(key path, its values): schema keys and the chosen method's and server's options, each with
    its edge values or any value; and made-up keys (unicode, line breaks) with any value."""
    typed = [(k.split("."), hint) for k, hint, _ in KEYS] + \
            [([section, p], typing.get_type_hints(table[name].__init__, include_extras=True).get(p, Any))
             for section, table, name in (("method", registry.METHODS, method), ("server", registry.SERVERS, server))
             for p in registry._params(table[name], section)]
    made_up = st.tuples(st.sampled_from(["", *SECTIONS, "method", "server"]), TEXT).map(
        lambda p: ([part for part in p if part] or ["x"], VALUES))
    options = [kh for kh in typed if kh[0][0] in ("method", "server")]
    return st.one_of(*[st.sampled_from(pool).map(lambda kh: (kh[0], st.one_of(_edges(kh[1]), VALUES)))
                       for pool in (typed, options) if pool], made_up)


ENCODINGS = ["utf-8", "utf-8", "utf-16", "utf-32", "utf-8-sig", "latin-1", "utf-16 cut short"]


def _set(tree: dict, path: list[str], value: Any) -> None:
    """``tree[a][b][c] = value`` for path ``[a, b, c]``, making (or replacing non-mappings by) sections."""
    for part in path[:-1]:
        if not isinstance(tree.get(part), dict):
            tree[part] = {}
        tree = tree[part]
    tree[path[-1]] = value


def _encoded(recipe: dict, encoding: str) -> bytes:
    text = yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False)
    if encoding == "latin-1":
        return text.encode("latin-1", errors="replace")
    if encoding == "utf-16 cut short":
        return text.encode("utf-16")[:-1]
    return text.encode(encoding)


@st.composite
def generated_runs(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A recipe file (the tiny recipe, another method and server, up to three keys set to any value,
    in any encoding) and up to two overrides of any key to any value."""
    from conftest import REPO, TINY

    recipe = yaml.safe_load(TINY.format(repo=REPO))
    method = draw(st.one_of(st.sampled_from(["simclr", "byol"]), st.sampled_from(sorted(registry.METHODS))))
    server = draw(st.one_of(st.just("fedavg"), st.sampled_from(sorted(registry.SERVERS))))
    recipe["method"], recipe["server"] = {"name": method}, {"name": server}
    keys = _keys(method, server)
    for _ in range(draw(st.integers(0, 2))):
        path, values = draw(keys)
        _set(recipe, path, draw(values))
    overrides = []
    for _ in range(draw(st.integers(0, 2))):
        path, values = draw(keys)
        text = draw(st.one_of(values.map(lambda v: _override("k", v)[2:]), TEXT))
        overrides.append(".".join(path) + "=" + text)
    return _encoded(recipe, draw(st.sampled_from(ENCODINGS))), overrides


@settings(SETTINGS, max_examples=60)
@given(run=generated_runs())
def test_any_generated_recipe_is_accepted_or_one_line(tmp_path_factory, capsys, validation_only,
                                                      run: tuple[bytes, list[str]]) -> None:
    """The invariant over generated recipes and overrides (types, ranges, unicode, empty containers,
    encodings): fit either gets past every check to where it would set up the run, or says why in
    one line with exit code 2; either way no run folder exists."""
    data, overrides = run
    folder = tmp_path_factory.mktemp("generated")
    (folder / "recipe.yaml").write_bytes(data)
    run_dir = folder / "run"
    try:
        code = main(["fit", "--recipe", str(folder / "recipe.yaml"), *overrides, f"run.dir={run_dir}"])
    except _Validated:
        code = None
    err = capsys.readouterr().err
    event("accepted" if code is None else "refused")
    if code is not None:
        assert code == 2, (overrides, err)
        assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and "Traceback" not in err, err
    assert not run_dir.exists()
    if code is None:  # what fit builds next from an accepted recipe must not crash in torch or lightly
        _build_model_and_views(load_recipe(folder / "recipe.yaml", overrides))


def _build_model_and_views(recipe: Any) -> None:
    """The method (its lightly heads and losses) and one batch of its augmented views."""
    import torch

    from fedlight.engine.run.assemble import build_views
    from fedlight.engine.run.fit import build_module, prepare_data

    data, _ = prepare_data(recipe)
    module = build_module(recipe, data)
    views = build_views(recipe, data).views(data.train_x[:4], module.num_views, torch.Generator().manual_seed(0))
    assert all(torch.isfinite(v).all() for v in views)


# ---------------------------------------------------------------- tracebacks that became one line

LONG = "x" * 300  # one path component longer than any Linux file system's 255 bytes


def _one_line(args: list[str], capsys, named: str) -> str:
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    assert named in err and "255" in err, err
    return err


@pytest.mark.parametrize("key", ["run.dir", "data.root"])
def test_a_path_component_too_long_for_the_file_system_is_one_line(tiny_recipe: Path, tmp_path: Path, capsys,
                                                                   key: str) -> None:
    data = ["data.name=fashion_mnist"] if key == "data.root" else []
    _one_line(["fit", "--recipe", str(tiny_recipe), *data, f"{key}={tmp_path / LONG / 'x'}"], capsys, key)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.parametrize("command", ["sweep --out", "report --out", "report input"])
def test_a_sweep_or_report_path_too_long_is_one_line(tiny_recipe: Path, tmp_path: Path, capsys, command: str) -> None:
    long = str(tmp_path / LONG)
    args = {"sweep --out": ["sweep", "--recipe", str(tiny_recipe), "--out", long],
            "report --out": ["report", str(tmp_path), "--out", long],
            "report input": ["report", long, "--out", str(tmp_path / "report")]}[command]
    _one_line(args, capsys, "--out" if "--out" in command else LONG[:20])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.parametrize("where", ["file", "override"])
def test_a_recipe_nested_hundreds_deep_is_one_line(tiny_recipe: Path, tmp_path: Path, capsys, where: str) -> None:
    deep = "{a: " * 300 + "1" + "}" * 300
    recipe = tmp_path / "deep.yaml"
    recipe.write_text(tiny_recipe.read_text() + f"extra: {deep}\n")
    args = [str(recipe)] if where == "file" else [str(tiny_recipe), f"method.extra={deep}"]
    err = _assert_clean_failure(["fit", "--recipe", *args], tmp_path / "run", capsys, "nests more than 32")
    assert ("extra.a.a" in err) and len(err) < 400, err


def test_a_linear_probe_on_one_labelled_example_is_finite() -> None:
    """One example has no spread: its standardisation divided by a NaN std, and L-BFGS overflowed."""
    import torch

    from fedlight.eval.probes import linear_probe_accuracy

    feats = torch.randn(1, 8)
    test_x, test_y = torch.randn(20, 8), torch.arange(20) % 4
    accuracy = linear_probe_accuracy(feats, torch.tensor([2]), test_x, test_y, num_classes=4, steps=200)
    assert accuracy == pytest.approx(0.25)  # every test example gets the one class it saw
