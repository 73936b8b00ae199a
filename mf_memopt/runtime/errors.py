"""What stops a run before (or while) it trains, said by the launcher in one line; never a process exit from
library code."""


class LaunchError(Exception):
    """The run cannot start or go on: the launcher prints the message on one line and exits non-zero."""
