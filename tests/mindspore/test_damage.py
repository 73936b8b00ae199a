"""Damaged data, a damaged checkpoint, a disk that fills and a killed training process each end in one line that
names the file (runtime/supervise.py, failures.py, datacheck.py), never in a bare signal or a traceback."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from full_disk import fill, full_disk_env
from launching import launcher_command, launcher_env
from processes import only_child
from shared_runs import llama_tiny_trained

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"
PREFIX = "run_mindformer_memopt.py: "


def _launch(tmp_path: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    command = launcher_command(TINY, "--run_mode", "train", *extra)
    return subprocess.run(command, cwd=tmp_path, env=launcher_env(), capture_output=True, text=True, timeout=timeout)


def _tokens(tmp_path: Path, name: str = "tokens.mindrecord") -> Path:
    """A fresh token file (a MindRecord header names its own file: a copy would read the original), written here as
    `python -m mf_memopt.data` writes it (without a child that imports MindSpore again)."""
    from mf_memopt.config.load import load_document
    from mf_memopt.runtime.data import token_spec, write_mindrecord

    return write_mindrecord(token_spec(load_document(TINY), path=str(tmp_path / name)))


def _overwrite_the_middle(path: Path, size: int = 4096, seed: int = 1) -> None:
    noise = random.Random(seed)
    with open(path, "r+b") as handle:
        handle.seek(path.stat().st_size // 2)
        handle.write(bytes(noise.getrandbits(8) for _ in range(size)))


def test_check_data_names_the_damaged_file_and_the_record(tmp_path, capsys):
    from mf_memopt.document.source import parse_yaml
    from mf_memopt.runtime.datacheck import run_check_data

    tokens = _tokens(tmp_path)
    source = parse_yaml(f"train_dataset:\n  data_loader:\n    dataset_dir: {tokens}\n", "c.yaml")
    assert run_check_data(source) == 0
    assert capsys.readouterr().out == f"{tokens}: all 32 records read, no damage found\n"
    _overwrite_the_middle(tokens)
    assert run_check_data(source) == 1
    assert capsys.readouterr().err == (f"{tokens} is damaged: MindSpore's reader crashed (SIGSEGV), after 19 of 32 "
                                       "records were read\n")


def test_training_on_a_damaged_dataset_ends_in_one_line_naming_the_file(tmp_path):
    tokens = _tokens(tmp_path)
    _overwrite_the_middle(tokens)
    done = _launch(tmp_path, "--output_dir", str(tmp_path / "out"), "--train_dataset_dir", str(tokens))
    assert 0 < done.returncode < 128
    last = done.stderr.splitlines()[-1]
    assert last.startswith(PREFIX + "training died from SIGSEGV after ")
    assert f"{tokens} is damaged: MindSpore's reader crashed (SIGSEGV), after 19 of 32 records were read" in last


def test_a_truncated_dataset_is_named_without_a_traceback(tmp_path):
    tokens = _tokens(tmp_path)
    os.truncate(tokens, 30_000)
    done = _launch(tmp_path, "--output_dir", str(tmp_path / "out"), "--train_dataset_dir", str(tokens))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"{PREFIX}MindSpore could not read the dataset {tokens} (Failed to read file.), after 0 step(s) of this run; "
        "no checkpoint was saved yet; find the damaged record with `python -m mf_memopt check-data CONFIG` (the "
        f"traceback is in {tmp_path}/out/log/rank_0/mf_memopt_failure.log)")


def test_resuming_from_a_truncated_checkpoint_names_it_and_the_one_before(tmp_path, tmp_path_factory):
    tokens = _tokens(tmp_path)
    # the session's one full run of the tiny Llama (test_launcher_e2e.py reads it too); its checkpoints are copied
    first, output, _ = llama_tiny_trained(tmp_path_factory)
    assert first.returncode == 0, first.stderr[-2000:]
    shutil.copytree(output / "checkpoint", tmp_path / "first" / "checkpoint")
    saved = tmp_path / "first" / "checkpoint" / "rank_0"
    cut = saved / "llama_tiny_rank_0-1_16.ckpt"
    cut.chmod(0o600)
    os.truncate(cut, 1_000_000)
    done = _launch(tmp_path, "--output_dir", str(tmp_path / "second"), "--train_dataset_dir", str(tokens),
                   "--load_checkpoint", str(tmp_path / "first" / "checkpoint"), "--resume_training", cut.name)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"{PREFIX}checkpoint {cut} (1.0 MiB) cannot be read: it is truncated or damaged; the newest other checkpoint "
        f"there is {saved / 'llama_tiny_rank_0-1_8.ckpt'}")


def test_a_killed_training_process_is_reported_dead_with_its_step(tmp_path):
    command = launcher_command(TINY, "--run_mode", "train", "--output_dir", str(tmp_path / "out"),
                               "--train_dataset_dir", str(_tokens(tmp_path)))
    # a process whose command line looks like a training child's, started first: only the launcher's own is killed
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "mf_memopt.runtime.launch"])
    try:
        launcher = subprocess.Popen(command, cwd=tmp_path, env=launcher_env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        for line in launcher.stdout:
            if "step:[    3/" in line:
                os.kill(only_child(launcher.pid), signal.SIGKILL)
                break
        _, stderr = launcher.communicate(timeout=120)
        assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()
    assert launcher.returncode == 1
    # MindFormers prints step 3's line as the step ends, beside the step's report to the launcher: it says 2 or 3
    last = stderr.splitlines()[-1]
    assert last.startswith((f"{PREFIX}training died from SIGKILL after 2 step(s)",
                            f"{PREFIX}training died from SIGKILL after 3 step(s)"))
    assert last.endswith(f" of this run; no checkpoint was saved yet; logs in {tmp_path / 'out' / 'log'}")


def test_a_disk_that_fills_during_training_stops_it_in_one_line_and_removes_the_unfinished_save(tmp_path):
    from mf_memopt.runtime.failures import mount_point

    output = tmp_path / "out"
    command = launcher_command(TINY, "--run_mode", "train", "--output_dir", str(output), "--train_dataset_dir",
                               str(_tokens(tmp_path)))
    launcher = subprocess.Popen(command, cwd=tmp_path, env=full_disk_env(launcher_env(), tmp_path / "hooks", output),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in launcher.stdout:
        if "step:[    2/" in line:
            fill(output)                                    # the disk is full before the step-8 checkpoint
            break
    _, stderr = launcher.communicate(timeout=300)
    partial = sorted((output / "checkpoint" / "rank_0").glob("*"))
    assert launcher.returncode == 1 and "Traceback" not in stderr
    last = stderr.splitlines()[-1]
    assert last.startswith(f"{PREFIX}the file system at {mount_point(output)} filled up while "
                           f"{output}/checkpoint/rank_0/llama_tiny_rank_0-1_8.tmp was written, after ")
    assert "removed this rank's unfinished save" in last and partial == []


def _shards(folder: Path, count: int = 3, records: int = 30) -> list[Path]:
    """One MindRecord dataset written as `count` shards (`tokens.mindrecord0` ...), as MindSpore's FileWriter names
    them."""
    import numpy as np
    from mindspore.mindrecord import FileWriter

    folder.mkdir()
    writer = FileWriter(str(folder / "tokens.mindrecord"), shard_num=count)
    writer.set_page_size(1 << 15)           # small pages: the records fill the file instead of a 32 MiB page
    writer.set_header_size(1 << 14)
    writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "tokens")
    writer.write_raw_data([{"input_ids": np.arange(index, index + 257, dtype=np.int32)} for index in range(records)])
    writer.commit()
    return [folder / f"tokens.mindrecord{index}" for index in range(count)]


@pytest.mark.parametrize("named", ["the first shard", "the directory"])
def test_check_data_reads_every_shard_of_a_sharded_dataset(tmp_path, capsys, named):
    from mf_memopt.document.source import parse_yaml
    from mf_memopt.runtime.datacheck import run_check_data

    shards = _shards(tmp_path / "data")
    where = shards[0] if named == "the first shard" else tmp_path / "data"
    source = parse_yaml(f"train_dataset:\n  data_loader:\n    dataset_dir: {where}\n", "c.yaml")
    assert run_check_data(source) == 0
    assert capsys.readouterr().out == f"{', '.join(map(str, shards))}: all 30 records read, no damage found\n"
    os.truncate(shards[2], shards[2].stat().st_size // 2)        # the last shard loses its records' page
    assert run_check_data(source) == 1
    assert capsys.readouterr().err.startswith(f"{', '.join(map(str, shards))} is damaged: ")
