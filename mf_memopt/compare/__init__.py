"""`python -m mf_memopt compare BASE CANDIDATE`: does a memory plan change the training? Both configs trained
alike and their steps and parameters compared (`engine.py`); the configs checked to differ only in the plan
(`configs.py`); each run recorded in a child (`runs.py`); the comparison as text and a chart (`report.py`)."""

from .engine import (
    DEFAULT_TOLERANCE,
    Comparison,
    Probe,
    compare_configs,
    not_finite_steps,
    run_drift,
    training_runtime,
)
from .runs import RunFailed

__all__ = ["Comparison", "DEFAULT_TOLERANCE", "Probe", "RunFailed", "compare_configs", "not_finite_steps",
           "run_drift", "training_runtime"]
