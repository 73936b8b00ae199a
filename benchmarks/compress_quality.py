"""(d2) Does quantised activation compression cost model quality? Held-out loss on real text, several seeds.

The corpus is text every machine with Python has: the standard library's own `.py` sources
(tests left out), read as bytes (a 256-token vocabulary, the tiny Llama's). Files are split by
a hash of their path: one in ten is held out, so no held-out sequence was ever trained on. The
training sequences are non-overlapping windows of `seq_length + 1` bytes of the training files.

Each run builds the model of `configs/llama_tiny.yaml` with `session.prepare` (so the plan and its
compressed cells are applied exactly as the launcher applies them), no recompute, and trains it
with AdamW (learning rate 2e-3, warm-up 20 steps, then constant) on batches drawn from the training
windows in an order fixed by the seed. Every `--eval-every` steps it computes the mean loss on the
same held-out sequences. Variants: the baseline (no compression) and int8, int4 and int2 on the inputs
of every Linear of every layer (wq, wk, wv, wo, w1, w2, w3), or only the MLP's (`--scope mlp`). The seed
sets the initial weights and the batch order; the quantiser's own noise is seeded per cell.

    python -m benchmarks.compress_quality [--steps 300] [--seeds 0 1 2] [--scope linears|mlp]
                                          [--methods baseline int8 int4 int2] [--png F] [--out F]

It prints held-out loss (mean and spread over seeds) per method at each evaluation step, and the
difference from the baseline; the data go to `benchmarks/data/compress_quality_<scope>.json` and the
curves to `benchmarks/compress_quality_<scope>.png`. A `--worker` call is one run, in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import zlib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "llama_tiny.yaml"
SCOPES = {"linears": [r"attention\.(wq|wk|wv|wo)", r"feed_forward\.(w1|w2|w3)"],
          "mlp": [r"feed_forward\.(w1|w2|w3)"]}
METHODS = ("baseline", "int8", "int4", "int2")
HELD_OUT_SEQUENCES = 32
LEARNING_RATE, WARMUP = 2e-3, 20


def corpus() -> tuple[bytes, bytes]:
    """(training bytes, held-out bytes) of the standard library's sources, split by a hash of each path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    train, held = [], []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if any(part in ("test", "tests", "idle_test", "site-packages") for part in relative.split("/")):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        (held if zlib.crc32(relative.encode()) % 10 == 0 else train).append(data)
    return b"\n\n".join(train), b"\n\n".join(held)


def windows(text: bytes, length: int, count: int):
    """`count` non-overlapping windows of `length` bytes as int32 ids (a byte 0 would be padding: it becomes 32)."""
    import numpy as np

    ids = np.frombuffer(text, dtype=np.uint8).astype(np.int32)
    ids[ids == 0] = 32
    usable = len(ids) // length
    if usable < count:
        raise SystemExit(f"compress_quality: the corpus has {usable} windows of {length} bytes, {count} needed")
    return ids[:count * length].reshape(count, length)


def variant(method: str, scope: str, seed: int, out: Path) -> Path:
    document = yaml.safe_load(CONFIG.read_text())
    document["seed"] = seed
    document["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
    document.pop("compress_config", None)
    if method != "baseline":
        document["compress_config"] = {"compress": True, "op_compress": [
            {"op_name": pattern, "method": method, "group_size": 256, "layers": True} for pattern in SCOPES[scope]]}
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return out


def worker(config: str, steps: int, eval_every: int, seed: int, result: str) -> None:
    """One run: build with the plan applied, train `steps` steps, evaluate the held-out loss every `eval_every`."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    from mf_memopt.runtime.session import prepare

    ms.set_seed(seed)
    session = prepare(config)
    model_config = session.config.model.model_config
    length, batch = model_config.seq_length + 1, model_config.batch_size
    train_text, held_text = corpus()
    train = windows(train_text, length, steps * batch)
    held = windows(held_text, length, HELD_OUT_SEQUENCES)
    order = np.random.default_rng(seed).permutation(len(train))
    network = session.network
    schedule = [LEARNING_RATE * min(1.0, (step + 1) / WARMUP) for step in range(steps)]
    optimizer = nn.AdamWeightDecay(network.trainable_params(), learning_rate=ms.Tensor(schedule, ms.float32),
                                   beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.01)
    step_cell = nn.TrainOneStepCell(network, optimizer)
    step_cell.set_train(True)

    def held_out_loss() -> float:
        losses = [float(network(ms.Tensor(held[start:start + batch])).asnumpy().reshape(-1)[0])
                  for start in range(0, HELD_OUT_SEQUENCES - HELD_OUT_SEQUENCES % batch, batch)]
        return float(np.mean(losses))

    curve, train_losses = [], []
    for step in range(steps):
        rows = order[step * batch:(step + 1) * batch]
        train_losses.append(float(step_cell(ms.Tensor(train[rows])).asnumpy().reshape(-1)[0]))
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            curve.append([step + 1, held_out_loss()])
    Path(result).write_text(json.dumps({"held_out": curve, "train": train_losses}))


def run(method: str, scope: str, seed: int, steps: int, eval_every: int, work: Path) -> dict:
    config = variant(method, scope, seed, work / f"{method}_{seed}.yaml")
    result = work / f"{method}_{seed}.json"
    env = dict(os.environ, GLOG_v="3", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "benchmarks.compress_quality", "--worker", str(config), str(steps),
                           str(eval_every), str(seed), str(result)], cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compress_quality: {method} seed {seed} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(result.read_text())


def summarise(runs: dict[str, dict[int, dict]]) -> list[tuple]:
    """Rows of (method, step, mean, spread, mean difference from the baseline in %, per-seed differences)."""
    rows = []
    base = runs.get("baseline", {})
    for method, by_seed in runs.items():
        steps = [step for step, _ in next(iter(by_seed.values()))["held_out"]]
        for index, step in enumerate(steps):
            values = [data["held_out"][index][1] for data in by_seed.values()]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            differences = [(data["held_out"][index][1] / base[seed]["held_out"][index][1] - 1) * 100
                           for seed, data in by_seed.items() if seed in base]
            rows.append((method, step, statistics.mean(values), spread,
                         statistics.mean(differences) if differences else None, differences))
    return rows


def plot(runs: dict[str, dict[int, dict]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for method, by_seed in runs.items():
        steps = [step for step, _ in next(iter(by_seed.values()))["held_out"]]
        values = [[data["held_out"][index][1] for data in by_seed.values()] for index in range(len(steps))]
        means = [statistics.mean(column) for column in values]
        low, high = [min(column) for column in values], [max(column) for column in values]
        axis.plot(steps, means, label=method, marker="o", markersize=3)
        axis.fill_between(steps, low, high, alpha=0.15)
    axis.set_xlabel("training step")
    axis.set_ylabel("held-out loss (nats per byte)")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        config, steps, eval_every, seed, result = argv[1:]
        worker(config, int(steps), int(eval_every), int(seed), result)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--scope", choices=sorted(SCOPES), default="linears")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--png", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if "baseline" not in args.methods:
        parser.error("--methods must include baseline (differences are against it)")
    out = args.out or REPO / "benchmarks" / "data" / f"compress_quality_{args.scope}.json"
    png = args.png or REPO / "benchmarks" / f"compress_quality_{args.scope}.png"
    train_text, held_text = corpus()
    print(f"corpus: {len(train_text)} training bytes, {len(held_text)} held-out bytes (standard library of "
          f"Python {sys.version.split()[0]})", flush=True)
    runs: dict[str, dict[int, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="mf_memopt_quality_") as tmp:
        for method in args.methods:
            for seed in args.seeds:
                print(f"training {method}, seed {seed} ...", flush=True)
                runs.setdefault(method, {})[seed] = run(method, args.scope, seed, args.steps, args.eval_every,
                                                        Path(tmp))
    out.write_text(json.dumps({"scope": args.scope, "steps": args.steps, "seeds": args.seeds,
                               "runs": {method: {str(seed): data for seed, data in by_seed.items()}
                                        for method, by_seed in runs.items()}}, indent=1))
    from benchmarks.common import print_table

    rows = [(method, step, f"{mean:.4f}", f"{spread:.4f}", "-" if diff is None else f"{diff:+.2f}%",
             " ".join(f"{value:+.2f}" for value in each))
            for method, step, mean, spread, diff, each in summarise(runs)]
    print_table(f"(d2) held-out loss on the standard library's sources, {args.scope} quantised, "
                f"{len(args.seeds)} seeds", ("method", "step", "mean", "spread (sd)", "vs baseline",
                                             "per seed, %"), rows)
    plot(runs, png, f"held-out loss, {args.scope} quantised ({len(args.seeds)} seeds; band: min-max)")
    print(f"data: {out}; chart: {png}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
