"""`python -m mf_memopt.data CONFIG [--out PATH] [--num_samples N]`: write a YAML's generated token file."""

import sys

from .runtime.data import main

if __name__ == "__main__":
    sys.exit(main())
