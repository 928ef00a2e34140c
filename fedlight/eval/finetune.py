"""Semi-supervised fine-tuning: the encoder and a linear head trained end to end on a few labels.

The other standard downstream reading beside the linear probe (Chen et al., SimCLR, ICML 2020, section
B.5; Grill et al., BYOL, NeurIPS 2020, section 4; EasyFL's FedSSL evaluation): 1% or 10% of the training
labels, class-balanced (``probes.label_subset``), train a copy of the encoder plus a new linear head;
its accuracy on the test split is the reading. The run's encoder is never touched.

The budget is small and fixed so that it can run at every evaluation: ``epochs`` passes over the
labelled share in batches of ``BATCH`` with Adam at ``LR`` and no augmentation. Its random draws (the
head's initial weights, the batch order) come from its own generator seeded by the run's seed, so a
fine-tune gives the same number for the same encoder on the same device, and draws nothing from the
generators the training and the probe use.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.nn.functional as F

from fedlight.eval.probes import accuracy

BATCH = 64
LR = 1e-3


def finetune_accuracy(module: torch.nn.Module, features: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
                      train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor,
                      num_classes: int, epochs: int, generator: torch.Generator,
                      chunk: int = 256) -> float:
    """Test accuracy of a copy of ``module`` fine-tuned with a linear head on the labelled images.

    Args:
        module: the model whose encoder is fine-tuned (copied; the original is left as it is).
        features: (model, normalised images (B, C, H, W)) -> (B, D) representations, with gradients.
        train_x: (N, C, H, W) normalised labelled images on the model's device; train_y: (N,) int64.
        test_x: (M, C, H, W) normalised test images; test_y: (M,) int64.
        num_classes: C; epochs: passes over the labelled images (> 0).
        generator: CPU generator for the head's initial weights and the batch order.
        chunk: images a forward pass takes when scoring the test split.
    """
    model = copy.deepcopy(module)
    width = features(model.eval(), train_x[:1]).shape[1]
    head = torch.nn.utils.skip_init(torch.nn.Linear, width, num_classes)  # no draw from the global generator
    with torch.no_grad():  # PyTorch's default init, drawn from the fine-tune's own generator
        bound = 1 / width ** 0.5
        head.weight.uniform_(-bound, bound, generator=generator)
        head.bias.uniform_(-bound, bound, generator=generator)
    head = head.to(train_x.device)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.Adam(params, lr=LR)
    model.train()
    with torch.enable_grad():
        for _ in range(epochs):
            for idx in torch.randperm(len(train_x), generator=generator).split(BATCH):
                if len(idx) < 2:  # BatchNorm cannot train on a batch of one
                    continue
                idx = idx.to(train_x.device)
                loss = F.cross_entropy(head(features(model, train_x[idx])), train_y[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    model.eval()
    with torch.no_grad():
        logits = torch.cat([head(features(model, test_x[i:i + chunk])) for i in range(0, len(test_x), chunk)])
    return accuracy(logits.argmax(1), test_y, num_classes)
