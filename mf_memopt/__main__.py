import sys

from .cli import main

sys.exit(main())   # `... | head` ends quietly: main() handles a reader that has gone, as for the console script
