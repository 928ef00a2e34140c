"""The round loop, which names no paper: ``Federation.run_round()`` (one round, its steps in order)
samples clients, runs each sampled client's local work on this process's worker models,
aggregates, evaluates, logs and checkpoints, and calls the hooks of its parts (``interfaces``)
at each step. Every paper's runs go through it: change it only with ``tests/test_engine.py``
passing and ``benchmarks/behaviour_check.py`` bit-identical; a new paper never edits it (it adds
a part). It imports no part and nothing of ``run``.
"""
