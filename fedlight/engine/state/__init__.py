"""Crash consistency: atomic, verifiable checkpoint files, what a checkpoint must hold to
resume, the client-state files and the disk-backed store, and the collectives that move
state between ranks. A mistake here loses runs: touch it only with
``tests/test_checkpoint.py``, ``tests/test_client_state_store.py`` and ``RELIABILITY.md``'s
checks. It imports nothing else of the engine.
"""
