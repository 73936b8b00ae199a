"""The config stage: read the YAML, validate it, normalise its sections, resolve their interactions, plan.

Nothing here imports MindSpore or the later stages (apply, runtime, verify); a test holds that.
"""

from .errors import ConfigError, ConfigIssue
from .load import load_plan, plan_source

__all__ = ["ConfigError", "ConfigIssue", "load_plan", "plan_source"]
