"""Linear-probe and kNN evaluation (torchmetrics)."""
