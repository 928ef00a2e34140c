"""Simulated client faults (``faults.*``, every run): dropouts, stragglers, divergence, and the
run's answer to them. Part of the parts room: it imports no other part.
"""
