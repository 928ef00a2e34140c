"""Upload compression (``server.compress``): the encodings' math and bytes by hand, error feedback's residual,
the no-op's bit-for-bit equality, runs that count, resume and compose with DP, robust rules and the clock,
and the settings refused in one line."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import scipy.linalg
import torch

from fedlight.cli import main
from fedlight.compression import codecs
from fedlight.compression.update_compression import RESIDUAL, UpdateCompression
from fedlight.config import load_recipe
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.server.differential_privacy import dp_epsilon

FAST = ["clients.num=4", "data.subset=400", "model.backbone=tiny_cnn", "eval.probe_epochs=1", "eval.knn_k=5",
        "eval.projector_samples=0", "loggers=[]"]
TOP1 = "{kind: topk, fraction: 0.01, error_feedback: true}"


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("rotate", [False, True])
def test_stochastic_quantization_is_unbiased_within_its_variance_bound(rotate: bool) -> None:
    """Each draw's squared error is at most n (M / s)^2 / 4 (M: the block's scale, in the rotated basis where
    rotated; an orthonormal rotation keeps the sum), so the mean of N draws is x within n (M / s)^2 / (4 N)."""
    x = torch.randn(300, dtype=torch.float64) * torch.linspace(0.1, 3, 300, dtype=torch.float64)
    bits, draws, gen = 2, 4000, _generator()
    d = 512 if rotate else 300
    basis = x if not rotate else None
    sent = torch.stack([codecs.qsgd(x, bits, None, rotate, gen).value for _ in range(draws)])
    if basis is None:  # the rotated block's scale bounds it: max |H D x| / sqrt(d) <= ||x||_1 / sqrt(d)
        scale = x.abs().sum() / math.sqrt(d)
    else:
        scale = x.abs().max()
    bound = d * (scale / (2 ** bits - 1)) ** 2 / 4
    assert float(((sent - x) ** 2).sum(dim=1).max()) <= bound * (1 + 1e-9)  # every draw
    assert float(((sent.mean(0) - x) ** 2).sum()) <= 3 * bound / draws  # the mean: unbiased
    assert float(((sent.mean(0) - x) ** 2).sum()) > 0  # and random


def test_quantized_levels_are_the_grid_of_the_blocks_scale() -> None:
    x = torch.tensor([0.5, -1.0, 0.25, 0.0, 2.0, -4.0], dtype=torch.float64)
    out = codecs.qsgd(x, 2, 3, False, _generator()).value  # blocks [0.5, -1, 0.25] (M=1), [0, 2, -4] (M=4)
    levels = torch.cat([out[:3] * 3 / 1.0, out[3:] * 3 / 4.0])
    assert torch.equal(levels, levels.round()) and levels.abs().max() <= 3
    assert out[1] == -1.0 and out[5] == -4.0 and out[3] == 0.0  # the scale's entry and a zero are exact


def test_the_walsh_hadamard_transform_is_scipys_matrix_normalised() -> None:
    x = torch.randn(3, 16, dtype=torch.float64)
    h = torch.tensor(scipy.linalg.hadamard(16), dtype=torch.float64) / 4
    assert torch.allclose(codecs.walsh_hadamard(x), x @ h.T)
    assert torch.allclose(codecs.walsh_hadamard(codecs.walsh_hadamard(x)), x)


def test_top_k_keeps_exactly_the_k_largest_magnitudes() -> None:
    x = torch.randperm(1000, generator=_generator()).double().sub(500).reshape(10, 100)  # distinct magnitudes but +-
    x[x == 0] = 0.5
    out = codecs.top_k(x, 0.013, torch.float32).value  # k = ceil(13) = 13
    largest = set(x.reshape(-1).abs().topk(13).indices.tolist())
    assert set(out.reshape(-1).nonzero().reshape(-1).tolist()) == largest
    assert torch.equal(out.reshape(-1)[list(largest)], x.reshape(-1)[list(largest)])


def test_random_k_is_unbiased_and_sends_k_entries() -> None:
    x, gen = torch.randn(50, dtype=torch.float64), _generator()
    sent = torch.stack([codecs.random_k(x, 0.1, torch.float64, True, gen).value for _ in range(4000)])
    assert all(int((s != 0).sum()) == 5 for s in sent[:10])
    # each entry is x_i n / k with probability k / n: variance x_i^2 (n / k - 1) a draw
    assert float(((sent.mean(0) - x) ** 2).sum()) <= 3 * float((x ** 2).sum()) * 9 / 4000


@pytest.mark.parametrize("kind", ["topk", "randk", "qsgd"])
def test_error_feedbacks_residual_plus_what_was_sent_is_the_update(kind: str) -> None:
    options = {"qsgd": {"bits": 2}}.get(kind, {"fraction": 0.1})
    compression = UpdateCompression(kind, **options, error_feedback=True, seed=4)
    start = {"w": torch.randn(40, 5), "n": torch.tensor(3)}
    model = {"w": start["w"] + torch.randn(40, 5), "n": torch.tensor(9)}
    old = {RESIDUAL + "w": torch.randn(40, 5)}
    upload = compression.compress(model, start, round_=2, client=1, stored=old)
    update = model["w"].double() - start["w"].double() + old[RESIDUAL + "w"].double()
    sent = upload.payload["w"].double() - start["w"].double()
    residual = upload.residual[RESIDUAL + "w"].double()
    assert torch.allclose(residual + sent, update, rtol=0, atol=1e-6)  # the residual and the model kept in float32
    if kind != "qsgd":  # a sparsifier keeps the k entries it did not send whole, the others' float32 rounding
        assert int((residual.abs() > 1e-6).sum()) == 200 - 20
    assert upload.payload["n"] is model["n"] and set(upload.residual) == {RESIDUAL + "w"}


def test_qsgd_under_error_feedback_is_divided_by_one_plus_its_exact_relative_variance() -> None:
    """x = [1, 0.5] at 1 bit: M = 1, s = 1, levels' fractional parts p = [0, 0.5], so the variance is 0.25,
    w = 0.25 / 1.25 = 0.2 and the scale sent is 1 / 1.2; the first entry's level is 1 for sure."""
    x = torch.tensor([1.0, 0.5], dtype=torch.float64)
    scale = torch.tensor(1 / 1.2, dtype=torch.float32).double()
    for seed in range(20):
        out = codecs.qsgd(x, 1, None, False, _generator(seed), contract=True).value
        assert out[0] == scale and out[1] in (0.0, scale)
        assert torch.equal(codecs.qsgd(x, 1, None, False, _generator(seed)).value, out / scale)  # unbiased: M


@pytest.mark.parametrize("rotate", [False, True])
def test_error_feedback_with_one_bit_qsgd_keeps_the_residual_bounded(rotate: bool) -> None:
    """Unscaled, 1-bit QSGD's error exceeds the update it compresses (w > 1 for a rotated Gaussian block) and
    error feedback's residual grew without bound: 4.4e3 times the update after 40 rounds, rotated."""
    compression = UpdateCompression("qsgd", bits=1, block=1024, rotate=rotate, error_feedback=True, seed=1)
    start, stored, gen = {"w": torch.zeros(4096)}, {}, _generator(2)
    ratios = []
    for round_ in range(40):
        update = torch.randn(4096, generator=gen)
        upload = compression.compress({"w": update}, start, round_, 0, stored)
        stored = upload.residual
        ratios.append(float(stored[RESIDUAL + "w"].norm() / update.norm()))
    assert max(ratios) < 3 and max(ratios[20:]) < 1.5 * max(ratios[:20])


def test_a_sparsifiers_k_is_the_ceiling_of_the_fraction_as_written() -> None:
    assert [codecs.kept(n, f) for n, f in ((100, 0.07), (100, 0.14), (10_000, 0.035), (700, 0.01), (101, 0.07))] \
        == [7, 14, 350, 7, 8]


def test_only_the_trainable_parameters_are_compressed_and_buffers_travel_as_they_are() -> None:
    """A BatchNorm variance rebuilt from a top-k update with a residual fell below 0 (NaN features in a run)."""
    start = {"w": torch.zeros(100), "bn.running_var": torch.ones(100)}
    model = {"w": torch.randn(100), "bn.running_var": torch.rand(100) + 0.5}
    upload = UpdateCompression("topk", fraction=0.01, error_feedback=True).compress(model, start, 0, 0,
                                                                                   parameters={"w"})
    assert upload.payload["bn.running_var"] is model["bn.running_var"]
    assert int((upload.payload["w"] != 0).sum()) == 1 and set(upload.residual) == {RESIDUAL + "w"}
    assert upload.sent == {"float32": 4 + 400, "uint8": 1}  # one value, one 7-bit index; the variance whole


def test_byte_counts_by_hand() -> None:
    w, b, n = torch.zeros(1000), torch.zeros(10), torch.tensor(0)  # two float tensors and an integer buffer
    state = {"w": w, "b": b, "n": n}
    cases = {
        ("fp16", ()): 2000 + 20 + 8,
        ("bf16", ()): 2000 + 20 + 8,
        # 1000 x (4 + 1) bits = 625 bytes + one float32 scale; 10 x 5 bits = 50 bits -> 7 bytes + 4
        ("qsgd", (("bits", 4),)): 625 + 4 + 7 + 4 + 8,
        # blocks of 256: ceil(1000 / 256) = 4 scales; the 10 entries: one block
        ("qsgd", (("bits", 4), ("block", 256))): 625 + 16 + 7 + 4 + 8,
        # rotated: 1000 padded to 1024 entries x 5 bits = 640 bytes; 10 padded to 16 x 5 = 80 bits = 10 bytes
        ("qsgd", (("bits", 4), ("rotate", True))): 640 + 4 + 10 + 4 + 8,
        # rotated blocks of 256: 4 blocks, 1024 x 5 bits and 4 scales; the 10 entries one block of 16, not 256
        ("qsgd", (("bits", 4), ("block", 256), ("rotate", True))): 640 + 16 + 10 + 4 + 8,
        # k = 10 of 1000: 10 float32 + 10 indices of 10 bits = 13 bytes; k = 1 of 10: 4 + one 4-bit index -> 1
        ("topk", (("fraction", 0.01),)): 40 + 13 + 4 + 1 + 8,
        ("randk", (("fraction", 0.01),)): 40 + 4 + 8,  # indices from the shared generator: no bytes
        ("none", ()): 4000 + 40 + 8,
    }
    for (kind, options), expected in cases.items():
        compression = UpdateCompression(kind, **dict(options))
        assert compression.upload_bytes(state) == expected, (kind, options)
        model = {k: v + 1 if v.is_floating_point() else v for k, v in state.items()}
        assert sum(compression.compress(model, state, 0, 0).sent.values()) == expected, (kind, options)


def test_no_compression_kind_is_the_uncompressed_run_bit_for_bit(tmp_path: Path, tiny_recipe: Path) -> None:
    plain = fit(load_recipe(tiny_recipe, [*FAST, f"run.dir={tmp_path / 'plain'}"]))
    none = fit(load_recipe(tiny_recipe, [*FAST, "server={name: fedavg, compress: {kind: none}}",
                                         f"run.dir={tmp_path / 'none'}"]))
    a, b = (torch.load(tmp_path / r / "checkpoints/last.pt", weights_only=True)["global"] for r in ("plain", "none"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert plain["comm"] == none["comm"]
    assert (tmp_path / "plain/comm.csv").read_text() == (tmp_path / "none/comm.csv").read_text()


def test_a_run_counts_the_compressed_bytes_up_and_resumes_bit_for_bit_with_error_feedback(
        tmp_path: Path, tiny_recipe: Path) -> None:
    server = f"server={{name: fedavg, compress: {TOP1}}}"
    res = fit(load_recipe(tiny_recipe, [*FAST, server, f"run.dir={tmp_path / 'straight'}"]))
    model = torch.load(tmp_path / "straight/checkpoints/last.pt", weights_only=True)
    buffers = ("running_mean", "running_var", "num_batches_tracked")  # BatchNorm's: sent as they are
    parameters = {k for k in model["global"] if not k.endswith(buffers)}
    per_client = UpdateCompression("topk", fraction=0.01).upload_bytes(model["global"], parameters)
    assert res["comm"]["bytes_up"] == 2 * 4 * per_client  # 2 rounds x 4 clients
    with open(tmp_path / "straight/comm.csv") as f:
        up = [row for row in csv.DictReader(f) if row["direction"] == "up"]
    assert {row["dtype"] for row in up} == {"float32", "uint8", "int64"}  # values, packed indices, BatchNorm's counter
    assert sum(int(row["bytes"]) for row in up) == res["comm"]["bytes_up"]
    assert all(any(k.startswith(RESIDUAL) for k in state) for state in model["clients"].values())
    for store in ("memory", "disk"):
        half = [f"run.dir={tmp_path / store}", f"run.client_state={store}"]
        fit(load_recipe(tiny_recipe, [*FAST, server, *half, "rounds=1"]))
        fit(load_recipe(tiny_recipe, [*FAST, server, *half]), resume=True)
        resumed = torch.load(tmp_path / store / "checkpoints/last.pt", weights_only=True)["global"]
        assert all(torch.equal(model["global"][k], resumed[k]) for k in resumed), store
    assert res["recipe"]["resolved"]["server"]["compress"] == {"kind": "topk", "bits": 8, "block": None, "rotate": False,
                                                               "fraction": 0.01, "error_feedback": True}
    for changed in ("server={name: fedavg, compress: {kind: topk, fraction: 0.02, error_feedback: true}}",
                    "server={name: fedavg}"):
        with pytest.raises(UserError, match="--resume"):
            fit(load_recipe(tiny_recipe, [*FAST, changed, f"run.dir={tmp_path / 'straight'}", "rounds=3"]), resume=True)


def test_error_feedback_changes_the_run_and_dp_keeps_its_epsilon(tmp_path: Path, tiny_recipe: Path) -> None:
    """DP clips and noises on the server what it decodes: compression is the clients' business before the
    release, so the accounted epsilon is the same with it or without it."""
    runs = {}
    for name, compress in (("dp", ""), ("dp_topk", f", compress: {TOP1}"), ("topk", "")):
        dp = "dp: {clip: 0.5, noise_multiplier: 1.3}" if name.startswith("dp") else f"compress: {TOP1}"
        runs[name] = fit(load_recipe(tiny_recipe, [*FAST, f"server={{name: fedavg, {dp}{compress}}}",
                                                   f"run.dir={tmp_path / name}"]))
    eps = [[row["dp_epsilon"] for row in runs[n]["history"]] for n in ("dp", "dp_topk")]
    assert eps[0] == eps[1] == [dp_epsilon(1.0, 1.3, r, 1e-5) for r in (1, 2)]
    assert runs["dp_topk"]["comm"]["bytes_up"] == runs["topk"]["comm"]["bytes_up"] < runs["dp"]["comm"]["bytes_up"]


def test_a_robust_rule_sees_the_decoded_models(tmp_path: Path, tiny_recipe: Path) -> None:
    res = fit(load_recipe(tiny_recipe, [*FAST, "rounds=1", "server={name: median, compress: {kind: qsgd, bits: 2}}",
                                        f"run.dir={tmp_path / 'median'}"]))
    assert res["history"][0]["knn_acc"] is not None and res["comm"]["bytes_up"] < res["comm"]["bytes_down"] / 5


def test_the_clock_times_the_compressed_upload(tmp_path: Path, tiny_recipe: Path) -> None:
    clock = ["clock.devices=fixed", "clock.up_mbps=0.1", "rounds=1"]
    seconds = {}
    for name, server in (("plain", "{name: fedavg}"), ("fp16", "{name: fedavg, compress: {kind: fp16}}")):
        res = fit(load_recipe(tiny_recipe, [*FAST, *clock, f"server={server}", f"run.dir={tmp_path / name}"]))
        seconds[name] = (res["history"][0]["round_virtual_seconds"], res["comm"]["bytes_up"] / 4)
    (plain, up_plain), (half, up_half) = seconds["plain"], seconds["fp16"]
    assert plain - half == pytest.approx((up_plain - up_half) * 8 / 0.1e6, rel=1e-9)


@pytest.mark.parametrize("compress, says", [
    ("{kind: qsgd, bits: 0}", "'server.compress.bits' must be in 1..16"),
    ("{kind: qsgd, bits: 17}", "'server.compress.bits' must be in 1..16"),
    ("{kind: topk, fraction: 0}", "'server.compress.fraction' must be in (0, 1]"),
    ("{kind: randk, fraction: 1.5}", "'server.compress.fraction' must be in (0, 1]"),
    ("{kind: topk, bits: 4}", "server.compress.bits acts only with server.compress.kind=qsgd"),
    ("{kind: qsgd, fraction: 0.1}", "server.compress.fraction acts only with server.compress.kind=topk or randk"),
    ("{kind: qsgd, rotate: true, block: 100}", "server.compress.block=100: a rotated block must be a power of two"),
    ("{kind: none, error_feedback: true}", "server.compress.error_feedback keeps what a client did not send"),
    ("{kind: zip}", "server.compress.kind"),
    ("{kind: topk, seed: 3}", "server.compress.seed cannot be set"),
    ("qsgd", "server.compress must be a mapping"),
], ids=["bits-0", "bits-17", "fraction-0", "fraction-1.5", "bits-topk", "fraction-qsgd", "block", "ef-none",
        "kind", "seed", "not-a-mapping"])
def test_a_bad_compression_setting_is_one_line_exit_2_before_anything_is_written(
        tmp_path: Path, tiny_recipe: Path, capsys, compress: str, says: str) -> None:
    run = tmp_path / "refused"
    code = main(["fit", "--recipe", str(tiny_recipe), *FAST, f"server={{name: fedavg, compress: {compress}}}",
                 f"run.dir={run}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err and "Traceback" not in err, err
    assert not run.exists()


@pytest.mark.parametrize("server, says", [
    ("{name: local_only, compress: {kind: fp16}}", "server.name=local_only: its clients upload nothing"),
    ("{name: scaffold, compress: {kind: fp16}}", "upload more than their model (control variates)"),
    ("{name: flesd, compress: {kind: fp16}}", "upload similarities on a public set, which have their own dtype"),
    ("{name: centralized, compress: {kind: qsgd}}", "server.name=centralized: its clients upload nothing"),
], ids=["local_only", "scaffold", "flesd", "centralized"])
def test_compression_where_no_model_update_is_uploaded_is_refused(tmp_path: Path, tiny_recipe: Path, capsys,
                                                                   server: str, says: str) -> None:
    method = ["method.name=scaffold", "method.objective=simclr"] if "scaffold" in server else []
    if "flesd" in server:  # its public set, else that is refused first
        method.append("partition.public_client=0")
    code = main(["fit", "--recipe", str(tiny_recipe), *FAST, *method, f"server={server}",
                 f"run.dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err, err


def _spy(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[tuple]:
    """Record every (args, result) of ``owner.name`` while it still runs as it was."""
    calls, original = [], getattr(owner, name)

    def spied(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls.append((args, kwargs, out))
        return out
    monkeypatch.setattr(owner, name, spied)
    return calls


def test_an_attacking_round_neither_reads_nor_writes_the_error_feedback_residual(
        tmp_path: Path, tiny_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attackers re-drawn each round: a sign-flip's leftover (ten times an honest update) would otherwise go up
    with the client's later, benign uploads; the attacker's upload is compressed like any."""
    calls = _spy(monkeypatch, UpdateCompression, "compress")
    args = [*FAST, "rounds=3", f"server={{name: fedavg, compress: {TOP1}}}", "faults.attack=sign_flip",
            "faults.attackers=0.25", "faults.attackers_per_round=true", "faults.attack_scale=10",
            f"run.dir={tmp_path / 'run'}"]
    fit(load_recipe(tiny_recipe, args))
    attacking = {(int(r), int(c)) for r, c, *_ in (line.split(",") for line in
                                                   (tmp_path / "run/faults.csv").read_text().splitlines()[1:])}
    assert len(attacking) == 3
    residual = {}  # client -> the residual it keeps after its last round
    for (payload, start, round_, client, stored, _), _, upload in calls:
        kept = {k: v for k, v in (stored or {}).items() if k.startswith(RESIDUAL)}
        if (round_ + 1, client) in attacking:
            assert stored is None  # nothing of the honest memory goes up with the attack
        else:
            assert kept.keys() == residual.get(client, {}).keys()
            assert all(torch.equal(kept[k], residual[client][k]) for k in kept)  # its last honest residual
            residual[client] = upload.residual
    final = torch.load(tmp_path / "run/checkpoints/last.pt", weights_only=True)["clients"]
    for client, state in final.items():
        assert all(torch.equal(state[k], residual[client][k]) for k in residual[client])


def test_an_attack_crafted_from_the_decoded_payloads_goes_up_compressed(
        tmp_path: Path, tiny_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ALIE crafts its model on the server's side from the decoded benign ones: a dense model in full precision,
    which the top-1% wire now sparsifies like any upload (its bytes, counted with its own upload, are the same)."""
    from fedlight.engine.loop.client_runner import ClientRunner
    calls = _spy(monkeypatch, ClientRunner, "on_the_wire")
    fit(load_recipe(tiny_recipe, [*FAST, "rounds=1", "server={name: fedavg, compress: {kind: topk, fraction: 0.01}}",
                                  "faults.attack=alie", "faults.attackers=0.25", f"run.dir={tmp_path / 'run'}"]))
    ((round_, client, crafted, start), _, sent), = calls
    for key, value in sent.items():
        if value.is_floating_point() and not key.endswith(("running_mean", "running_var")):
            moved = int((value != start[key].cpu()).sum())
            assert moved <= codecs.kept(value.numel(), 0.01) < int((crafted[key] != start[key].cpu()).sum()) or \
                value.numel() == 1, key


def test_an_upload_the_server_decodes_to_inf_is_a_divergence_of_its_client(
        tmp_path: Path, tiny_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp16 turns an update entry over 65504 into inf: the check reads what the server decodes, not only the
    model the client trained, so the client is excluded in its round (faults.csv) and the model stays finite."""
    original = UpdateCompression.compress

    def overflowing(self, payload, global_state, round_, client, *args):
        upload = original(self, payload, global_state, round_, client, *args)
        if (round_, client) == (0, 1):
            key = next(k for k, v in upload.payload.items() if v.is_floating_point())
            upload.payload[key] = upload.payload[key].clone().fill_(float("inf"))
        return upload
    monkeypatch.setattr(UpdateCompression, "compress", overflowing)
    res = fit(load_recipe(tiny_recipe, [*FAST, "server={name: fedavg, compress: {kind: fp16}}",
                                        f"run.dir={tmp_path / 'run'}"]))
    assert [row["diverged"] for row in res["history"]] == [1, 0]
    assert (tmp_path / "run/faults.csv").read_text().splitlines()[1].startswith("1,1,diverged,")
    model = torch.load(tmp_path / "run/checkpoints/last.pt", weights_only=True)["global"]
    assert all(torch.isfinite(v).all() for v in model.values() if v.is_floating_point())
