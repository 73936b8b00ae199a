"""Keep MindFormers' known-harmless warnings off the console; its log files keep everything.

Importing MindFormers 1.9 and handing its Trainer a model instance prints a dozen warnings
that say nothing about the user's run: optional PyNative models that need the unpublished
`hyper_parallel` package, template sections the YAML leaves empty, deprecated key names that
MindFormers' own defaults carry, and advice meant for Trainers that build their own model.
They are still written to MindFormers' `info.log`; the console gets one line saying how many
were hidden and why they are harmless.

MindFormers' logger is named after its log directory, so it is created here, before
MindFormers is imported, with that name and a class that filters only console handlers.
"""

from __future__ import annotations

import logging
import re
from collections import Counter

from .environment import mindformers_log_dir

# message pattern -> why it is harmless (the reasons are printed in the summary line)
HARMLESS = (
    (r"Import PyNative\w+ failed: No module named 'hyper_parallel'",
     "optional PyNative models need the unpublished hyper_parallel package"),
    (r"The input config \w+ is empty", "the YAML leaves optional sections empty"),
    (r"The config \w+ is deprecated\. Please use config", "MindFormers' own defaults use old key names"),
    (r"Some configs in yaml are useless for train", "keys the Trainer does not read"),
    (r"Recognizing that a model instance is sent|it is recommended to select a model configuration|"
     r"Otherwise, they will default to a general configuration|Input model name is not in the supported list|"
     r"See the list of supported task and model name|The default model config: .* will now be used",
     "the Trainer is given a prepared model instead of building one"),
    (r"The functionality of setting `resume_training` to a weight filename|"
     r"The config `check_for_global_norm` and `global_norm_spike_threshold` is deprecated|"
     r"`full_batch` will be deprecated", "deprecation notes about keys the YAML does not set"),
    (r"The Lazy Inline compilation acceleration feature only works",
     "lazy_inline stays off without gradient accumulation or pipeline stages"),
)
_PATTERNS = [(re.compile(pattern), reason) for pattern, reason in HARMLESS]


class _HarmlessFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__("mf_memopt.quiet")
        self.hidden: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        message = record.getMessage()
        for pattern, reason in _PATTERNS:
            if pattern.search(message):
                self.hidden[reason] += 1
                return False
        return True


FILTER = _HarmlessFilter()


class _ConsoleQuietLogger(logging.Logger):
    """A logger whose console handlers (not its file handlers) drop the harmless warnings."""

    def addHandler(self, handler: logging.Handler) -> None:  # noqa: N802 (logging's name)
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.addFilter(FILTER)
        super().addHandler(handler)


def quiet_mindformers() -> None:
    """Create MindFormers' logger with console filtering; call before MindFormers is imported."""
    name = f"mindformers{mindformers_log_dir()}"
    if name in logging.Logger.manager.loggerDict:
        return
    previous = logging.getLoggerClass()
    logging.setLoggerClass(_ConsoleQuietLogger)
    try:
        logging.getLogger(name)
    finally:
        logging.setLoggerClass(previous)


def hidden_summary() -> str | None:
    """One line about what was hidden since the start, or None."""
    if not FILTER.hidden:
        return None
    total = sum(FILTER.hidden.values())
    reasons = "; ".join(FILTER.hidden)
    return (f"{total} harmless MindFormers warning(s) not shown ({reasons}); they are in "
            f"{mindformers_log_dir()}/rank_*/info.log")
