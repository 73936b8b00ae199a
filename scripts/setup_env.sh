#!/usr/bin/env bash
# Create .venv (if missing) and install mf_memopt with its pinned runtime and test tools.
# Safe to re-run: an up-to-date environment is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-}
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin=$candidate; break; fi
  done
fi
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "mf_memopt needs Python 3.11 (mindspore 2.9.0 wheels); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
# uv resolves and installs the same pins as pip from the same index (PyPI), with parallel downloads: a cold install
# of mindspore, mindformers and the test tools takes about 30 s where pip took over 3 minutes. pip stays in .venv:
# the wheel is built with it (scripts/check_wheel.sh, tests/unit/test_packaging.py).
.venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
.venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode -e '.[test]'
