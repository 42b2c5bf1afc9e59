"""FedAvg as a plain PyTorch loop, on the settings of experiments/mnist-t1.json.

The peer fedsim's speed is measured against (benches/README.md, "Against a PyTorch loop"):
100 IID clients of 600 MNIST images, 10 sampled a round, each training the 784-200-200-10
MLP for one epoch of SGD (batch 32, lr 0.05, no momentum), the server averaging the returned
models weighted by samples and evaluating on the 10,000 test images after every round; 20
rounds. Clients train one after another, as the simplest loop a user would write does.
`--model cnn` trains the FedAvg paper's CNN instead (fedsim's "cnn": two 5x5 convolutions of
32 and 64 channels, padding 2, each followed by ReLU and a 2x2 max-pool, then dense 3136-512
and 512-10); `--model lenet` NIID-Bench's LeNet (examples/custom_model: two 5x5 convolutions
of 6 and 16 channels without padding, each followed by ReLU and a 2x2 max-pool, then dense
256-120-84-10), on the settings of examples/custom_model/lenet.json with the flags below.

Not part of fedsim's build or tests. Run from the repository root, with PyTorch installed:

    python3 benches/peers/pytorch_fedavg.py --threads 2
    python3 benches/peers/pytorch_fedavg.py --threads 2 --model cnn --rounds 5
    python3 benches/peers/pytorch_fedavg.py --threads 2 --model lenet --rounds 1 \
        --clients 10 --per-round 10 --batch-size 64 --lr 0.01 --momentum 0.9

It reads the MNIST copy under datasets/mnist/ and prints one line per round, then the wall
time of the rounds (data loading excluded, as in fedsim's round times).
"""

import argparse
import gzip
import struct
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

MNIST = Path(__file__).resolve().parents[2] / "datasets" / "mnist"


def idx(name):
    """The array an IDX file holds."""
    with gzip.open(MNIST / name, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def mlp():
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 200),
        nn.ReLU(),
        nn.Linear(200, 200),
        nn.ReLU(),
        nn.Linear(200, 10),
    )


def cnn():
    return nn.Sequential(
        nn.Unflatten(1, (1, 28)),
        nn.Conv2d(1, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(3136, 512),
        nn.ReLU(),
        nn.Linear(512, 10),
    )


def lenet():
    return nn.Sequential(
        nn.Unflatten(1, (1, 28)),
        nn.Conv2d(1, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


MODELS = {"mlp": mlp, "cnn": cnn, "lenet": lenet}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--clients", type=int, default=100, help="IID clients")
    parser.add_argument("--per-round", type=int, default=10, help="clients sampled a round")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    x_train = torch.tensor(idx("train-images-idx3-ubyte.gz"), dtype=torch.float32) / 255.0
    y_train = torch.tensor(idx("train-labels-idx1-ubyte.gz"), dtype=torch.int64)
    x_test = torch.tensor(idx("t10k-images-idx3-ubyte.gz"), dtype=torch.float32) / 255.0
    y_test = torch.tensor(idx("t10k-labels-idx1-ubyte.gz"), dtype=torch.int64)
    clients = np.array_split(rng.permutation(len(x_train)), args.clients)

    global_model = MODELS[args.model]()
    worker = MODELS[args.model]()
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for round_ in range(1, args.rounds + 1):
        began = time.perf_counter()
        sampled = rng.choice(args.clients, size=args.per_round, replace=False)
        total = sum(len(clients[c]) for c in sampled)
        summed = [torch.zeros_like(p) for p in global_model.parameters()]
        for client in sorted(sampled):
            worker.load_state_dict(global_model.state_dict())
            optimiser = torch.optim.SGD(worker.parameters(), lr=args.lr, momentum=args.momentum)
            indices = clients[client][rng.permutation(len(clients[client]))]
            for i in range(0, len(indices), args.batch_size):
                batch = indices[i : i + args.batch_size]
                optimiser.zero_grad()
                loss = loss_fn(worker(x_train[batch]), y_train[batch])
                loss.backward()
                optimiser.step()
            weight = len(clients[client]) / total
            with torch.no_grad():
                for s, p in zip(summed, worker.parameters()):
                    s.add_(p, alpha=weight)
        with torch.no_grad():
            for p, s in zip(global_model.parameters(), summed):
                p.copy_(s)
            correct = 0
            for i in range(0, len(x_test), 1000):
                logits = global_model(x_test[i : i + 1000])
                correct += (logits.argmax(1) == y_test[i : i + 1000]).sum().item()
        elapsed = (time.perf_counter() - began) * 1000
        print(f"round {round_}/{args.rounds}  test acc {100 * correct / len(x_test):.2f}%  {elapsed:.0f} ms")
    print(f"done: {args.rounds} rounds in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
