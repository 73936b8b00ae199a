"""One way to run a child: train a YAML with the launcher, or compile its training graph, in a child process the
command owns (`child.run_owned`: a stopped command ends its child and all it started), and read back a typed record.

`estimate --measure` and `compare` train through `train`; `verify` compiles through `compile_graph`, and a
pipeline config's ranks under msrun through `compile_ranks`. A failed, timed-out or silent child raises `ChildFailed`,
whose message names the config and the child's own error lines, never its whole traceback.

A training child is the project's launcher (`run_mindformer_memopt.py --config X --run_mode train --train_steps N
--output_dir WORK/output`) run in `work`. On CPU it prints MindSpore's memory-pool peak at exit (`GLOG_v=2
MS_SUBMODULE_LOG_v="{PRE_ACT:1}"`: `DumpDynamicMemPoolStateInfo] ... peak used mem:NNNM`, whole MiB, cut down); on
Ascend, with `MS_MEMORY_STATISTIC=1`, its device memory statistics (`Actual peak memory usage`, MiB).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config.load import Document, load_document
from ..estimate.pool_log import ALLOCATION_LOG_LEVELS, CPU_PEAK
from ..runtime.child import run_owned
from ..runtime.data import DATASET_DIR, GENERATED

__all__ = ["ASCEND_PEAK", "CPU_PEAK", "ChildFailed", "ChildRun", "compile_graph", "compile_ranks", "msrun_command",
           "race_child", "train"]

ASCEND_PEAK = re.compile(r"[Aa]ctual peak memory usage[^0-9]*([0-9.]+)\s*M")
LAUNCHER = Path(__file__).resolve().parents[2] / "run_mindformer_memopt.py"
_LAUNCH_INLINE = "import sys; from mf_memopt.runtime.launch import main; sys.exit(main())"
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class ChildFailed(RuntimeError):
    """A training or compile child failed, did not finish in time, or left nothing to read; the message says which
    config and why, in a few lines."""


class ChildKilled(ChildFailed):
    """The child was killed by SIGKILL: on a machine with nothing else running, the kernel's out-of-memory killer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildRun:
    """What a child that finished did."""

    config: Path
    log: str
    """Its output (a training child's stdout and stderr, merged)."""
    peak_bytes: int | None = None
    """MindSpore's memory peak as printed (CPU: whole MiB, cut down); None when the child printed none."""
    peak_source: str = ""
    """The pattern of the log line the peak was read from."""


def train(config: Path, *, steps: int, work: Path, runtime: str = "cpu", dataset: Path | None = None,
          record: Path | None = None, allocation_log: bool = False, timeout: float | None = 3600,
          log_file: Path | None = None, extra: Sequence[str] = (), entry: Sequence[str] | None = None,
          env: Mapping[str, str] | None = None) -> ChildRun:
    """Train `config` for `steps` steps with the launcher in a child running in `work`.

    `dataset`: the `--train_dataset_dir` to pass (none when None; `yaml_dataset` gives where the YAML reads).
    `record`: where the launcher writes its step record (`--record_steps`). `allocation_log` (CPU): the child also
    logs every pool allocation (`estimate.pool_log`). `log_file`: the child's output is written there, and a
    failure names it. `extra`: more launcher arguments (`--force`, `--register_path DIR`, ...). `entry`: the command
    that starts the launcher, when not `launcher_head()` (a module that wraps the launcher's `main`); `env`: more
    environment for the child."""
    command = [*(entry or launcher_head()), "--config", str(config), "--run_mode", "train", "--train_steps", str(steps),
               "--output_dir", str(work / "output")]
    if record is not None:
        command += ["--record_steps", str(record)]
    if dataset is not None:
        command += ["--train_dataset_dir", str(dataset)]
    command += list(extra)
    try:
        done = run_owned(command, cwd=work, timeout=timeout,
                         env={**child_environment(runtime, work, allocation_log=allocation_log), **(env or {})})
    except subprocess.TimeoutExpired as error:
        raise ChildFailed(f"training {config} did not finish within {timeout:.0f} s") from error
    log = done.stdout or ""
    if log_file is not None:
        log_file.write_text(log)
    if done.returncode != 0:
        where = f"; its log: {log_file}" if log_file is not None else ""
        raise ChildFailed(f"training {config} failed (exit {done.returncode}): {failure_summary(log)}{where}")
    pattern = CPU_PEAK if runtime == "cpu" else ASCEND_PEAK
    found = pattern.findall(log)
    return ChildRun(config=config, log=log, peak_bytes=round(float(found[-1]) * 2**20) if found else None,
                    peak_source=pattern.pattern)


def race_child(configs: Sequence[Path], *, work: Path, steps: int, timeout: float | None = 3600,
               rotate: bool = True) -> ChildRun:
    """Race `configs` in one child running in `work` (`python -m mf_memopt.auto.race_child`: `steps` steps of each
    plan in turn, each step's wall time printed; the order rotating each step unless `rotate` is False); MindSpore's
    pool report is off, as the pool holds every plan."""
    command = [sys.executable, "-m", "mf_memopt.auto.race_child", "--work", str(work), "--steps", str(steps),
               *([] if rotate else ["--fixed-order"]), *map(str, configs)]
    try:
        done = run_owned(command, cwd=work, timeout=timeout, env={**child_environment("cpu", work), "GLOG_v": "3"})
    except subprocess.TimeoutExpired as error:
        raise ChildFailed(f"racing {len(configs)} plans did not finish within {timeout:.0f} s") from error
    log = done.stdout or ""
    if done.returncode == -signal.SIGKILL:
        raise ChildKilled(f"racing {len(configs)} plans ({configs[0]}, ...) was killed (SIGKILL): the system may have "
                          "run out of memory (a race holds every plan's compiled training step at once)")
    if done.returncode != 0:
        raise ChildFailed(f"racing {len(configs)} plans ({configs[0]}, ...) failed (exit {done.returncode}): "
                          f"{failure_summary(log)}")
    return ChildRun(config=configs[0], log=log)


def compile_graph(config: Path, *, report: Path, env: Mapping[str, str], timeout: float | None = None) -> ChildRun:
    """Compile `config`'s training graph in a child (`python -m mf_memopt.verify.precompile_child CONFIG REPORT`,
    which writes the apply report to `report`), in this process's directory, with `env` added to this process's
    environment (where MindSpore saves the graphs, ...)."""
    command = [sys.executable, "-m", "mf_memopt.verify.precompile_child", str(config), str(report)]
    try:
        done = run_owned(command, cwd=os.getcwd(), env={**os.environ, **env}, timeout=timeout, merge_output=False)
    except subprocess.TimeoutExpired as error:
        raise ChildFailed(f"compiling {config} did not finish within {timeout:.0f} s") from error
    if done.returncode != 0:
        raise ChildFailed("compiling the training graph failed:\n" + tail((done.stderr or done.stdout).strip(), 15))
    return ChildRun(config=config, log=done.stdout or "")


def compile_ranks(config: Path, *, reports: Path, env: Mapping[str, str], workers: int, worker: list[str],
                  timeout: float | None = None) -> ChildRun:
    """Compile `config` on `workers` ranks under msrun, in this process's directory: each rank runs `worker` (which
    writes its apply report below `reports`) and msrun writes each rank's log to `reports`/msrun/worker_<r>.log;
    `env` is the workers' whole environment. A failure names the first worker log that reports an error."""
    reports.mkdir(parents=True, exist_ok=True)
    logs = reports / "msrun"
    try:
        done = run_owned(msrun_command(workers, logs, worker), cwd=os.getcwd(), env=dict(env), timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise ChildFailed(f"compiling {config} on {workers} ranks did not finish within {timeout:.0f} s") from error
    if done.returncode != 0:
        raise ChildFailed(f"compiling the pipeline stages under msrun failed: {_msrun_failure(logs, workers)}")
    return ChildRun(config=config, log=done.stdout or "")


def msrun_command(workers: int, logs: Path, worker: list[str]) -> list[str]:
    """msrun with `workers` local workers running `worker` (each writes `logs`/worker_<r>.log)."""
    return ["msrun", f"--worker_num={workers}", f"--local_worker_num={workers}", f"--master_port={_free_port()}",
            f"--log_dir={logs}", "--join=True", "--cluster_time_out=600", *worker]


def _msrun_failure(logs: Path, workers: int) -> str:
    """The last lines of the first worker log that names an error (else of worker 0's)."""
    paths = [logs / f"worker_{rank}.log" for rank in range(workers)]
    texts = {path: path.read_text(errors="replace") for path in paths if path.is_file()}
    if not texts:
        return f"msrun wrote no worker log under {logs}"
    path = next((path for path, text in texts.items() if "Error" in text or "error" in text), next(iter(texts)))
    tail = " | ".join(line.strip() for line in texts[path].strip().splitlines()[-2:])
    return f"{path.name} ends: {tail}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launcher_head() -> list[str]:
    """The command that starts the launcher: the checkout's script, or the installed package's `main`
    (an installed wheel has no run_mindformer_memopt.py beside it)."""
    return [sys.executable, str(LAUNCHER)] if LAUNCHER.is_file() else [sys.executable, "-c", _LAUNCH_INLINE]


def yaml_dataset(config: Path | Document, output_dir: Path) -> Path | None:
    """Where a training child reads its data: tokens the YAML asks to generate are written under the child's own
    output; the YAML's own dataset is read where it is, a relative path taken from this process's directory (the
    child runs in another); None when the YAML names none. `config`: a path (read here) or a document already
    read."""
    source = load_document(config).source
    if source.has(GENERATED):
        return output_dir / "data" / "tokens.mindrecord"
    dataset = source.get(DATASET_DIR)
    return Path(str(dataset)).resolve() if isinstance(dataset, str) and dataset else None


def child_command(config: Path, steps: int, output_dir: Path) -> list[str]:
    """The launcher's command line for training `config` into `output_dir`, reading the data the YAML names."""
    dataset = yaml_dataset(config, output_dir)
    return [*launcher_head(), "--config", str(config), "--run_mode", "train", "--train_steps", str(steps),
            "--output_dir", str(output_dir), *(["--train_dataset_dir", str(dataset)] if dataset is not None else [])]


def child_environment(runtime: str, work: Path, *, allocation_log: bool = False) -> dict[str, str]:
    """This process's environment, with the package importable and MindSpore printing the peak `runtime` reads."""
    path = os.pathsep.join(filter(None, [str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "LOG_MF_PATH": str(work / "mindformers_log")}
    if runtime == "cpu":
        env.update({"GLOG_v": "2", "MS_SUBMODULE_LOG_v": ALLOCATION_LOG_LEVELS if allocation_log else "{PRE_ACT:1}"})
    else:
        env.update({"MS_MEMORY_STATISTIC": "1", "GLOG_v": env.get("GLOG_v", "2")})
    return env


_ERROR_LINE = re.compile(r"^(?:[\w.]*(?:Error|Exception)\b.*|.*ConfigError.*|\S+:\d+: .*)$")


def failure_summary(log: str) -> str:
    """The lines that say why a child failed: a ConfigError's issue lines, else the exception line."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    issues = [line for line in lines if re.match(r"^\S+\.ya?ml:\d+: ", line)]
    if issues:
        return "\n".join(issues)
    errors = [line for line in lines if _ERROR_LINE.match(line) and not line.startswith("Traceback")]
    if errors:
        first = errors[-1]
        detail = next((line.strip() for line in lines[lines.index(first) + 1:]
                       if line.strip().startswith("-") or "fail" in line.lower()), "")
        return first[:400] + (f" {detail[:300]}" if detail else "")
    return tail(log, 5)


def tail(text: str, count: int) -> str:
    """The last `count` lines of `text`."""
    return "\n".join(text.splitlines()[-count:])
