"""`python -m mf_memopt.verify.precompile_child CONFIG REPORT [--ranks]`: the compile child of `verify`, and with
`--ranks` one msrun worker of a pipeline config (`precompile.main`).

The entry is a module of its own, which no package imports: `mf_memopt.verify` imports `precompile`, so running
`precompile` itself with `-m` would execute it twice (once imported, once as `__main__`), and runpy would say so in
a RuntimeWarning, the first line of every worker's log.
"""

from __future__ import annotations

import sys

from .precompile import main


def run(argv: list[str]) -> int:
    """`main`, with what stops the run (the YAML's errors, the machine's) said without a traceback."""
    from ..document.errors import ConfigError
    from ..runtime.errors import LaunchError

    try:
        return main(argv)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
    except LaunchError as error:
        print(error, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
