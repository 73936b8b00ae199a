"""`auto`: choose recompute and swap per layer and stage under a device-memory budget, and write the YAML."""

from .choices import Choice, choice_set
from .planner import auto_plan
from .results import AutoPlan, InfeasibleBudget

__all__ = ["AutoPlan", "Choice", "InfeasibleBudget", "auto_plan", "choice_set"]
