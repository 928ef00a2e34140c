"""Backbones (encoders)."""
