"""Read a config file's bytes safely and decode them.

Only regular files are read (a FIFO would block forever, `/dev/zero` never ends), at most
`MAX_BYTES` of them. UTF-8 (with or without a byte-order mark) is what MindFormers reads;
UTF-16 and UTF-32 are read when a byte-order mark says so, with a warning that MindFormers
itself cannot open them. Anything else is one clear error.
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

from .errors import ConfigError, ConfigIssue

MAX_BYTES = 128 * 1024  # MindFormers' training YAMLs are a few KiB; parsing is ~50 KiB/s at worst

_BOMS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", None),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _fail(file: str, message: str, hint: str | None = None, line: int | None = None) -> ConfigError:
    return ConfigError([ConfigIssue(file=file, line=line, path="", message=message, hint=hint)])


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes; ConfigError if it is not a readable regular file of at most MAX_BYTES."""
    file = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _fail(file, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd)
        kind = next((name for test, name in _KINDS if test(mode.st_mode)), None)
        if kind is not None or not stat.S_ISREG(mode.st_mode):
            raise _fail(file, f"cannot read the file: it is {kind or 'not a regular file'}",
                        "give the path of a YAML file")
        if mode.st_size > MAX_BYTES:
            raise _too_big(file, mode.st_size)
        chunks, total = [], 0
        while total <= MAX_BYTES:  # files such as /proc entries report size 0: bound the read itself
            chunk = os.read(fd, MAX_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_BYTES:
            raise _too_big(file, None)
        return b"".join(chunks)
    except OSError as exc:
        raise _fail(file, f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _too_big(file: str, size: int | None) -> ConfigError:
    got = f"{size} bytes" if size is not None else f"more than {MAX_BYTES} bytes"
    return _fail(file, f"the file is too large for a training config ({got}; at most {MAX_BYTES // 1024} KiB)",
                 "a MindFormers training YAML is a few KiB; is this the right file?")


def decode(raw: bytes, file: str) -> tuple[str, list[ConfigIssue]]:
    """The text of the file, and a warning when its encoding is one MindFormers cannot read."""
    encoding, label, body = "utf-8", None, raw
    for bom, name, shown in _BOMS:
        if raw.startswith(bom):
            encoding, label, body = name, shown, raw[len(bom):]
            break
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        line = body[:exc.start].count(b"\n") + 1 if encoding == "utf-8" else None
        what = label or "UTF-8"
        raise _fail(file, f"the file is not valid {what}: {exc.reason} at byte {exc.start + len(raw) - len(body)}",
                    "save the file as UTF-8 (MindFormers reads configs as UTF-8)", line) from None
    warnings = []
    if label is not None:
        warnings.append(ConfigIssue(
            file=file, line=None, path="", severity="warning",
            message=f"the file is {label} (it starts with a {label} byte-order mark); MindFormers opens training "
                    "configs as UTF-8 and cannot read it", hint="save it as UTF-8 before training"))
    return text, warnings
