"""Write what `plan`, `plan --json`, `validate` and `estimate --json` (ascend and cpu) print for every YAML under
configs/, tests/cases/ and tests/data/, one file per YAML and command (exit status, stdout, stderr), so that two
trees can be compared with `diff -r`: a change that should change no output (a move of code) is checked so.

    cd <checkout> && GLOG_v=3 .venv/bin/python scripts/command_outputs.py OUTPUT_DIR

Run from the checkout's root (paths in the output are relative to it); the commands run in this process through
`mf_memopt.cli.main`, about a second in all.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

COMMANDS = (["plan"], ["plan", "--json"], ["validate"], ["estimate", "--json", "--runtime", "ascend"],
            ["estimate", "--json", "--runtime", "cpu"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, os.getcwd())
    from mf_memopt.cli import main as cli

    yamls = sorted(path for folder in ("configs", "tests/cases", "tests/data") for path in Path(folder).rglob("*.y*ml"))
    for config in yamls:
        for command in COMMANDS:
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                try:
                    status: object = cli([command[0], str(config), *command[1:]])
                except SystemExit as stopped:
                    status = f"exit {stopped.code}"
                except Exception as error:  # noqa: BLE001 (a raise is an output like any other)
                    status = f"raised {type(error).__name__}: {error}"
            name = str(config).replace("/", "__") + "__" + "_".join(part.strip("-") for part in command)
            (out / name).write_text(f"status {status}\n--- stdout\n{stdout.getvalue()}--- stderr\n{stderr.getvalue()}")
    print(f"{len(yamls)} YAMLs, {len(yamls) * len(COMMANDS)} outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
