"""mf_memopt: plan, check and apply activation recompute and swap for MindFormers training."""

from .config import load_plan
from .errors import ConfigError, ConfigIssue
from .plan import Conflict, LayerPlan, Plan

__all__ = ["ConfigError", "ConfigIssue", "Conflict", "LayerPlan", "Plan", "load_plan"]
__version__ = "0.1.0"
