"""What a run prints and draws (rank 0): console lines, progress bars, TensorBoard's
figures and hparams, the Lightning loggers its recipe chooses. Free to change; it imports nothing else of the engine, so output
never changes what a run computes.
"""
