"""The apply stage: resolve a plan against a model's real cells and set its marks (the only code that does)."""

from .execute import ApplyReport, apply_plan

__all__ = ["ApplyReport", "apply_plan"]
