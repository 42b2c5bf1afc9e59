"""How well a clustered algorithm's clusters recover rotated MNIST's groups.

Reads each run folder of a sweep over `rotated-mnist` (`fedsim sweep
experiments/sweeps/clustered.json --out DIR`, then `python3 clustered_groups.py DIR`) and
prints, per run, the share of clients whose cluster after the last round holds exactly the
clients of their own rotation group, the number of clusters in use, and the first round from
which every client of the round was so placed. Client c of n is in group c * groups / n (the
data set's rule); a run without `clusters` in its records (FedAvg) has one model for all.
"""

import json
import sys
from pathlib import Path


def groups_of(config):
    n = config["federation"]["num_clients"]
    groups = config["data"].get("groups", 4)
    return {client: client * groups // n for client in range(n)}


def placed_right(clusters, group):
    """The clients whose cluster holds exactly their group's clients, of those in `clusters`."""
    members = {}
    for client, cluster in clusters.items():
        members.setdefault(cluster, set()).add(client)
    in_group = {}
    for client in clusters:
        in_group.setdefault(group[client], set()).add(client)
    return {c for c in clusters if members[clusters[c]] == in_group[group[c]]}


def main(sweep):
    print("run\tclients placed right\tclusters\tall right from round")
    for run in sorted(p for p in Path(sweep).iterdir() if (p / "metrics.jsonl").exists()):
        config = json.loads((run / "config.json").read_text())
        group = groups_of(config)
        records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        if not records[-1].get("clusters"):
            print(f"{run.name}\t-\t1\t-")
            continue
        settled = None
        for record in records:
            clusters = {int(c): k for c, k in record["clusters"].items()}
            right = placed_right(clusters, group)
            settled = settled if len(right) == len(clusters) else None
            if settled is None and len(right) == len(clusters):
                settled = record["round"]
        last = {int(c): k for c, k in records[-1]["clusters"].items()}
        right = placed_right(last, group)
        print(f"{run.name}\t{len(right)}/{len(last)}\t{len(set(last.values()))}\t{settled or '-'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
