"""Check a built wheel.

`python tests/children/wheel_check.py WHEEL mf_memopt/`: every .py, .json and .cpp file under the package
directory must be in the wheel (a subpackage left out of the packaging config shows up here).
`python tests/children/wheel_check.py --requirements WHEEL`: every runtime dependency the wheel
declares is installed, at a matching version, in the running environment.
Both exit 1 and say what is wrong. The checks are tests/helpers/wheel_contents.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

from wheel_contents import missing_files, unmet_requirements  # noqa: E402

if __name__ == "__main__":
    if sys.argv[1] == "--requirements":
        problems = [f"wheel requirement not met: {text}" for text in unmet_requirements(Path(sys.argv[2]))]
    else:
        problems = [f"missing from the wheel: {name}" for name in missing_files(Path(sys.argv[1]), Path(sys.argv[2]))]
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.exit(1 if problems else 0)
