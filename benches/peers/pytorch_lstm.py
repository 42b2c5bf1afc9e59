"""The Shakespeare LSTM as a plain PyTorch loop: training and evaluation throughput.

The peer of `cargo bench --bench lstm` (benches/README.md, "The Shakespeare LSTM"), on the same
data, shapes and work: the built-in Shakespeare set under datasets/shakespeare/, LEAF's
next-character model (an embedding of 8, `nn.LSTM` layers, a dense layer from the last step's
output to the 80-character vocabulary). Training is rounds of 8 clients of 300 consecutive
training sequences, each client a fresh copy of the model trained for one epoch of SGD at
batch 10 and lr 0.8, one after another, as the simplest loop a user would write does;
evaluation is the 16,538 test sequences in batches of 1,000 under `torch.no_grad()`. Each
figure is the median of three measurements of about 1.5 s after a warm-up, as the bench's.

Not part of fedsim's build or tests. Run from the repository root, with PyTorch installed:

    python3 benches/peers/pytorch_lstm.py --threads 1    # and 2
"""

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

SHAKESPEARE = Path(__file__).resolve().parents[2] / "datasets" / "shakespeare"
VOCABULARY = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
CLIENTS, SEQUENCES, BATCH, LR = 8, 300, 10, 0.8
EVAL_BATCH = 1000
MEASURE_S = 1.5


def split(name):
    """The token ids of a split's sequences `[n, 80]` and of their next characters `[n]`."""
    with gzip.open(SHAKESPEARE / name / "shakespeare.json.gz", "rt") as f:
        data = json.load(f)
    xs, ys = [], []
    for user in data["users"]:
        samples = data["user_data"][user]
        xs += [[VOCABULARY.index(c) for c in x] for x in samples["x"]]
        ys += [VOCABULARY.index(y) for y in samples["y"]]
    return torch.tensor(xs, dtype=torch.int64), torch.tensor(ys, dtype=torch.int64)


class CharLstm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.embedding = nn.Embedding(len(VOCABULARY), 8)
        self.lstm = nn.LSTM(8, hidden[0], num_layers=len(hidden), batch_first=True)
        self.output = nn.Linear(hidden[-1], len(VOCABULARY))

    def forward(self, tokens):
        outputs, _ = self.lstm(self.embedding(tokens))
        return self.output(outputs[:, -1])


def per_second(work):
    """How many times a second `work` runs, after one warm-up run."""
    work()
    start, runs = time.perf_counter(), 0
    while time.perf_counter() - start < MEASURE_S:
        work()
        runs += 1
    return runs / (time.perf_counter() - start)


def training_round(global_model, worker, x, y):
    loss_fn = nn.CrossEntropyLoss()
    for client in range(CLIENTS):
        worker.load_state_dict(global_model.state_dict())
        optimiser = torch.optim.SGD(worker.parameters(), lr=LR)
        first = client * SEQUENCES
        for i in range(first, first + SEQUENCES, BATCH):
            optimiser.zero_grad()
            loss = loss_fn(worker(x[i : i + BATCH]), y[i : i + BATCH])
            loss.backward()
            optimiser.step()


def evaluation(model, x, y):
    with torch.no_grad():
        correct = 0
        for i in range(0, len(x), EVAL_BATCH):
            correct += (model(x[i : i + EVAL_BATCH]).argmax(1) == y[i : i + EVAL_BATCH]).sum()
    return correct


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    x_train, y_train = split("train")
    x_test, y_test = split("test")
    print(f"PyTorch {torch.__version__}, {args.threads} thread(s)")
    print("| model | work | samples/s |")
    print("| --- | --- | --- |")
    for label, hidden in [("lstm, 1 x 128", [128]), ("lstm, 2 x 256", [256, 256])]:
        global_model, worker = CharLstm(hidden), CharLstm(hidden)
        train = [
            per_second(lambda: training_round(global_model, worker, x_train, y_train))
            * CLIENTS
            * SEQUENCES
            for _ in range(3)
        ]
        print(f"| {label} | training | {statistics.median(train):.0f} |")
        evaluate = [
            per_second(lambda: evaluation(global_model, x_test, y_test)) * len(x_test)
            for _ in range(3)
        ]
        print(f"| {label} | evaluation | {statistics.median(evaluate):.0f} |")


if __name__ == "__main__":
    main()
