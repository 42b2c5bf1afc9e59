#!/usr/bin/env python3
"""Training throughput of the MLP, the CNN and the LSTM on the GPU (burn's wgpu backend) against
the same machine's CPU cores (flex), from whole `fedsim run`s.

Each case runs a few rounds of a shipped experiment with evaluation only in its last round, then
reads the run folder: the samples trained in each round (the sampled clients' shares in
`partition.json`, times the epochs) over that round's wall time. The first round is left out of
the rate (the GPU compiles its kernels then), and so is the last (it evaluates); the last
round's time beyond its training is the evaluation's.

    cargo build --release --features wgpu
    python3 benches/gpu_throughput.py --fedsim target/release/fedsim --out /tmp/gpu

Needs a Vulkan driver for wgpu. Prints one table row per case; `--cases` and `--runs` pick them.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name: (experiment file, overrides, rounds)
MODELS = {
    "mlp": ("experiments/mnist-t1.json", [], 6),
    "cnn": ("experiments/mnist-t1.json", ["model=cnn"], 5),
    "lstm": ("experiments/shakespeare-lstm.json", [], 3),
}


def run_case(fedsim, out, model, backend, workers, timeout):
    """Runs one case; returns its row of figures, or a row saying why there is none."""
    experiment, overrides, rounds = MODELS[model]
    folder = out / f"{model}-{backend}-{workers}"
    args = [fedsim, "run", str(ROOT / experiment), "--out", str(folder), "--quiet",
            "--backend", backend,
            "--set", f"federation.rounds={rounds}",
            "--set", f"eval.every={rounds}",
            "--set", f"federation.num_parallels={workers}"]
    for override in overrides:
        args += ["--set", override]
    started = time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": folder.name, "error": f"over {timeout} s"}
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        return {"case": folder.name, "error": done.stderr.strip()[-300:]}
    partition = json.loads((folder / "partition.json").read_text())["clients"]
    config = json.loads((folder / "config.json").read_text())
    epochs = config["client"]["epochs"]
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    samples = [epochs * sum(len(partition[c]) for c in r["clients"]) for r in records]
    seconds = [r["wall_ms"] / 1000 for r in records]
    middle = range(1, len(records) - 1)
    rate = sum(samples[i] for i in middle) / sum(seconds[i] for i in middle)
    summary = json.loads((folder / "summary.json").read_text())
    return {
        "case": folder.name,
        "train_samples_per_s": rate,
        "first_round_s": seconds[0],
        "eval_s": seconds[-1] - samples[-1] / rate,
        "accuracy": summary["final_accuracy"],
        "process_s": elapsed,
        "peak_mb": (summary.get("peak_resident_bytes") or 0) / 1e6,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fedsim", required=True, help="the fedsim binary, built with wgpu")
    parser.add_argument("--out", required=True, type=Path, help="a new folder for the runs")
    parser.add_argument("--cases", default="mlp,cnn,lstm")
    parser.add_argument("--runs", default=f"flex:{os.cpu_count()},wgpu:1,wgpu:4",
                        help="backend:workers pairs, comma-separated")
    parser.add_argument("--timeout", type=int, default=150, help="seconds per run at most")
    args = parser.parse_args()
    args.out.mkdir(parents=True)
    rows = []
    for model in args.cases.split(","):
        for pair in args.runs.split(","):
            backend, workers = pair.split(":")
            row = run_case(args.fedsim, args.out, model, backend, int(workers), args.timeout)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\n{'case':<18} {'train samples/s':>16} {'1st round s':>12} {'eval s':>8} "
          f"{'accuracy':>9} {'process s':>10} {'peak MB':>8}")
    for row in rows:
        if "error" in row:
            print(f"{row['case']:<18} failed: {row['error']}")
            continue
        print(f"{row['case']:<18} {row['train_samples_per_s']:>16.0f} {row['first_round_s']:>12.2f} "
              f"{row['eval_s']:>8.2f} {100 * row['accuracy']:>8.2f}% {row['process_s']:>10.1f} "
              f"{row['peak_mb']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
