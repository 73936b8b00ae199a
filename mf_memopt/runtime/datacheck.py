"""`python -m mf_memopt check-data CONFIG`: read every record of a YAML's MindRecord dataset and name what is damaged.

MindSpore's MindRecord reader runs in the training process; a damaged page can crash it (SIGSEGV) instead of
raising an error, which would end the training without a word. Here the records are read in a child process,
one by one, in file order: a crash or an error is reported with the file and the last record read before it.

The child counts the records it has read in a shared page (no write per record), so a crash is placed to the
record without slowing the read.

Cost: the whole dataset is read once, at the reader's pace per record: about 26,000 records a second on this
2-core machine (15 s for 400,000 records of 257 tokens, 192 MB). A 4 GiB dataset of 4096-token records (about
250,000 records) takes about 10 s; one of short records, minutes. The launcher runs it by itself only after a
training process died from a signal, for datasets of at most `AUTO_CHECK_BYTES`; past that it names the command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..document.source import Source
from .child import run_owned

DATASET_DIR = ("train_dataset", "data_loader", "dataset_dir")
AUTO_CHECK_BYTES = 1 << 30
# How long the launcher reads a dead run's dataset again before it gives up and names the command: at the pace
# above, 1 GiB of 4096-token records reads in about 3 s, of 257-token records (480 bytes each) in about 90 s.
AUTO_CHECK_SECONDS = 120.0
_READER = ("import json, mmap, sys\n"
           "import mindspore.dataset as ds\n"
           "files, counter = json.loads(sys.argv[1]), open(sys.argv[2], 'r+b')\n"
           "read = mmap.mmap(counter.fileno(), 8)\n"
           "data = ds.MindDataset(files if len(files) > 1 else files[0], shuffle=False, num_parallel_workers=1)\n"
           "print('size', data.get_dataset_size(), flush=True)\n"
           "for index, _ in enumerate(data.create_tuple_iterator(output_numpy=True, num_epochs=1)):\n"
           "    read[:8] = (index + 1).to_bytes(8, 'little')\n")


@dataclass(frozen=True, slots=True)
class DataCheck:
    files: tuple[str, ...]
    records: int | None         # what the index says
    read: int                   # records read before the end (or the failure)
    failure: str | None         # None: every record read

    @property
    def damaged(self) -> bool:
        return self.failure is not None

    def line(self) -> str:
        what = ", ".join(self.files)
        if not self.damaged:
            return f"{what}: all {self.read} records read, no damage found"
        of = f" of {self.records}" if self.records is not None else ""
        return f"{what} is damaged: {self.failure}, after {self.read}{of} records were read"


# MindFormers' rule for the files of a MindRecord dataset (CausalLanguageModelDataset._process_mindrecord_data): names
# ending in `mindrecord` and digits, the digits being a shard's number (MindSpore's FileWriter names the shards of
# one dataset `<name>0 ... <name>N-1`, zero-padded to one width: mindrecord/filewriter.py).
_MINDRECORD = re.compile(r"mindrecord\d*$")
_SHARD = re.compile(r"(.*mindrecord)(\d+)$")


def dataset_files(source: Source, dataset_dir: str | None = None) -> list[str]:
    """The MindRecord files a YAML trains from, every shard: those of a directory (searched recursively, as
    MindFormers does), or the file named and the other shards of its dataset, which MindSpore reads with it."""
    target = dataset_dir or source.get(DATASET_DIR)
    if not isinstance(target, str) or not target:
        return []
    path = Path(target)
    if path.is_dir():
        return sorted(os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names
                      if _MINDRECORD.search(name))
    return _shards_of(path)


def _shards_of(path: Path) -> list[str]:
    shard = _SHARD.match(path.name)
    if shard is None or not path.parent.is_dir():
        return [str(path)]
    prefix, width = shard.group(1), len(shard.group(2))
    siblings = [other for other in path.parent.iterdir()
                if (match := _SHARD.match(other.name)) and match.group(1) == prefix and len(match.group(2)) == width]
    return sorted({str(other) for other in siblings} | {str(path)})


def check_data(files: list[str], *, timeout: float | None = None) -> DataCheck:
    """Read every record in a child process; a crash or an error there is the damage, named with its place."""
    with tempfile.NamedTemporaryFile(prefix="mf_memopt_check_") as counter:
        counter.write(b"\0" * 8)
        counter.flush()
        done = run_owned([sys.executable, "-c", _READER, json.dumps(files), counter.name], cwd=os.getcwd(),
                         env={**os.environ, "GLOG_v": "3"}, timeout=timeout, merge_output=False)
        counter.seek(0)
        read = int.from_bytes(counter.read(8), "little")
    sizes = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("size ")]
    records = int(sizes[0]) if sizes and sizes[0].isdigit() else None
    if done.returncode == 0:
        return DataCheck(files=tuple(files), records=records, read=read, failure=None)
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        return DataCheck(files=tuple(files), records=records, read=read,
                         failure=f"MindSpore's reader crashed ({name})")
    return DataCheck(files=tuple(files), records=records, read=read,
                     failure=f"MindSpore's reader failed ({_reason(done.stderr)})")


_PREFIXES = re.compile(r"^(\[[A-Za-z ]*ERROR\]\s*)+")


def _reason(stderr: str) -> str:
    """The reader's own message: the last `[ERROR] ...` line, its bracketed prefixes dropped."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    marked = [line for line in lines if line.startswith("[ERROR]")]
    text = marked[-1] if marked else (lines[-1] if lines else "no message")
    return _PREFIXES.sub("", text).strip()[:300]


def total_bytes(files: list[str]) -> int:
    return sum(os.path.getsize(file) for file in files if os.path.isfile(file))


def run_check_data(source: Source) -> int:
    """The command: one line per dataset check; 0 when nothing is damaged."""
    files = dataset_files(source)
    if not files:
        print(f"{source.file}: train_dataset.data_loader.dataset_dir names no MindRecord file", file=sys.stderr)
        return 1
    missing = [file for file in files if not os.path.isfile(file)]
    if missing:
        print(f"{source.file}: dataset file {missing[0]} does not exist", file=sys.stderr)
        return 1
    try:
        result = check_data(files)
    except subprocess.TimeoutExpired:
        print(f"{', '.join(files)}: not read to the end in time", file=sys.stderr)
        return 1
    print(result.line(), file=sys.stderr if result.damaged else sys.stdout)
    return 1 if result.damaged else 0
