"""Sweeps: a recipe x a grid of overrides x seeds, as one SLURM array job."""
