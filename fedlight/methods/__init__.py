"""Local objectives (one LightningModule each)."""
