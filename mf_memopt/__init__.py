"""mf_memopt: plan, check and apply activation recompute, swap and compression for MindFormers training.

The public names are imported on first use, so that importing one stage (`mf_memopt.config`)
does not import the others.
"""

from importlib import import_module

_PUBLIC = {"ApplyReport": ".apply", "apply_plan": ".apply", "load_plan": ".config", "ConfigError": ".config",
           "ConfigIssue": ".config", "Conflict": ".config.plan", "LayerPlan": ".config.plan", "Plan": ".config.plan"}

__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mf_memopt' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value
    return value
