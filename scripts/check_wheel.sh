#!/usr/bin/env bash
# Build the wheel, install it (not editable) into a clean virtual environment, run the CLI's
# config commands (validate, plan, estimate) on a shipped config from outside the checkout, and
# run the fast test tier (`-m "not mindspore"`: tests/unit/, and tests/mindspore/ not collected) against the
# installed wheel, without MindSpore.
#
# The clean environment gets the wheel and the libraries those commands import (PyYAML,
# jsonschema), pinned to the versions in .venv and taken from uv's cache. It does not get
# mindspore and mindformers (2.5 GB installed; only training and `verify` import them; resolving
# them with `pip install --dry-run` alone takes about 2 minutes): instead the wheel's declared
# dependencies are checked against .venv, where setup_env.sh installed and the test suite ran them.
# Run after scripts/setup_env.sh, which creates .venv (with uv) and warms uv's cache. Takes about 25 s.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip_quiet=(--quiet --disable-pip-version-check)

# Build from a copy: an in-tree build/ directory could carry modules that no longer exist.
mkdir "$work/src"
cp -r pyproject.toml README.md mf_memopt "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
.venv/bin/python -m pip wheel "${pip_quiet[@]}" --no-deps -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/mf_memopt-*.whl)
.venv/bin/python "$root/tests/children/wheel_check.py" "$wheel" "$root/mf_memopt"

base_python=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
.venv/bin/uv venv --quiet --seed --python "$base_python" "$work/venv"
install=("$root/.venv/bin/uv" pip install --quiet --python "$work/venv/bin/python" --no-deps)
light=$(.venv/bin/python -m pip freeze 2>/dev/null |
        grep -iE '^(pyyaml|jsonschema|jsonschema-specifications|referencing|rpds-py|attrs|typing.extensions)==')
tests=$(.venv/bin/python -m pip freeze 2>/dev/null |
        grep -iE '^(matplotlib|numpy|scipy|contourpy|cycler|fonttools|kiwisolver|packaging|pillow|pyparsing|python-dateutil|six|pytest|pytest-xdist|execnet|iniconfig|pluggy|pygments|hypothesis|sortedcontainers|attrs)==')
# shellcheck disable=SC2086
"${install[@]}" "$wheel" $light
.venv/bin/python "$root/tests/children/wheel_check.py" --requirements "$wheel"

cd "$work"  # outside the checkout: only the installed package can be imported
location=$("$work/venv/bin/python" -c 'import mf_memopt; print(mf_memopt.__file__)')
case "$location" in "$work/venv/"*) ;; *) echo "mf_memopt imported from $location, not the clean venv" >&2; exit 1;; esac
config="$root/configs/planning/llama2_7b_swap_pp2.yaml"
"$work/venv/bin/mf-memopt" validate "$config"
"$work/venv/bin/mf-memopt" plan --json "$config" > plan.json
"$work/venv/bin/python" -m mf_memopt estimate "$config" > estimate.txt
"$work/venv/bin/python" -c 'import json, sys; assert json.load(open("plan.json"))["num_layers"] == 32'
grep -q "^stage" estimate.txt

# The fast tier against the installed wheel: `pytest` (not `python -m pytest`) keeps the checkout off sys.path.
# shellcheck disable=SC2086
"${install[@]}" $tests
if "$work/venv/bin/python" -c 'import mindspore' 2>/dev/null; then echo "mindspore is importable in the clean venv" >&2; exit 1; fi
(cd "$root" && "$work/venv/bin/pytest" -q -p no:cacheprovider -m "not mindspore" \
    -W "ignore::pytest.PytestUnknownMarkWarning" | tail -n 1)
echo "wheel check passed: $(basename "$wheel") installed in a clean venv; validate, plan and estimate ran from $work;" \
     "the fast tier passed against it without MindSpore"
