"""The engine: a federated run, in rooms whose names say what lives there and who may touch it.

``loop/`` the round loop, which names no paper; ``parts/`` one folder per paper's part of a round;
``state/`` crash consistency (checkpoints, client-state files); ``run/`` from a recipe to a run
folder (``fedlight fit``); ``output/`` what a run prints and draws. Dependencies point one way:
``run`` -> ``parts`` -> ``loop`` -> ``state`` and ``output`` (``tests/test_architecture.py``).
"""
