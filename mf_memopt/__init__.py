"""mf_memopt: plan, check and apply activation recompute and swap for MindFormers training."""

from .apply import ApplyReport, apply_plan
from .config import load_plan
from .errors import ConfigError, ConfigIssue
from .plan import Conflict, LayerPlan, Plan

__all__ = ["ApplyReport", "ConfigError", "ConfigIssue", "Conflict", "LayerPlan", "Plan", "apply_plan", "load_plan"]
__version__ = "0.1.0"
