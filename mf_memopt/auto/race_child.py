"""`python -m mf_memopt.auto.race_child --steps N --work DIR CONFIG...`: the race's child process (`race.main`).

The entry is a module of its own, which no package imports: `mf_memopt.auto` imports `race`, so running `race`
itself with `-m` would execute it twice (once imported, once as `__main__`), and runpy would say so in a
RuntimeWarning at the top of the child's output.
"""

from __future__ import annotations

import sys

from .race import main

if __name__ == "__main__":
    sys.exit(main())
