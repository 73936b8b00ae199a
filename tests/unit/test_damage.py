"""Damaged data, a damaged checkpoint, a disk that fills and a killed training process each end in one line that
names the file (runtime/supervise.py, failures.py, datacheck.py), never in a bare signal or a traceback."""

from __future__ import annotations

import errno
import signal
import time
from pathlib import Path

from mf_memopt.runtime import supervise


def test_a_dead_run_is_said_with_its_step_and_last_checkpoint_and_a_big_dataset_is_left_to_check_data(tmp_path,
                                                                                                   monkeypatch):
    from mf_memopt.runtime import datacheck

    monkeypatch.setattr(datacheck, "AUTO_CHECK_BYTES", -1)     # every dataset is "too big to read again at once"
    (tmp_path / "checkpoint" / "rank_0").mkdir(parents=True)
    saved = tmp_path / "checkpoint" / "rank_0" / "tiny_rank_0-1_8.ckpt"
    saved.write_bytes(b"x")
    facts = {"step": 9, "output": str(tmp_path), "rank": 0, "workers": 1, "datasets": ["/data/big.mindrecord"]}
    assert supervise.death_line(signal.SIGSEGV, facts) == (
        f"training died from SIGSEGV after 9 step(s) of this run; the last good checkpoint is {saved}; if its dataset "
        "is damaged, MindSpore's reader crashes like this: check /data/big.mindrecord with `python -m mf_memopt "
        f"check-data CONFIG`; logs in {tmp_path / 'log'}")
    facts.update(workers=2, rank=1)
    assert supervise.death_line(signal.SIGKILL, facts).startswith("rank 1: training died from SIGKILL after 9 step(s)")


def test_a_dataset_check_that_does_not_end_is_given_up_after_its_time_limit(tmp_path, monkeypatch):
    """After a death by signal the launcher reads the dataset again; a reader that hangs on damaged data is ended
    after `AUTO_CHECK_SECONDS` and the line names the command instead."""
    from mf_memopt.runtime import datacheck

    monkeypatch.setattr(datacheck, "_READER", "import time; time.sleep(60)")
    monkeypatch.setattr(datacheck, "AUTO_CHECK_SECONDS", 2.0)
    dataset = tmp_path / "tokens.mindrecord"
    dataset.write_bytes(b"\0" * 1024)
    facts = {"step": 3, "output": str(tmp_path), "rank": 0, "workers": 1, "datasets": [str(dataset)]}
    began = time.monotonic()
    line = supervise.death_line(signal.SIGSEGV, facts)      # the reader would sleep for 60 s
    assert time.monotonic() - began < 30
    assert line.endswith(f"; its dataset was not read to the end within 2 s (damaged data can do that): check "
                             f"{dataset} with `python -m mf_memopt check-data CONFIG`; logs in {tmp_path / 'log'}")


def test_a_full_disk_removes_only_this_ranks_unfinished_save_and_names_the_file_system(tmp_path):
    from mf_memopt.runtime.failures import RunFacts, mount_point, translate

    saves = {rank: tmp_path / "checkpoint" / f"rank_{rank}" / f"tiny_rank_{rank}-1_8.tmp" for rank in (0, 1)}
    for save in saves.values():
        save.parent.mkdir(parents=True)
        save.write_bytes(b"x")
    facts = RunFacts(output=tmp_path, rank=0, step=7)
    line = str(translate(OSError(errno.ENOSPC, "No space left on device"), facts))
    assert line.startswith(f"the file system at {mount_point(tmp_path)} filled up while {saves[0]} was written, "
                           f"after 7 step(s) of this run; removed this rank's unfinished save {saves[0]}; ")
    assert not saves[0].exists() and saves[1].exists()      # rank 1's save may still be under way


def test_a_full_disk_elsewhere_is_not_blamed_on_the_output_directory(tmp_path):
    from mf_memopt.runtime.failures import RunFacts, mount_point, translate

    cache = Path("/dev/shm") / "graph_cache.bin"
    line = str(translate(OSError(errno.ENOSPC, "No space left on device", str(cache)), RunFacts(output=tmp_path)))
    assert line.startswith(f"the file system at {mount_point(cache)} filled up while {cache} was written, after 0 ")
    assert str(tmp_path) not in line.split(" (the traceback")[0]
