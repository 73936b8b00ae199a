"""The CPU runtime's terms were read off one MindSpore and MindFormers: say when the installed ones differ.

Which tensors the CPU backend keeps, when it casts and in which order the optimizer runs are
choices of the MindSpore runtime (and of MindFormers' model and optimizer code), read off
allocation logs of the versions each family records (`estimate.family.Estimator.cpu_measured_on`). Another
version may make other choices; `estimate --measure` then shows how far off the estimate is.
"""

from __future__ import annotations

from importlib import metadata


def installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def runtime_version_notes(measured_on: dict[str, str]) -> list[str]:
    """One note when an installed package differs from the one the CPU terms were measured on (or is missing)."""
    found = {package: installed(package) for package in measured_on}
    if all(found[package] == version for package, version in measured_on.items()):
        return []
    measured = ", ".join(f"{package} {version}" for package, version in measured_on.items())
    here = ", ".join(f"{package} {found[package] or 'not installed'}" for package in measured_on)
    return [f"the cpu runtime's terms were measured on {measured}; this machine has {here}: the runtime may keep "
            "other tensors; check the estimate with `estimate --measure`"]
