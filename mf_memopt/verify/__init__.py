"""The verify stage: compile the training graph and check that its marks are the plan's."""

from .check import VerifyResult, verify, verify_table

__all__ = ["VerifyResult", "verify", "verify_table"]
