"""(d2) Does quantised activation compression cost model quality? Held-out loss on real text, paired over seeds.

The corpus is text every machine with Python has: the standard library's own `.py` sources
(tests left out), read as bytes (a 256-token vocabulary, the tiny Llama's). Files are split by
a hash of their path: one in ten is held out, so no held-out sequence was ever trained on. The
training sequences are all non-overlapping windows of `seq_length + 1` bytes of the training files,
drawn in an order fixed by the seed; the held-out sequences are `--held-out` windows spread evenly
over the held-out files (the same for every run).

Each run builds the model of `configs/llama_tiny.yaml` (its batch size and sequence length set by
`--batch` and `--seq-length`) with `session.prepare`, so the plan and its compressed cells are applied
exactly as the launcher applies them, with no recompute. It trains with AdamW (peak learning rate
`--lr`, linear warm-up over the first 10% of the steps, then cosine decay to a tenth of the peak,
gradients clipped to a global norm of 1) and computes the mean loss on the held-out sequences at
step 0, every `--eval-every` steps and at the last `--final-evals` steps `--final-spacing` apart.
Variants: the baseline (no compression) and int8, int4 and int2 on the inputs of every Linear of
every layer (wq, wk, wv, wo, w1, w2, w3), or only the MLP's (`--scope mlp`); and, on request, `null`:
the baseline with its initial weights multiplied by 1 + 1e-6 * N(0, 1), a control that shows how far
a perturbation that cannot cost quality moves the result.

The comparison is paired. The seed sets the initial weights and the batch order, so every method
of one seed starts from the same weights (the step-0 held-out loss, where compression does not act
yet, is checked to be identical) and sees the same batches; the quantiser's own noise is seeded per
cell, and a run repeated is bit-identical. Each method's result is its difference from the baseline
of the same seed, in % of the baseline's loss; the headline ("final") averages the held-out loss over
the final evaluations before taking the difference, and its 95% interval over seeds (Student's t) is
read against issue 22's targets (int8 within 0.5%, int4 within 1%).

    python -m benchmarks.compress_quality [--steps 300] [--eval-every 50] [--seeds 0 1 2 3 4 5]
        [--scope linears|mlp] [--methods baseline int8 int4 int2 [null]] [--batch 16] [--seq-length 64]
        [--lr 3e-4] [--held-out 256] [--final-evals 3] [--final-spacing 10] [--reuse] [--png F] [--out F]

It prints the baseline's held-out loss (mean and sd over seeds) and each method's paired difference
(mean, sd, per seed) at each evaluation step and for the final average, then the verdicts; the data
go to `benchmarks/data/compress_quality_<scope>.json` (written after every run) and the curves to
`benchmarks/compress_quality_<scope>.png`. `--reuse` keeps the runs already in that file (same
settings) and trains only the missing ones: it resumes an interrupted run, adds a method or a seed,
or only redraws. A `--worker` call is one run, in its own process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "llama_tiny.yaml"
SCOPES = {"linears": [r"attention\.(wq|wk|wv|wo)", r"feed_forward\.(w1|w2|w3)"],
          "mlp": [r"feed_forward\.(w1|w2|w3)"]}
METHODS = ("baseline", "int8", "int4", "int2", "null")
DEFAULT_METHODS = ["baseline", "int8", "int4", "int2"]
NULL_SCALE = 1e-6       # "null": the baseline with its initial weights scaled by 1 + 1e-6 * N(0, 1), a control
TARGETS = {"int8": 0.5, "int4": 1.0}        # issue 22: final held-out loss within this % of the baseline
WARMUP_FRACTION, FINAL_LR_FRACTION, CLIP_NORM = 0.1, 0.1, 1.0


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


def windows(text: bytes, length: int):
    """Every non-overlapping window of `length` bytes, as int32 ids (a byte 0 would be padding: it becomes 32)."""
    import numpy as np

    ids = np.frombuffer(text, dtype=np.uint8).astype(np.int32)
    ids[ids == 0] = 32
    usable = len(ids) // length
    return ids[:usable * length].reshape(usable, length)


def held_out_windows(text: bytes, length: int, count: int):
    """`count` windows spread evenly over the held-out text (so they come from many files, not the first few)."""
    import numpy as np

    every = windows(text, length)
    if len(every) < count:
        raise SystemExit(f"compress_quality: the held-out text has {len(every)} windows of {length} bytes, "
                         f"{count} needed")
    return every[np.linspace(0, len(every) - 1, count).round().astype(int)]


def schedule(steps: int, peak: float) -> list[float]:
    """Linear warm-up over the first 10% of the steps, then cosine decay from `peak` to a tenth of it."""
    warmup = max(1, round(WARMUP_FRACTION * steps))
    rates = []
    for step in range(steps):
        if step < warmup:
            rates.append(peak * (step + 1) / warmup)
        else:
            progress = (step - warmup) / max(1, steps - warmup - 1)
            rates.append(peak * (FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress))))
    return rates


def eval_steps(steps: int, eval_every: int, final_evals: int, final_spacing: int) -> list[int]:
    """Step 0, every `eval_every` steps, and the last `final_evals` steps `final_spacing` apart ending at `steps`."""
    final = {steps - index * final_spacing for index in range(final_evals)}
    return sorted({0, *range(eval_every, steps + 1, eval_every), *(step for step in final if step > 0)})


def final_steps(steps: int, final_evals: int, final_spacing: int) -> list[int]:
    return sorted(step for step in (steps - index * final_spacing for index in range(final_evals)) if step > 0)


# Two-sided 95% quantiles of Student's t by degrees of freedom (the normal's beyond).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def interval(values: list[float]) -> tuple[float, float]:
    """The 95% confidence interval of the mean of `values` (Student's t; a point when there is one value)."""
    mean = statistics.mean(values)
    if len(values) < 2:
        return mean, mean
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def variant(method: str, scope: str, seed: int, batch: int, seq_length: int, out: Path) -> Path:
    document = yaml.safe_load(CONFIG.read_text())
    document["seed"] = seed
    document["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
    document["runner_config"]["batch_size"] = batch
    document["train_dataset"]["batch_size"] = batch
    document["model"]["model_config"]["batch_size"] = batch
    document["model"]["model_config"]["seq_length"] = seq_length
    document.pop("compress_config", None)
    if method not in ("baseline", "null"):
        document["compress_config"] = {"compress": True, "op_compress": [
            {"op_name": pattern, "method": method, "group_size": 256, "layers": True} for pattern in SCOPES[scope]]}
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return out


def worker(spec_file: str) -> None:
    """One run: build with the plan applied, train, evaluate the held-out loss at the spec's steps."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from mf_memopt.runtime.session import prepare

    spec = json.loads(Path(spec_file).read_text())
    steps, seed = spec["steps"], spec["seed"]
    ms.set_seed(seed)
    session = prepare(spec["config"])
    model_config = session.config.model.model_config
    length, batch = model_config.seq_length + 1, model_config.batch_size
    train_text, held_text = corpus()
    train = windows(train_text, length)
    if len(train) < steps * batch:
        raise SystemExit(f"compress_quality: {len(train)} training windows, {steps * batch} needed")
    held = held_out_windows(held_text, length, spec["held_out"])
    order = np.random.default_rng(seed).permutation(len(train))[:steps * batch]
    network = session.network
    weights = network.trainable_params()
    if spec.get("perturb"):
        noise = np.random.default_rng(10_000 + seed)
        for weight in weights:
            value = weight.asnumpy()
            weight.set_data(ms.Tensor((value * (1 + spec["perturb"] * noise.standard_normal(value.shape)))
                                      .astype(value.dtype)))
    optimizer = nn.AdamWeightDecay(weights, learning_rate=ms.Tensor(schedule(steps, spec["lr"]), ms.float32),
                                   beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.01)

    class ClippedStep(nn.TrainOneStepCell):
        def construct(self, *inputs):
            loss = self.network(*inputs)
            grads = self.grad_no_sens(self.network, self.weights)(*inputs)
            grads = ops.clip_by_global_norm(grads, CLIP_NORM)
            return ops.depend(loss, self.optimizer(grads))

    step_cell = ClippedStep(network, optimizer)
    step_cell.set_train(True)

    def held_out_loss() -> float:
        losses = [float(network(ms.Tensor(held[start:start + batch])).asnumpy().reshape(-1)[0])
                  for start in range(0, len(held) - len(held) % batch, batch)]
        return float(np.mean(losses))

    wanted = set(spec["eval_steps"])
    curve, train_losses, step_seconds, eval_seconds = [], [], [], []
    began = time.perf_counter()

    def evaluate(step: int) -> None:
        start = time.perf_counter()
        curve.append([step, held_out_loss()])
        eval_seconds.append(time.perf_counter() - start)

    if 0 in wanted:
        evaluate(0)
    for step in range(steps):
        rows = order[step * batch:(step + 1) * batch]
        start = time.perf_counter()
        train_losses.append(float(step_cell(ms.Tensor(train[rows])).asnumpy().reshape(-1)[0]))
        step_seconds.append(time.perf_counter() - start)
        if step + 1 in wanted:
            evaluate(step + 1)
    Path(spec["result"]).write_text(json.dumps({"held_out": curve, "train": train_losses,
                                                "seconds": time.perf_counter() - began,
                                                "step_seconds": step_seconds, "eval_seconds": eval_seconds}))


def run(method: str, args: argparse.Namespace, seed: int, work: Path) -> dict:
    config = variant(method, args.scope, seed, args.batch, args.seq_length, work / f"{method}_{seed}.yaml")
    result = work / f"{method}_{seed}.json"
    spec = work / f"{method}_{seed}.spec.json"
    spec.write_text(json.dumps({"config": str(config), "steps": args.steps, "seed": seed, "lr": args.lr,
                                "perturb": NULL_SCALE if method == "null" else 0.0,
                                "held_out": args.held_out,
                                "eval_steps": eval_steps(args.steps, args.eval_every, args.final_evals,
                                                         args.final_spacing),
                                "result": str(result)}))
    env = dict(os.environ, GLOG_v="3", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "benchmarks.compress_quality", "--worker", str(spec)],
                          cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compress_quality: {method} seed {seed} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(result.read_text())


def final_loss(data: dict, steps: list[int]) -> float:
    """The mean held-out loss over the evaluations at `steps`."""
    return statistics.mean(value for step, value in data["held_out"] if step in steps)


def paired(runs: dict[str, dict[int, dict]], final: list[int]) -> list[dict]:
    """Per method and evaluation step ("final": the average of the last evaluations): the baseline's mean and
    sd over seeds, the method's mean and sd, and its difference from the same seed's baseline in %."""
    base = runs["baseline"]
    seeds = sorted(base)
    steps = [step for step, _ in base[seeds[0]]["held_out"]]
    points = [(step, lambda data, index=index: data["held_out"][index][1]) for index, step in enumerate(steps)]
    points.append(("final", lambda data: final_loss(data, final)))
    rows = []
    for method, by_seed in runs.items():
        common = [seed for seed in seeds if seed in by_seed]
        for step, value in points:
            base_values = [value(base[seed]) for seed in common]
            values = [value(by_seed[seed]) for seed in common]
            differences = [(v / b - 1) * 100 for v, b in zip(values, base_values)]
            rows.append({"method": method, "step": step, "seeds": common,
                         "baseline_mean": statistics.mean(base_values), "baseline_sd": _sd(base_values),
                         "mean": statistics.mean(values), "sd": _sd(values),
                         "diff_mean": statistics.mean(differences), "diff_sd": _sd(differences),
                         "diff_ci95": interval(differences), "diffs": differences})
    return rows


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def pairing_check(runs: dict[str, dict[int, dict]]) -> list[str]:
    """Seeds whose step-0 held-out losses differ between methods (compression does not act before training;
    the null control's perturbed weights are left out)."""
    problems = []
    for seed, data in runs["baseline"].items():
        if not data["held_out"] or data["held_out"][0][0] != 0:
            continue
        start = data["held_out"][0][1]
        for method, by_seed in runs.items():
            if method != "null" and seed in by_seed and abs(by_seed[seed]["held_out"][0][1] - start) > 1e-6 * abs(start):
                problems.append(f"{method} seed {seed}: step-0 loss {by_seed[seed]['held_out'][0][1]:.6f} "
                                f"against the baseline's {start:.6f}")
    return problems


def table(rows: list[dict], methods: list[str]) -> tuple[list[str], list[list[str]]]:
    """One line per evaluation step: the baseline's mean (sd), then each method's paired difference."""
    header = ["step", "baseline (sd)"] + [method for method in methods if method != "baseline"]
    by_key = {(row["method"], row["step"]): row for row in rows}
    lines = []
    for step in [row["step"] for row in rows if row["method"] == "baseline"]:
        base = by_key[("baseline", step)]
        line = [str(step), f"{base['baseline_mean']:.4f} ({base['baseline_sd']:.4f})"]
        for method in header[2:]:
            row = by_key[(method, step)]
            line.append(f"{row['diff_mean']:+.2f}% ± {row['diff_sd']:.2f} ("
                        + ", ".join(f"{value:+.2f}" for value in row["diffs"]) + ")")
        lines.append(line)
    return header, lines


def verdicts(rows: list[dict]) -> list[str]:
    """Each method's final paired difference, its 95% interval over seeds, and the issue's target if it has one."""
    lines = []
    for row in rows:
        if row["step"] != "final" or row["method"] == "baseline":
            continue
        low, high = row["diff_ci95"]
        line = (f"{row['method']}: final {row['diff_mean']:+.2f}% (sd {row['diff_sd']:.2f} over "
                f"{len(row['seeds'])} seeds), 95% interval [{low:+.2f}%, {high:+.2f}%]")
        target = TARGETS.get(row["method"])
        if target is not None:
            if -target <= low and high <= target:
                reading = f"within ±{target}% (95%)"
            elif high < -target or low > target:
                reading = f"outside ±{target}% (95%)"
            else:
                reading = f"not resolved against ±{target}%"
            worse = "yes" if high <= target else "not shown"
            line += f": {reading}; no worse than +{target}% at 95%: {worse}"
        lines.append(line)
    return lines


COLOURS = {"baseline": "black", "int8": "tab:blue", "int4": "tab:orange", "int2": "tab:green", "null": "tab:grey"}


def plot(runs: dict[str, dict[int, dict]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    base = runs["baseline"]
    for method, by_seed in runs.items():
        seeds = sorted(by_seed)
        steps = [step for step, _ in by_seed[seeds[0]]["held_out"]]
        values = [[by_seed[seed]["held_out"][index][1] for seed in seeds] for index in range(len(steps))]
        shown = [index for index, step in enumerate(steps) if step > 0]
        style = {"color": COLOURS[method], "linestyle": "--" if method == "null" else "-"}
        left.plot([steps[i] for i in shown], [statistics.mean(values[i]) for i in shown], label=method,
                  marker="o", markersize=3, **style)
        if method == "baseline":
            continue
        differences = [[(by_seed[seed]["held_out"][index][1] / base[seed]["held_out"][index][1] - 1) * 100
                        for seed in seeds if seed in base] for index in shown]
        right.plot([steps[i] for i in shown], [statistics.mean(column) for column in differences],
                   label=method, marker="o", markersize=3, **style)
        right.fill_between([steps[i] for i in shown], [min(column) for column in differences],
                           [max(column) for column in differences], alpha=0.12, color=COLOURS[method])
    for level, style in ((0.5, ":"), (1.0, "--")):
        right.axhline(level, color="grey", linestyle=style, linewidth=0.8)
        right.axhline(-level, color="grey", linestyle=style, linewidth=0.8)
    right.axhline(0, color="black", linewidth=0.6)
    left.set_xlabel("training step")
    left.set_ylabel("held-out loss (nats per byte), mean over seeds")
    left.set_title(title)
    left.legend()
    right.set_xlabel("training step")
    right.set_ylabel("held-out loss vs the same seed's baseline (%)")
    right.set_title("paired difference (line: mean; band: min-max over seeds)")
    right.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        worker(argv[1])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--scope", choices=sorted(SCOPES), default="linears")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=DEFAULT_METHODS,
                        help="null: a control, the baseline with its initial weights perturbed by 1e-6 (relative)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-4, help="peak learning rate")
    parser.add_argument("--held-out", type=int, default=256, help="held-out sequences")
    parser.add_argument("--final-evals", type=int, default=3, help="evaluations averaged for the final number")
    parser.add_argument("--final-spacing", type=int, default=10, help="steps between those evaluations")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the runs already in --out (same settings) and train only the missing ones")
    parser.add_argument("--png", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if "baseline" not in args.methods:
        parser.error("--methods must include baseline (differences are against it)")
    methods = ["baseline"] + [method for method in args.methods if method != "baseline"]
    out = args.out or REPO / "benchmarks" / "data" / f"compress_quality_{args.scope}.json"
    png = args.png or REPO / "benchmarks" / f"compress_quality_{args.scope}.png"
    train_text, held_text = corpus()
    print(f"corpus: {len(train_text)} training bytes, {len(held_text)} held-out bytes (standard library of "
          f"Python {sys.version.split()[0]}); batch {args.batch} x {args.seq_length + 1} bytes, {args.steps} steps, "
          f"peak lr {args.lr:g}, {args.held_out} held-out sequences", flush=True)
    final = final_steps(args.steps, args.final_evals, args.final_spacing)
    settings = {"scope": args.scope, "steps": args.steps, "seeds": args.seeds, "batch": args.batch,
                "seq_length": args.seq_length, "lr": args.lr, "held_out": args.held_out, "final_steps": final}
    runs: dict[str, dict[int, dict]] = {}
    if args.reuse and out.exists():
        previous = json.loads(out.read_text())
        if any(previous.get(key) != value for key, value in settings.items() if key != "seeds"):
            raise SystemExit(f"compress_quality: {out} was measured with other settings; run without --reuse")
        runs = {method: {int(seed): data for seed, data in by_seed.items()}
                for method, by_seed in previous["runs"].items() if method in methods}
    began = time.perf_counter()

    def save(**more) -> None:
        out.write_text(json.dumps({**settings, **more, "runs": {method: {str(seed): data for seed, data in
                                                                         by_seed.items()}
                                                                for method, by_seed in runs.items()}}, indent=1))

    with tempfile.TemporaryDirectory(prefix="mf_memopt_quality_") as tmp:
        for seed in args.seeds:             # seed by seed: an interrupted run leaves whole pairs behind
            for method in methods:
                if seed in runs.get(method, {}):
                    continue
                print(f"training {method}, seed {seed} ...", end=" ", flush=True)
                data = run(method, args, seed, Path(tmp))
                runs.setdefault(method, {})[seed] = data
                save()
                print(f"{data['seconds']:.0f} s, held-out loss {data['held_out'][-1][1]:.4f}", flush=True)
    problems = pairing_check(runs)
    rows = paired(runs, final)
    save(pairing_problems=problems, summary=rows,       # the runs' own seconds: --reuse keeps earlier ones
         train_seconds=round(sum(data["seconds"] for by_seed in runs.values() for data in by_seed.values())))
    from benchmarks.common import print_table

    header, lines = table(rows, methods)
    print_table(f"(d2) held-out loss on the standard library's sources, {args.scope} quantised, "
                f"{len(args.seeds)} seeds; methods: mean paired difference ± sd (per seed, %); "
                f"final: mean of steps {', '.join(map(str, final))}", header, lines)
    print("pairing: " + ("every method starts from its seed's baseline weights (step-0 losses equal)"
                         if not problems else "NOT PAIRED: " + "; ".join(problems)))
    for line in verdicts(rows):
        print(line)
    plot(runs, png, f"held-out loss, {args.scope} quantised ({len(args.seeds)} seeds)")
    print(f"{time.perf_counter() - began:.0f} s in all; data: {out}; chart: {png}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
