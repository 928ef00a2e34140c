"""The contract between a local objective and the federated engine (docs/method_contract.md).

A method is a LightningModule that the engine drives with an explicit Fabric loop, calling
its Lightning hooks in Lightning's order: ``on_train_start``, then per batch
``training_step`` -> backward -> ``on_before_optimizer_step`` -> step ->
``on_train_batch_end``, and ``on_train_end``. It declares which of its sub-modules are
communicated by the server (``shared_modules``), which are private to the client and
persist between the client's rounds (``private_modules``), and which are rebuilt from
those at every round (``transient_modules``, e.g. MOON's frozen global model). What the
client uploads is ``payload()`` (by default its shared state).

The base class knows no paper. What one paper's part asks of a method beyond it is an optional
hook behind a named capability, next to the part that calls it: SOFed's importance policy asks
for ``importance_score`` (``fedlight.engine.parts.sofed.importance_score.ImportanceScoring``),
the round loop for ``update_split`` where a method's shared / private split changes between
rounds (``fedlight.engine.loop.interfaces.ChangingSplit``, LG-FedAvg).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import lightning as L
import torch
from torch import nn


@dataclass
class OptimizerSpec:
    """The local optimizer (``local.*`` keys)."""

    name: Literal["adam", "sgd", "adamw"] = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 1e-6

    def build(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """The optimizer over ``params``, fused (one kernel for every tensor) where torch has the kernel.

        torch's default on the CPU runs the update tensor by tensor from Python: for the 3-layer
        CNN's 15 tensors an Adam step takes 1.94 ms that way and 0.58 ms fused
        (``benchmarks/micro.py``), and most of the former holds the GIL that ``fabric.workers``
        threads share.
        """
        fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in params) or None
        if self.name == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                                   fused=fused)
        cls = torch.optim.Adam if self.name == "adam" else torch.optim.AdamW
        return cls(params, lr=self.lr, weight_decay=self.weight_decay, fused=fused)


Batch = tuple[list[torch.Tensor], torch.Tensor]
"""What ``training_step`` receives: ``num_views`` augmented views (B, C, H, W) and labels (B,)."""

class FederatedModule(L.LightningModule):
    """Base class of local objectives: every hook the engine calls on it, when, with what, and
    the optional hooks a paper's part asks for are in docs/method_contract.md.

    Args:
        backbone: encoder with a ``feature_dim`` attribute, (B, C, H, W) -> (B, D).
        optim: the local optimizer.

    Attributes:
        batch_refusal: why the engine cannot train several clients of this method as one step
            (``local.batched_clients``, ``fedlight.engine.loop.batched_loop``), or None where it can.
            A method may set None when (1) ``training_step`` reads nothing per client but its
            parameters, buffers and the batch (no Python branch on a tensor's value, no other
            attribute set per client, no ``requires_grad``, which reads False there): it runs
            under ``torch.func.vmap`` on each client's tensors;
            (2) ``on_train_batch_end`` changes its tensors elementwise: it runs once a step with every
            tensor stacked over the clients (K, ...), e.g. BYOL's EMA of its target network;
            (3) ``on_before_optimizer_step`` does nothing (it is not called). ``on_train_start`` and
            ``on_train_end`` run on each client's own state, as one by one.
    """

    shared_modules: tuple[str, ...] = ("backbone",)
    private_modules: tuple[str, ...] = ()
    transient_modules: tuple[str, ...] = ()
    num_views: int = 2
    uses_labels: bool = False
    has_classifier: bool = False
    # why ``training_step`` cannot be compiled (``local.compile``), said after the class name; None: it can
    compile_refusal: str | None = None
    batch_refusal: str | None = ("its class does not declare that one step can train several clients "
                                 "(FederatedModule.batch_refusal says when it may)")

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.optim = optim or OptimizerSpec()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Representation used for evaluation: backbone output (B, D)."""
        return self.backbone(x)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-length embedding (B, d) that the parts comparing samples by cosine similarity use:
        FLESD's public-set similarities, SOFed's importance score where the method has none of its
        own, CF-CL's pulls (Triplet's). Default: the unit-length features (B, D)."""
        return torch.nn.functional.normalize(self.features(x), dim=1)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits (B, num_classes), for methods with ``has_classifier``."""
        raise NotImplementedError(f"{type(self).__name__} has no classifier")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optim.build([p for p in self.parameters() if p.requires_grad])

    def reset_private_state(self) -> None:
        """Initialise private modules for a client seen for the first time (default: nothing)."""

    def _module_state(self, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
        return {f"{n}.{k}": v for n in names for k, v in self.get_submodule(n).state_dict().items()}

    def shared_state(self) -> dict[str, torch.Tensor]:
        """The communicated tensors (live references), keyed like ``state_dict``."""
        return self._module_state(self.shared_modules)

    def private_state(self) -> dict[str, torch.Tensor]:
        """The client's persistent private tensors (live references)."""
        return self._module_state(self.private_modules)

    def transient_state(self) -> dict[str, torch.Tensor]:
        """Tensors rebuilt every round from shared / private state."""
        return self._module_state(self.transient_modules)

    def undeclared_state(self) -> list[str]:
        """``state_dict`` keys under none of ``shared_modules``, ``private_modules`` and
        ``transient_modules``: the engine would neither send, keep nor rebuild them."""
        declared = {**self.shared_state(), **self.private_state(), **self.transient_state()}
        return sorted(set(self.state_dict()) - set(declared))

    def unsaved_state(self) -> list[str]:
        """Non-persistent buffers (``register_buffer(..., persistent=False)``) outside ``transient_modules``:
        left out of ``state_dict``, so no client would keep its own copy and no checkpoint would save them
        (lightly's memory banks: a naive NNCLR's support set). Buffers of no elements, and a memory bank of
        size 0 (lightly's, an empty ``bank`` beside its pointer), keep nothing and are not listed."""
        transient = tuple(f"{name}." for name in self.transient_modules)
        found = []
        for prefix, module in self.named_modules():
            bank = getattr(module, "bank", None)
            if isinstance(bank, torch.Tensor) and bank.numel() == 0:
                continue
            for name in module._non_persistent_buffers_set:  # noqa: SLF001 (torch keeps no public list of them)
                key, buffer = f"{prefix}.{name}" if prefix else name, module._buffers.get(name)  # noqa: SLF001
                if buffer is not None and buffer.numel() and not key.startswith(transient):
                    found.append(key)
        return sorted(found)

    def payload(self) -> dict[str, torch.Tensor]:
        """What the client uploads after local training (default: its shared state)."""
        return self.shared_state()

    def load_partial(self, state: dict[str, torch.Tensor]) -> None:
        """Copy ``state`` (a subset of ``state_dict`` keys) into this module in place."""
        own = self.state_dict()
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v)
