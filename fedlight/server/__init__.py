"""Aggregators (no Lightning here): pure tensor math in ops.py, one strategy per file."""
