import re
from pathlib import Path

import pytest
import torch

from fedlight.methods.barlow_twins import BarlowTwins
from fedlight.methods.byol import BYOL
from fedlight.methods.dino import DINO
from fedlight.catalog import BACKBONES
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule, OptimizerSpec
from fedlight.methods.moco import MoCo
from fedlight.methods.simclr import SimCLR, info_nce
from fedlight.methods.simsiam import SimSiam
from fedlight.methods.supervised import Supervised
from fedlight.methods.swav import SwAV
from fedlight.methods.vicreg import VICReg
from fedlight.models.backbones import ResNet18Cifar, SmallCNN

BATCH = ([torch.randn(6, 1, 12, 12), torch.randn(6, 1, 12, 12)], torch.arange(6) % 3)


@pytest.mark.parametrize("make", [
    lambda: SimCLR(SmallCNN(1), hidden_dim=16, output_dim=8),
    lambda: SimCLR(SmallCNN(1), hidden_dim=16, output_dim=8, loss="infonce"),
    lambda: BYOL(SmallCNN(1), hidden_dim=16, output_dim=8),
    lambda: Supervised(SmallCNN(1), num_classes=3),
    lambda: SimSiam(SmallCNN(1), hidden_dim=16, output_dim=16, predictor_hidden_dim=4),
    lambda: MoCo(SmallCNN(1), hidden_dim=16, output_dim=8, queue_size=12),
    lambda: BarlowTwins(SmallCNN(1), hidden_dim=16, output_dim=16),
    lambda: VICReg(SmallCNN(1), hidden_dim=16, output_dim=16),
    lambda: SwAV(SmallCNN(1), hidden_dim=16, output_dim=8, n_prototypes=4),
    lambda: DINO(SmallCNN(1), hidden_dim=16, bottleneck_dim=4, output_dim=8),
])
def test_each_method_trains_and_declares_all_its_state(make) -> None:
    m = make()
    covered = set(m.shared_state()) | set(m.private_state())
    assert covered == set(m.state_dict())
    before = {k: v.clone() for k, v in m.shared_state().items()}
    opt = m.configure_optimizers()
    loss = m.training_step(BATCH, 0)
    loss.backward()
    opt.step()
    m.on_train_batch_end(loss, BATCH, 0)
    assert torch.isfinite(loss)
    assert any(not torch.equal(before[k], v) for k, v in m.shared_state().items())


def test_info_nce_hand_computed() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss = info_nce(q, q, temperature=1.0)
    expected = -torch.log(torch.exp(torch.tensor(1.0)) / (torch.exp(torch.tensor(1.0)) + 1))
    assert torch.allclose(loss, expected)


@pytest.mark.parametrize("make", [
    lambda: BYOL(SmallCNN(1), hidden_dim=16, output_dim=8, momentum=0.5),
    lambda: MoCo(SmallCNN(1), hidden_dim=16, output_dim=8, momentum=0.5),
    lambda: DINO(SmallCNN(1), hidden_dim=16, bottleneck_dim=4, output_dim=8, momentum=0.5),
])
def test_a_private_target_starts_as_online_copy_and_follows_by_ema(make) -> None:
    m = make()
    with torch.no_grad():
        for p in m.backbone.parameters():
            p.add_(1.0)
    m.reset_private_state()
    assert all(torch.equal(a, b) for a, b in zip(m.backbone.parameters(), m.backbone_momentum.parameters()))
    w_target = next(m.backbone_momentum.parameters()).clone()
    with torch.no_grad():
        next(m.backbone.parameters()).add_(2.0)
    m.on_train_batch_end(None, None, 0)
    assert torch.allclose(next(m.backbone_momentum.parameters()), w_target + 1.0)  # 0.5*t + 0.5*(t+2)


def test_optimizer_spec() -> None:
    p = [torch.nn.Parameter(torch.zeros(1))]
    assert isinstance(OptimizerSpec("sgd", 0.1).build(p), torch.optim.SGD)
    assert isinstance(OptimizerSpec("adamw").build(p), torch.optim.AdamW)


def test_resnet18_cifar_stem() -> None:
    net = ResNet18Cifar(3)
    assert net.net.conv1.kernel_size == (3, 3) and isinstance(net.net.maxpool, torch.nn.Identity)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 512)


def _hand_byol() -> BYOL:
    """BYOL on 1 x 1 x 2 images whose networks are hand-set: f_o = f_t = flatten, g_o = g_t =
    identity, and the predictor q rotates by 90 degrees, (a, b) -> (-b, a)."""
    m = BYOL(SmallCNN(1, (2, 2, 2)), hidden_dim=8, output_dim=2)
    m.backbone, m.backbone_momentum = torch.nn.Flatten(), torch.nn.Flatten()
    m.projection_head, m.projection_head_momentum = torch.nn.Identity(), torch.nn.Identity()
    m.prediction_head = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        m.prediction_head.weight.copy_(torch.tensor([[0.0, -1.0], [1.0, 0.0]]))
    return m.eval()


def test_sofed_score_is_the_byol_loss_of_the_prediction_against_the_flipped_target() -> None:
    """SOFed eq. 3 by hand: x = (a, b), flip(x) = (b, a); prediction (-b, a) vs target (b, a)."""
    m = _hand_byol()
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]).view(3, 1, 1, 2)
    # cos((0, 1), (0, 1)) = 1, cos((-1, 1), (1, 1)) = 0, cos((-1, 0), (1, 0)) = -1
    assert torch.allclose(m.importance_score(x), torch.tensor([0.0, 1.0, 2.0]), atol=1e-6)
    per_sample_byol = torch.stack([2 + 2 * m.criterion(m.online(x[i:i + 1]), m.target(x[i:i + 1].flip(-1)))
                                   for i in range(3)])  # eq. 1: 2 - 2 cos, as training_step computes it
    assert torch.allclose(m.importance_score(x), per_sample_byol / 2, atol=1e-6)
    assert torch.allclose(m.importance_score(x, "prediction"), m.importance_score(x))
    # the option: the online projection (a, b) vs (b, a): cos 0, 1, 0
    assert torch.allclose(m.importance_score(x, "projection"), torch.tensor([1.0, 0.0, 1.0]), atol=1e-6)


def test_wrapped_byol_scores_as_byol() -> None:
    from fedlight.methods.fedprox import FedProx

    wrapped = FedProx(_hand_byol())
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]).view(3, 1, 1, 2)
    assert torch.allclose(wrapped.importance_score(x), torch.tensor([0.0, 1.0, 2.0]), atol=1e-6)
    assert torch.allclose(wrapped.importance_score(x, "projection"), torch.tensor([1.0, 0.0, 1.0]), atol=1e-6)


def test_a_method_without_its_own_score_gets_sofed_compatibility_rule() -> None:
    """Sec. III: 1 - cos(embed(x), embed(flip(x))). SimCLR with identity parts embeds x = (a, b) as
    (a, b) / |(a, b)|: (1, 0) vs (0, 1) -> 1, (1, 1) vs (1, 1) -> 0; ``buffer.score`` has nothing to pick."""
    from fedlight.engine.parts.sofed.importance_score import ImportanceScoring, importance_scorer
    from fedlight.engine.run.recipe_checks import check_score_head
    from fedlight.errors import UserError
    from fedlight.methods.fedprox import FedProx

    m = SimCLR(SmallCNN(1, (2, 2, 2)), hidden_dim=8, output_dim=2)
    m.backbone, m.projection_head = torch.nn.Flatten(), torch.nn.Identity()
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]).view(3, 1, 1, 2)
    for module in (m, FedProx(m)):  # the wrapper has no score of its own either: the rule on its objective's embed
        assert not isinstance(module, ImportanceScoring)
        for head in ("prediction", "projection"):
            assert torch.allclose(importance_scorer(module, head)(x), torch.tensor([1.0, 0.0, 1.0]), atol=1e-6)
    assert torch.allclose(importance_scorer(FedProx(_hand_byol()), "prediction")(x), torch.tensor([0.0, 1.0, 2.0]),
                          atol=1e-6)  # BYOL's own eq. 3, through the wrapper
    check_score_head(FedProx(_hand_byol()), "projection")  # BYOL has an online projection to pick
    with pytest.raises(UserError, match="buffer.score=projection.*SimCLR"):  # set-up refuses what would be ignored
        check_score_head(m, "projection")


def test_a_method_with_the_old_on_round_start_hook_is_refused() -> None:
    from fedlight import registry
    from fedlight.errors import UserError

    class OldLG(SimCLR):
        def on_round_start(self, round_: int, history: list) -> bool:
            return round_ == 2

    registry.check_declared(SimCLR(SmallCNN(1, (2, 2, 2)), hidden_dim=8, output_dim=2))
    with pytest.raises(UserError, match="OldLG defines on_round_start.*update_split"):
        registry.check_declared(OldLG(SmallCNN(1, (2, 2, 2)), hidden_dim=8, output_dim=2))


CONTRACT = Path(__file__).resolve().parents[1] / "docs/method_contract.md"


def _names(heading: str, column: int = 0) -> list[str]:
    """The cells of ``column`` of the table under ``## heading`` in docs/method_contract.md."""
    section = CONTRACT.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [line.strip("|").split("|")[column].strip() for line in section.splitlines() if line.startswith("| `")]


def test_the_contract_page_names_every_hook_and_the_base_class_carries_no_paper_hook() -> None:
    """docs/method_contract.md's tables are the base class's public methods and attributes (plus the Lightning
    hooks the engine calls), the optional hooks the wrapper forwards, each on its capability and not on the base
    class, with the built-in methods that define it, and the constructor arguments the registry fills."""
    import importlib

    import lightning as L

    from fedlight import registry
    from fedlight.methods.federated_module import FederatedModule
    from fedlight.methods.wrapper import ObjectiveWrapper

    own = {name: value for name, value in vars(FederatedModule).items() if not name.startswith("_")}
    hooks = {name.strip("`") for name in _names("Hooks the engine calls")}
    assert {name for name, value in own.items() if callable(value)} <= hooks
    assert hooks - set(own) <= set(dir(L.LightningModule))  # the rest are Lightning's own hooks
    assert {name.strip("`") for name in _names("Attributes the engine reads")} == {
        name for name, value in own.items() if not callable(value)}
    optional = dict(zip((n.strip("`") for n in _names("Optional hooks a part asks for")),
                        zip(_names("Optional hooks a part asks for", 1), _names("Optional hooks a part asks for", 5))))
    assert set(optional) == set(ObjectiveWrapper.forwarded_hooks) and not set(optional) & hooks
    for hook, (capability, methods) in optional.items():
        module, _, name = capability.strip("`").rpartition(".")
        assert hook in vars(getattr(importlib.import_module(module), name)), hook
        assert not hasattr(FederatedModule, hook), hook  # a paper's hook, off the base class
        having = {name for name in registry.METHODS.builtins if hasattr(registry.METHODS[name], hook)}
        assert having == set(re.findall(r"`(\w+)`", methods)), hook
    assert not hasattr(FederatedModule, "on_round_start")  # LG's former name for update_split
    assert {n.strip("`") for n in _names("Constructor arguments the engine fills")} == set(registry.SUPPLIED["method"])


class NaiveNNCLR(FederatedModule):
    """NNCLR as the docs' "Write a method" would lead one to write it: lightly's support set (a memory bank
    of non-persistent buffers) beside the shared backbone and projection head."""

    shared_modules = ("backbone", "projection")

    def __init__(self, backbone: torch.nn.Module, persistent: bool = False, declared: tuple[str, ...] = ()) -> None:
        from lightly.models.modules import NNMemoryBankModule

        super().__init__(backbone)
        self.projection = torch.nn.Linear(backbone.feature_dim, 8)
        self.memory = NNMemoryBankModule(size=(16, 8))
        if persistent:  # the fix the refusal names
            self.memory.register_buffer("bank", self.memory.bank)
            self.memory.register_buffer("bank_ptr", self.memory.bank_ptr)
        self.private_modules = declared


def test_state_in_non_persistent_buffers_is_refused_in_one_line_with_the_fix() -> None:
    """It passed the undeclared-state check (state_dict leaves such buffers out), so every client shared one
    support set and --resume lost it."""
    from fedlight.registry import check_declared

    backbone = BACKBONES["tiny_cnn"](1, 28)
    with pytest.raises(UserError, match=r"NaiveNNCLR keeps state in non-persistent buffers \(memory.bank, "
                                        r"memory.bank_ptr\).*declare their module in private_modules") as caught:
        check_declared(NaiveNNCLR(backbone))
    assert "\n" not in str(caught.value)
    fixed = NaiveNNCLR(backbone, persistent=True, declared=("memory",))
    check_declared(fixed)  # kept by each client, saved in its checkpoint like any private state
    assert set(fixed.private_state()) == {"memory.bank", "memory.bank_ptr"}


@pytest.mark.parametrize("method", [{"name": "simclr"}, {"name": "fedprox", "objective": "simclr"}])
def test_an_empty_memory_bank_and_fedproxs_anchors_are_no_unsaved_state(method: dict) -> None:
    """SimCLR's loss holds a memory bank of size 0 (nothing kept); FedProx's anchors are copied again as each
    client starts (a transient module)."""
    from fedlight.registry import check_method_state

    assert check_method_state(method, "small_cnn").unsaved_state() == []
