"""Round orchestration, the Fabric client loop, client state, ledger and checkpoints."""
