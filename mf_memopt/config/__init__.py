"""The config stage: read the YAML, validate it, normalise its sections, resolve their interactions, plan.

Nothing here imports MindSpore or the later stages (apply, runtime, verify); a test holds that.
`load_document` is the loader a command calls once; `load_plan` is its plan.
"""

from ..document.errors import ConfigError, ConfigIssue
from .load import Document, load_document, load_plan, plan_source

__all__ = ["ConfigError", "ConfigIssue", "Document", "load_document", "load_plan", "plan_source"]
