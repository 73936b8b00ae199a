"""The config stage: read the YAML, validate it, normalise its sections, resolve their interactions, plan.

Nothing here imports MindSpore or the later stages (apply, runtime, verify); a test holds that.
The public names are imported on first use, so that a family module can import `config.errors`
while the stage that reads families is still being imported.
"""

from importlib import import_module

_PUBLIC = {"ConfigError": ".errors", "ConfigIssue": ".errors", "load_plan": ".load", "plan_source": ".load"}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mf_memopt.config' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value
    return value
