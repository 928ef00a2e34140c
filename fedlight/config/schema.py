"""The recipe schema: typed dataclasses, one per recipe section.

Every key a recipe may set is a field here (``method.*``, ``server.*`` and ``plugins.<name>.*`` are
typed by the constructor of the chosen method, aggregator or round plug-in, see ``fedlight.registry``). Constraints that
a value must meet are declared next to the field as ``metadata={"check": ...}``.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from fedlight.config.checks import (at_least, concentration, decay, distinct, folder_name, fraction, non_negative,
                                    positive, probabilities, probability, seed_value)
from fedlight.data.domain_names import known_domains


def check(fn: Any, default: Any = None, **kw: Any) -> Any:
    """A dataclass field whose value must pass ``fn`` (returns an error text or None)."""
    if "default_factory" in kw:
        return field(metadata={"check": fn}, **kw)
    return field(default=default, metadata={"check": fn})


@dataclass
class DataConfig:
    name: Literal["fashion_mnist", "mnist", "cifar10", "cifar100", "svhn", "stl10", "synthetic",
                  "diabetes", "femnist", "hf_disk"] = "fashion_mnist"
    root: str = "data"
    download: bool = False
    subset: int | None = check(positive, None)
    test_subset: int | None = check(positive, None)
    # hf_disk (a Hugging Face `datasets` dataset saved to disk, or train/test parquet files; needs
    # `pip install 'fedlight[hf]'`): the columns holding each sample's image, label and writer id
    # (the group partition.kind=natural splits by; None: no group). fedlight/data/natural_sources.py
    image_column: str = "image"
    label_column: str = "label"
    group_column: str | None = None


@dataclass
class PartitionConfig:
    kind: Literal["iid", "dirichlet", "shards", "classes", "class_ring", "quantity", "natural"] = "dirichlet"
    alpha: float = check(concentration, 0.5)
    classes_per_client: int = check(positive, 2)
    shards_per_client: int = check(positive, 2)
    min_size: int = check(non_negative, 10)
    public_client: int | None = check(non_negative, None)
    # FLESD's public set made class-balanced: the public client's images replaced by as many drawn
    # outside data.subset, size // classes of each (the first size mod classes one more);
    # fedlight/data/public_set.py
    public_balanced: bool = False
    # kind=quantity: label-independent client sizes, min_size each plus a share of the rest in proportion to
    # a lognormal(0, quantity_sigma) or a Pareto(quantity_exponent) draw (fedlight/data/partition.py)
    quantity_law: Literal["lognormal", "power_law"] = "lognormal"
    quantity_sigma: float = check(lambda v: None if 0 < v <= 5 else "must be in (0, 5]", 1.0)
    quantity_exponent: float = check(lambda v: None if 0 < v <= 10 else "must be in (0, 10]", 1.5)
    # kind=natural: one client per writer of data's group column: `sample` clients.num of the writers
    # (the others' samples train no client), or `merge` every writer into clients.num clients
    writers: Literal["sample", "merge"] = "sample"
    # feature shift: one image transform a domain (fedlight/data/domain_names.py), the clients cut into as
    # many contiguous groups, partition.kind applied within each (fedlight/data/domains.py); []: none
    domains: list[str] = check(known_domains, default_factory=list)


@dataclass
class ClientsConfig:
    num: int = check(positive, 10)
    fraction: float = check(fraction, 1.0)
    # fixed: round(fraction x K) clients a round; poisson: each client with probability
    # round(fraction x K) / K (what DP-FedAvg's accountant models; engine/loop/sampling.py)
    sampling: Literal["fixed", "poisson"] = "fixed"


@dataclass
class LocalConfig:
    epochs: int = check(positive, 1)
    batch_size: int = check(at_least(2), 128)  # a batch of one is skipped (BatchNorm, contrastive losses)
    lr: float = check(positive, 1e-3)
    optimizer: Literal["adam", "sgd", "adamw"] = "adam"
    # over the rounds of the method's current phase (engine/loop/lr_schedule.py, round_lr):
    # cosine (FedU / FedEMA) or exponential, lr x (1 - lr_decay)^t (LG-FedAvg, Table 6)
    lr_schedule: Literal["constant", "cosine", "exponential"] = "constant"
    lr_decay: float = check(decay, 0.0)
    momentum: float = check(probability, 0.9)
    weight_decay: float = check(non_negative, 1e-6)
    # a round is this many SGD iterations instead of ``epochs`` epochs (CF-CL's Ta; its exchange needs it)
    iterations: int | None = check(positive, None)
    # how a client spends its round (registry.SCHEDULES): None picks ``stream`` when stream.velocity is
    # set, ``exchange`` when local.iterations is, else ``epochs``; packages add names (fedlight.schedules)
    schedule: str | None = None
    # compile the method's training_step (forward, loss and backward) with torch.compile: inductor's fused
    # kernels, or those replayed as CUDA graphs (cudagraphs, CUDA only); other kernels, so other last bits
    # than eager (fedlight/engine/loop/compiled_step.py)
    compile: Literal["none", "inductor", "cudagraphs"] = "none"
    # train up to this many of a worker's clients as one step (torch.func.vmap over their stacked
    # models, engine/loop/batched_clients.py; docs/batched_clients.md); None: one by one
    batched_clients: int | None = check(at_least(2), None)


@dataclass
class StreamConfig:
    """Streaming clients (SOFed): set ``velocity`` to turn a client's data into a stream."""

    velocity: int | None = check(positive, None)
    stc: int = check(positive, 500)
    classes_per_client: int | None = check(positive, None)  # more non-iid: a device streams only these many classes


@dataclass
class BufferConfig:
    """The on-device replay buffer of streaming clients (SOFed); ``policy``: see
    ``fedlight.engine.parts.sofed.buffer``.

    ``reservoir`` keeps a uniform sample of the whole stream so far; ``random`` is the paper's
    Random Replacement, a uniform N of buffer + arriving batch at each batch.
    """

    size: int = check(positive, 128)
    policy: Literal["fifo", "reservoir", "random", "kcenter", "importance"] = "importance"
    lazy_interval: int = check(positive, 1)
    # the importance policy's online output (fedlight.engine.parts.sofed.importance_score.ScoreHead):
    # SOFed eq. 3's online prediction, or the online projection
    score: Literal["prediction", "projection"] = "prediction"


@dataclass
class ExchangeConfig:
    """Device-to-device data exchange (CF-CL); needs ``local.iterations`` (iteration schedule)."""

    policy: Literal["none", "smart", "uniform"] = "none"
    graph: Literal["rgg", "ring", "complete"] = "rgg"
    avg_degree: float = check(positive, 3.0)
    reserve: int = check(positive, 500)  # K_reserve: points pushed to each neighbour
    approx: int = check(positive, 1000)  # K_approx: a transmitter's candidates per aggregation period
    clusters: int = check(positive, 4)  # K-means++ clusters of the pull
    pull_size: int = check(positive, 100)  # n: points each neighbour sends per pull
    pull_every: int = check(positive, 10)  # Tp, in SGD iterations
    kmeans_iters: int = check(positive, 100)  # Lloyd iterations of the push K-means
    # eq. 10's model for a pull inside a period: the period's global model, or the receiver's latest
    # local model (Fig. 3(e); sent to each neighbour at every such pull, counted as d2d float bytes)
    importance_model: Literal["global", "local"] = "global"


@dataclass
class NewDeviceConfig:
    """LG-FedAvg sec. 3.2 / Table 3: a device with rotated data arriving online (off unless ``rotation``)."""

    rotation: float | None = None  # degrees the new device's images are turned (the paper: 90); None: no device
    train: int = check(positive, 3000)  # its training images, drawn from the training set (sec. 7.2: 3,000)
    test: int = check(positive, 500)  # its test images, drawn from the test set (sec. 7.2: 500)
    goal_acc: float = check(probability, 0.975)  # it arrives after the original devices' mean accuracy reaches this
    fraction: float = check(probability, 0.0)  # p: share of the original devices that train beside it (0: none)


@dataclass
class ModelConfig:
    backbone: str = "small_cnn"  # a name of registry.BACKBONES (packages add names: fedlight.backbones)


@dataclass
class ViewsConfig:
    """Batched view augmentation (SimCLR / BYOL style); ``*_p`` lists hold one entry per view."""

    crop_min_scale: float = check(fraction, 0.2)
    flip_p: float = check(probability, 0.5)
    jitter_p: float = check(probability, 0.8)
    brightness: float = check(non_negative, 0.4)
    contrast: float = check(non_negative, 0.4)
    saturation: float = check(non_negative, 0.4)
    hue: float = check(lambda v: None if 0 <= v <= 0.5 else "must be in [0, 0.5]", 0.1)
    grayscale_p: float = check(probability, 0.2)
    blur_p: list[float] = check(probabilities, default_factory=lambda: [0.0, 0.0])
    solarize_p: list[float] = check(probabilities, default_factory=lambda: [0.0, 0.0])
    # draw every view's parameters of a batch in one call on the images' device and make the views
    # as one batch (fedlight/data/views.py): the same views for a seed on the same device type only;
    # null: on where the run's device is CUDA (no host-to-device copies per view), off on the CPU
    on_device: bool | None = None


# the readings ``eval.readings`` may name (fedlight.eval.metric_names.READINGS; docs/reading-a-run.md)
Reading = Literal["rankme", "spectrum", "alignment", "uniformity", "embedding_std", "client_knn", "drift"]


@dataclass
class EvalConfig:
    every: int = check(positive, 1)
    label_fraction: float = check(fraction, 1.0)
    extra_label_fractions: list[float] = check(
        lambda v: None if all(0 < f <= 1 for f in v) else "every entry must be in (0, 1]", default_factory=list)
    knn_k: int = check(positive, 200)
    knn_temperature: float = check(positive, 0.1)
    probe_epochs: int = check(positive, 100)
    projector_samples: int = check(non_negative, 1000)
    local_test: bool = False  # LG-FedAvg's local / new test over every client's model (engine/parts/lg_fedavg/local_tester.py)
    # label-free readings and client views of every evaluation (all but drift: it costs a forward pass per client)
    readings: list[Reading] = field(default_factory=lambda: ["rankme", "spectrum", "alignment", "uniformity",
                                                             "embedding_std", "client_knn"])
    reading_samples: int = check(at_least(2), 256)  # test images whose two views give alignment and uniformity
    finetune: list[float] = check(  # label fractions of the fine-tuning evaluation (fedlight/eval/finetune.py)
        lambda v: None if all(0 < f <= 1 for f in v) else "every entry must be in (0, 1]", default_factory=list)
    finetune_epochs: int = check(positive, 5)
    # the collapse alarm (fedlight/eval/collapse.py): RankMe below collapse_rankme, or the embedding std times
    # sqrt(D) below collapse_std, at collapse_patience evaluations in a row; collapse_stop ends the run there
    collapse_rankme: float = check(non_negative, 2.0)
    collapse_std: float = check(non_negative, 0.05)
    collapse_patience: int = check(positive, 2)
    collapse_stop: bool = False


@dataclass
class FabricConfig:
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = "auto"
    devices: int = check(positive, 1)
    num_nodes: int = check(positive, 1)
    precision: Literal["32-true", "16-mixed", "bf16-mixed", "64-true"] = "32-true"
    threads: int | None = check(positive, None)  # intra-op threads of a process (None: torch's default)
    # worker models per process, training the round's clients side by side in threads that
    # share ``threads``: on a CPU, small local batches keep one model from using every core
    # (fedlight.engine.loop.workers; the cross-device rounds in BENCHMARKS.md)
    workers: int = check(positive, 1)
    # NHWC images and conv weights: oneDNN's fast path on CPU (1.25-1.5x per step of the
    # 3-layer CNN, benchmarks/micro.py) and tensor cores' layout on GPU
    channels_last: bool = True
    # minutes every rank of a multi-process run may wait for the others to join (engine/run/rendezvous.py);
    # past it, each exits in one line naming MASTER_ADDR:MASTER_PORT; later collectives keep 30 min
    # (0.6 s to a week: torch's timeout is a timedelta, which 1e300 minutes overflows)
    rendezvous_timeout_min: float = check(lambda v: None if 0.01 <= v <= 10080 else "must be in [0.01, 10080]", 10.0)


@dataclass
class FaultsConfig:
    """Simulated client faults, drawn per (seed, round, client) (``fedlight.engine.loop.client_faults``)."""

    dropout: float = check(probability, 0.0)  # a sampled client fails before sending its update
    straggler: float = check(probability, 0.0)  # a sampled client finishes only part of its local work
    straggler_work: float = check(fraction, 0.5)  # the share of its local steps a straggler completes
    diverge: float = check(probability, 0.0)  # a sampled client's update turns NaN (injected divergence)
    max_bad_clients: int | None = check(non_negative, None)  # diverged clients a round tolerates (None: any)
    # a finite update can still have exploded (SGD at lr 1e30: loss 4.9, weights 2e29): a client whose
    # upload's norm is over this many times the global model's has diverged too
    max_update_ratio: float = check(positive, 1000.0)
    # Byzantine clients (fedlight/attacks/, docs/attacks.md): a share of the clients send, instead of their update,
    # the update reversed and scaled (sign_flip), Gaussian noise (noise), one shared vector (collude), the benign
    # mean less z standard deviations (alie) or the benign mean reversed (ipm), or train on flipped labels
    # y -> C - 1 - y (labels: a fixed set, supervised methods); packages add names (fedlight.attacks)
    attack: str = "none"
    attackers: float = check(probability, 0.0)  # the share of the clients that attack
    attack_scale: float = check(positive, 10.0)  # s of sign_flip, noise, collude: -s x update, s x N(0, I), s x v
    attackers_per_round: bool = False  # re-draw the attackers each round (else one fixed set)
    # the attack's constructor options, typed and checked like method.* (e.g. {z: 1.0} for alie, {epsilon: 100} for ipm)
    attack_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClockConfig:
    """The virtual clock (docs/time.md): every client trip's simulated length, who is online when, and a
    synchronous round's deadline and over-selection; off (rounds only) unless ``devices`` is set.
    fedlight/clock/devices.py checks how the keys go together."""

    devices: Literal["none", "fixed", "uniform", "lognormal", "tiers", "trace"] = "none"
    seconds_per_sample: float = check(non_negative, 0.001)  # fixed; uniform's low end; lognormal's median
    max_seconds_per_sample: float | None = check(non_negative, None)  # uniform's high end
    sigma: float = check(non_negative, 1.0)  # lognormal's log-spread
    # tiers' device classes: [{share: 0.5, seconds_per_sample: 0.002, up_mbps: 5, down_mbps: 20, latency_s: 0.1}, ...]
    tiers: list[dict[str, Any]] = field(default_factory=list)
    up_mbps: float = check(positive, 10.0)
    down_mbps: float = check(positive, 50.0)
    latency_s: float = check(non_negative, 0.05)  # each way
    trace: str | None = None  # a JSON trace file (devices: trace, availability: trace; docs/time.md)
    availability: Literal["always", "markov", "trace"] = "always"
    online_s: float = check(positive, 3600.0)  # markov: mean online period
    offline_s: float = check(positive, 3600.0)  # markov: mean offline period
    deadline_s: float | None = check(positive, None)  # a synchronous round drops clients that land later
    over_selection: float = check(non_negative, 0.0)  # a synchronous round samples this share more, keeps the first


@dataclass
class AsynchronyConfig:
    """An asynchronous server on the virtual clock (docs/time.md; needs ``clock.devices``): FedBuff (Nguyen
    et al., AISTATS 2022) or FedAsync (Xie et al. 2019); a round is then one server step."""

    mode: Literal["sync", "fedbuff", "fedasync"] = "sync"
    concurrency: int = check(positive, 10)  # clients in flight at once
    buffer: int | None = check(positive, None)  # FedBuff's K (None: 10)
    server_lr: float = check(positive, 1.0)  # FedBuff's eta_g
    alpha: float = check(fraction, 0.6)  # FedAsync's mixing weight
    # s(tau): constant 1; polynomial (1 + tau)^-a (FedBuff's 1/sqrt(1 + tau) at a = 0.5); hinge 1 up to b, then
    # 1 / (a (tau - b) + 1) (Xie et al. sec. 5.2)
    staleness: Literal["constant", "polynomial", "hinge"] = "polynomial"
    staleness_a: float = check(non_negative, 0.5)
    staleness_b: float = check(non_negative, 4.0)


def recipe_keys(keys: list[str]) -> str | None:
    """Dotted recipe keys or whole sections (``local.lr``, ``clients``), e.g. the hparams a run lists."""
    for key in keys:
        problem = key_problem(key)
        if problem:
            return f"lists '{key}', which is no recipe key ({problem})"
    return None


@dataclass
class RunConfig:
    dir: str | None = None
    # the recipe keys (or sections) the run's hparams list in TensorBoard and the other loggers; a sweep sets
    # the ones it varies, with method.name and seed (fedlight/sweep/tensorboard_view.py); unset: every key the
    # run uses (fedlight/engine/output/tensorboard.py)
    hparams: list[str] | None = check(recipe_keys, None)
    min_free_mb: int = check(non_negative, 256)  # refuse to start with less free disk (checkpoints x 2 + events)
    # where clients' private state lives (engine/loop/client_store.py): auto = in memory while every client's
    # state fits in state_cache_mb, else on disk (a file per client and round, checkpoints grow with the round)
    client_state: Literal["auto", "memory", "disk"] = "auto"
    state_cache_mb: int = check(positive, 256)  # the disk store's in-memory cache of recently used states
    # a payloads-contract server (median, Krum, ...) holds every payload of a round on each rank's CPU:
    # a round whose clients x payload size is over this many MiB is refused before any training
    payload_budget_mb: int = check(positive, 2048)
    # write the checkpoint every N rounds (an asynchronous run: server steps); the last round, a stop (SIGTERM,
    # SIGUSR1, Ctrl-C) and a failed evaluation always write one. A kill between two resumes from the earlier
    # and trains the rounds after it again, ending bit for bit where a straight run ends (docs/run-folder.md)
    checkpoint_every: int = check(positive, 1)


@dataclass
class Recipe:
    """A resolved recipe: everything one ``fedlight fit`` needs."""

    name: str = check(folder_name, "run")  # the run folder's name, runs/<name>, unless run.dir is set
    # the sweep arm this run belongs to (``fedlight sweep --arm NAME=...``; a label: nothing reads it but
    # ``fedlight report``, which groups runs by it)
    arm: str | None = None
    seed: int = check(seed_value, 0)
    rounds: int = check(positive, 10)
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    exchange: ExchangeConfig = field(default_factory=ExchangeConfig)
    new_device: NewDeviceConfig = field(default_factory=NewDeviceConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    views: ViewsConfig = field(default_factory=ViewsConfig)
    method: dict[str, Any] = field(default_factory=lambda: {"name": "simclr"})
    server: dict[str, Any] = field(default_factory=lambda: {"name": "fedavg"})
    # round plug-ins from other packages (entry point ``fedlight.plugins``): name -> the keyword
    # arguments of its constructor, typed and checked like ``method.*`` (``fedlight.registry``)
    plugins: dict[str, Any] = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    clock: ClockConfig = field(default_factory=ClockConfig)
    asynchrony: AsynchronyConfig = field(default_factory=AsynchronyConfig)
    # where each round's scalars and the run's hparams go (fedlight/engine/output/loggers.py): Lightning's
    # TensorBoard (also the pictures), CSV, Weights & Biases (offline) or MLflow (a file store) logger,
    # each writing in the run folder from rank 0; wandb and mlflow need `pip install 'fedlight[loggers]'`
    loggers: list[Literal["tensorboard", "csv", "wandb", "mlflow"]] = check(
        distinct, default_factory=lambda: ["tensorboard"])
    run: RunConfig = field(default_factory=RunConfig)

    @property
    def run_dir(self) -> str:
        return self.run.dir or f"runs/{self.name}"


def key_problem(key: str, sections: bool = True) -> str | None:
    """Why dotted ``key`` names no recipe key (None if it does; with ``sections``, a whole section such as
    ``clients`` counts). Keys under ``method``, ``server`` and ``plugins`` are any here: the chosen class
    checks them (``fedlight.registry``)."""
    cls: Any = Recipe
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = sorted(f.name for f in dataclasses.fields(cls))
        if part not in fields:
            where = ".".join(parts[:i])
            return f"valid keys{f' under {where}' if where else ''}: {', '.join(fields)}"
        cls = typing.get_type_hints(cls)[part]
        if typing.get_origin(cls) is dict:  # method.* / server.* / plugins.*: any key, typed by the class
            if sections or i + 1 < len(parts):
                return None
            return f"'{key}' is a section: name one of its keys, e.g. {key}.name"
        if not dataclasses.is_dataclass(cls) and i + 1 < len(parts):
            return f"'{'.'.join(parts[:i + 1])}' is a value, not a section"
    return f"'{key}' is a section: name one of its keys" if dataclasses.is_dataclass(cls) and not sections else None
