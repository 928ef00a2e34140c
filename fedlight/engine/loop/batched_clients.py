"""Several clients trained as one step (``local.batched_clients``): the batched twin of ``local_loop``.

One by one (``local_loop.train_client``) a round steps the worker model once per batch of each
client; on a CPU with small local batches most of such a step is the dispatch of many small
kernels, paid again for every client. Here K clients' parameters, buffers and optimizer states
are stacked once along a new first dimension (K, ...) and stay stacked for all their steps; a
step trains every client that has a batch:

* the losses: ``torch.func.vmap`` over ``torch.func.functional_call`` of the method's own
  ``training_step``, each client on its own slice of the stacked tensors (its convolutions
  become one grouped convolution). BatchNorm's running statistics are buffers stacked like the
  rest, so each client's batch updates its own slice, as it would one by one;
* the gradients: one backward of the summed losses. A client's loss depends on its own slice
  only, so each slice's gradient is its client's (``vmap(grad_and_value(...))`` gives the same
  numbers; on the CPU proxy of ``benchmarks/batched_clients.py``, 32 clients at batch 8, its step
  took 1.2-1.4x as long);
* the update: the method's own optimizer (``configure_optimizers``), rebuilt over the stacked
  tensors. SGD, Adam and AdamW update each element from its own gradient and state, and every
  client with a batch at step t has taken t steps before it, so one such optimizer over (K, ...)
  tensors is K optimizers;
* ``on_train_batch_end`` once, with the module's tensors swapped for the stacked ones (BYOL's
  EMA of its target network is elementwise).

What stays per client is what one by one does per client: its shuffles and views, drawn from
its own generator in the same order (``local_loop.client_batches``; a step's views of all its
clients are then made in one ``ViewMaker.views_of_many`` call, the same views), and ``on_train_start`` /
``on_train_end`` on the worker model holding that client's state. Clients of different sizes
take different numbers of steps, and an epoch may end in a shorter batch: a step runs the
clients that have a batch in groups of one batch size, and a client past its last step is
copied out of the stack before the next step moves its slice (an optimizer step without a
gradient still applies SGD's momentum). Within float tolerance the result is the one-by-one
result (``tests/test_batched_clients.py``). A method says whether its step allows this
(``FederatedModule.batch_refusal``), a client schedule whether it trains clients this way
(``ClientSchedule.batch_refusal``, ``train_together``).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from lightning.fabric import Fabric
from torch import nn
from torch.func import functional_call, vmap

from fedlight.data.views import ViewMaker
from fedlight.engine.loop.interfaces import ClientSchedule, ClientWork, State
from fedlight.engine.loop.local_loop import LocalResult, client_batches
from fedlight.engine.output.progress import step_done
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule

ELEMENTWISE_OPTIMIZERS = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)
PREFIX = "module."  # the method's tensor names under ``_Call``


@dataclass
class ClientPlan:
    """One client's local work: its sample indices (n,) on the device, the generator keyed by
    (seed, round, client) that shuffles them and draws its views, and its step budget (None: all)."""

    indices: torch.Tensor
    generator: torch.Generator
    max_steps: int | None = None


@dataclass
class TrainedClient:
    """A client's final parameters and buffers (keyed as ``named_parameters`` / ``named_buffers``)
    and its loss and steps."""

    tensors: State
    result: LocalResult


def batch_refusal(module: FederatedModule) -> str | None:
    """Why ``module``'s clients cannot be trained as one step (its own ``batch_refusal``, or an
    optimizer that does not update each element on its own), or None where they can."""
    if module.batch_refusal:
        return module.batch_refusal
    optimizer = module.configure_optimizers()
    if not isinstance(optimizer, ELEMENTWISE_OPTIMIZERS):
        return f"its optimizer {type(optimizer).__name__} is not one of SGD, Adam, AdamW (elementwise updates)"
    return None


def refused(size: int, part: str, reason: str) -> UserError:
    """The one-line error for ``local.batched_clients=size`` with a ``part`` (``method.name=moon``) that
    cannot train clients as one step, for ``reason``."""
    return UserError(f"local.batched_clients={size} trains clients as one step, which {part} cannot: {reason}; "
                     "drop local.batched_clients")


class _Call(nn.Module):
    """Runs ``fn(*args)``: what ``functional_call`` runs with the method's tensors swapped for others."""

    def __init__(self, module: FederatedModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def _own_tensors(module: nn.Module) -> State:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


class _ClientStack:
    """K clients' tensors stacked (K, ...) for all their steps, and the optimizer that steps them.

    Args:
        module: the worker model.
        start: ``start(slot)`` loads the client of a slot into ``module``; ``on_train_start`` then
            runs on it and its tensors are copied into the slot.
        clients: K.
    """

    def __init__(self, module: FederatedModule, start: Callable[[int], None], clients: int) -> None:
        self.module, self.call, self.clients = module, _Call(module), clients
        self.tensors = {PREFIX + n: torch.empty((clients, *t.shape), dtype=t.dtype, device=t.device)
                        for n, t in _own_tensors(module).items()}
        self.buffers = [PREFIX + n for n, _ in module.named_buffers()]
        for slot in range(clients):
            start(slot)
            module.train()
            module.on_train_start()
            with torch.no_grad():
                for n, t in _own_tensors(module).items():
                    self.tensors[PREFIX + n][slot].copy_(t)
        self.optimizer = self._optimizer()
        self.leaves = [p for group in self.optimizer.param_groups for p in group["params"]]

    def _optimizer(self) -> torch.optim.Optimizer:
        """The method's optimizer, same class and settings, over the stacked tensors of the parameters
        it steps (which become leaves that take gradients)."""
        template = self.module.configure_optimizers()
        names = {id(p): n for n, p in self.module.named_parameters()}
        groups = []
        for group in template.param_groups:
            params = [self.tensors[PREFIX + names[id(p)]].requires_grad_() for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
        cls = type(template)
        accepted = inspect.signature(cls).parameters  # AdamW's defaults name Adam's decoupled_weight_decay
        return cls(groups, **{k: v for k, v in template.defaults.items() if k in accepted})

    def take(self, slot: int) -> State:
        """A copy of one client's tensors, keyed as the module's."""
        return {n[len(PREFIX):]: t[slot].detach().clone() for n, t in self.tensors.items()}

    def step(self, batches: dict[int, tuple[list[torch.Tensor], torch.Tensor]], step: int,
             autocast: Callable[[], Any]) -> torch.Tensor:
        """One optimizer step of the clients in ``batches`` (slot: (views, labels) of B samples) in
        groups of one B; returns the (K,) losses, 0 for a slot without a batch."""
        by_size: dict[int, list[int]] = {}
        for slot, (_, labels) in batches.items():
            by_size.setdefault(len(labels), []).append(slot)
        device = next(iter(self.tensors.values())).device
        total, losses = torch.zeros((), device=device), torch.zeros(self.clients, device=device)
        for slots in by_size.values():
            views = [torch.stack(v) for v in zip(*(batches[s][0] for s in slots))]  # each (G, B, C, H, W)
            labels = torch.stack([batches[s][1] for s in slots])
            index = torch.tensor(slots, device=device)
            with autocast():
                out = self._losses(index, len(slots) == self.clients, views, labels, step)
            total = total + out.sum()
            losses.index_copy_(0, index, out.detach().float())
        self.optimizer.zero_grad(set_to_none=True)
        total.backward(inputs=self.leaves)
        self.optimizer.step()
        with torch.no_grad():  # on_train_batch_end once, on the stacked tensors
            functional_call(self.call, self.tensors, (lambda: self.module.on_train_batch_end(losses, None, step),))
        return losses

    def _losses(self, slots: torch.Tensor, whole: bool, views: list[torch.Tensor], labels: torch.Tensor,
                step: int) -> torch.Tensor:
        """(G,) losses of the clients in ``slots`` (every slot when ``whole``) on their (G, B, ...)
        batches; their BatchNorm buffers updated in the stack."""
        tensors = self.tensors if whole else {n: t[slots] for n, t in self.tensors.items()}

        def loss(own: State, views: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
            return functional_call(self.call, own, (lambda v, y: self.module.training_step((v, y), step), views, labels))

        out = vmap(loss)(tensors, views, labels)
        if not whole:
            with torch.no_grad():
                for n in self.buffers:
                    self.tensors[n].index_copy_(0, slots, tensors[n])
        return out


def train_clients(fabric: Fabric, module: FederatedModule, start: Callable[[int], None], plans: list[ClientPlan],
                  images: torch.Tensor, labels: torch.Tensor, views: ViewMaker, epochs: int,
                  batch_size: int) -> list[TrainedClient]:
    """Train K clients as one step each, ``epochs`` epochs of ``batch_size`` (``local_loop.train_client``'s
    arguments, one ``ClientPlan`` per client).

    Args:
        fabric: devices and precision (the forward runs under ``fabric.autocast``).
        module: the worker model; it holds the last client's starting state afterwards.
        start: ``start(slot)`` loads the client of ``plans[slot]`` into ``module``.
        plans: each client's samples, generator and step budget.
        images: (N, C, H, W) uint8 images on the device; labels: (N,) labels on the device.
        views: makes the augmented views.
        epochs: local epochs E; batch_size: local batch size B.

    Returns:
        each client's final tensors and loss, in ``plans``' order.
    """
    stack = _ClientStack(module, start, len(plans))
    batches = [client_batches(p.indices, epochs, batch_size, p.generator, p.max_steps) for p in plans]
    finals: list[State] = [{} for _ in plans]
    loss_sums, steps = torch.zeros(len(plans), device=images.device), [0] * len(plans)
    active, step = list(range(len(plans))), 0
    while active:
        drawn = {slot: next(batches[slot], None) for slot in active}
        for slot in (s for s in active if drawn[s] is None):  # past its last step: out before the next moves it
            finals[slot] = stack.take(slot)
        active = [s for s in active if drawn[s] is not None]
        if active:  # every client's views from its own generator, made in one call (ViewMaker.views_of_many)
            made = views.views_of_many([images[drawn[s]] for s in active], module.num_views,
                                       [plans[s].generator for s in active])
            loss_sums += stack.step({s: (v, labels[drawn[s]]) for s, v in zip(active, made)}, step, fabric.autocast)
        for slot in active:
            steps[slot] += 1
            step_done()
        step += 1
    return [TrainedClient(finals[s], LocalResult(float(loss_sums[s]), steps[s])) for s in range(len(plans))]


def finish_client(module: FederatedModule, tensors: State) -> None:
    """Put a trained client's final ``tensors`` into ``module`` and end its training (``on_train_end``)."""
    with torch.no_grad():
        for n, t in _own_tensors(module).items():
            t.copy_(tensors[n])
    module.on_train_end()


class BatchedClients:
    """One worker model's answering clients of a round, trained ``size`` at a time in their order
    (``schedule.train_together``) as the runner reaches the first of each group; each client's
    result is handed out when the runner reaches it, with ``module`` then holding its final state.

    Args:
        schedule: trains a group (``train_together``).
        module: the worker model.
        size: clients a group (``local.batched_clients``).
        round_: the round.
        clients: (client, share of its work) of every answering client of the worker model, in order.
        start: ``start(client)`` loads a client's starting state into ``module``.
        generator: ``generator(client)``, keyed by (seed, round, client).
    """

    def __init__(self, schedule: ClientSchedule, module: FederatedModule, size: int, round_: int,
                 clients: list[tuple[int, float]], start: Callable[[int], None],
                 generator: Callable[[int], torch.Generator]) -> None:
        self.schedule, self.module, self.size, self.round = schedule, module, size, round_
        self.clients, self.start, self.generator = clients, start, generator
        self.ready: dict[int, tuple[ClientWork, State, float]] = {}

    def work(self, client: int) -> tuple[ClientWork, float]:
        """``client``'s work and its share of its group's seconds, ``module`` holding its final state."""
        if client not in self.ready:
            at = [c for c, _ in self.clients].index(client)
            group = self.clients[at:at + self.size]
            ids = [c for c, _ in group]
            started = time.perf_counter()
            done = self.schedule.train_together(self.module, ids, self.round, [self.generator(c) for c in ids],
                                                [w for _, w in group], self.start)
            seconds = (time.perf_counter() - started) / len(group)
            self.ready = {c: (work, tensors, seconds) for c, (work, tensors) in zip(ids, done)}
        work, tensors, seconds = self.ready.pop(client)
        finish_client(self.module, tensors)
        return work, seconds
