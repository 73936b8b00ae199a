"""Explain memory before running: per-stage peak, per-layer and per-operator bytes, swap traffic."""

from .core import RUNTIMES, Estimate, estimate_config, estimate_source
from .transfer import Hardware

__all__ = ["RUNTIMES", "Estimate", "Hardware", "estimate_config", "estimate_source"]
