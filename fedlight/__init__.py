"""fedlight: federated self-supervised representation learning on Lightning Fabric."""

__version__ = "0.1.0"
