"""What SOFed's importance policy asks of a method: a score per sample (Gong et al. 2023, eq. 3).

The policy (``buffer.policy=importance``) keeps the samples the current model finds hardest. A
method with a predictor and a target network defines eq. 3 itself (``ImportanceScoring``: BYOL,
and FedU / FedEMA / FedProx / ... around it, which answer with their objective's). Any other
method is scored by the paper's sec. III "Compatibility" rule for a method whose online and
target networks are one network without a predictor (SimCLR): one minus the cosine of its
unit-length embeddings (``FederatedModule.embed``) of x and of x's horizontal flip.
"""

from __future__ import annotations

from typing import Callable, Literal, Protocol, runtime_checkable

import torch

from fedlight.methods.federated_module import FederatedModule

ScoreHead = Literal["prediction", "projection"]
"""Which online output eq. 3 compares with the target (``buffer.score``): the online prediction
g_o(f_o(x)) (the paper: the BYOL loss of the pair), or the online projection f_o(x)."""


@runtime_checkable
class ImportanceScoring(Protocol):
    """A method that defines SOFed's eq. 3 itself (BYOL: its online network against its target)."""

    def importance_score(self, x: torch.Tensor, head: ScoreHead = "prediction") -> torch.Tensor:
        """Scores of ``x``.

        Args:
            x: (B, C, H, W) normalised images.
            head: ``buffer.score``: which online output is compared with the target.
        Returns:
            (B,) scores in [0, 2], higher for a sample the model finds harder.
        """
        ...


def flip_disagreement(embed: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Sec. III's score of a method without a predictor: 1 - cos(embed(x), embed(flip(x))).

    Args:
        embed: (B, C, H, W) -> (B, d) unit-length embeddings.
        x: (B, C, H, W) normalised images.
    Returns:
        (B,) scores in [0, 2].
    """
    return 1 - (embed(x) * embed(x.flip(-1))).sum(dim=1)


def importance_scorer(module: FederatedModule, head: ScoreHead) -> Callable[[torch.Tensor], torch.Tensor]:
    """(B, C, H, W) -> (B,) the importance scores of ``module`` as it is now: its own eq. 3 with
    ``head`` where it defines one, else sec. III's rule on its ``embed`` (``head`` has nothing to pick)."""
    if isinstance(module, ImportanceScoring):
        return lambda x: module.importance_score(x, head)
    return lambda x: flip_disagreement(module.embed, x)

