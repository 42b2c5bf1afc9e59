#!/usr/bin/env python3
"""Builds breast-cancer.csv from the copy of the Breast Cancer Wisconsin (Diagnostic) data set
in Debian's python3-sklearn package, with a header row of feature names and a `diagnosis`
label column ("malignant" or "benign").

Usage, in an empty folder:
    apt-get download python3-sklearn=1.2.1+dfsg-1
    dpkg-deb -x python3-sklearn_1.2.1+dfsg-1_all.deb x
    python3 build.py x/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv > breast-cancer.csv

The source file's first row is `569,30,malignant,benign` (samples, features, class names); each
further row holds 30 features and the class index (0 malignant, 1 benign). The feature names
are those scikit-learn's `load_breast_cancer` gives, in the same order.
"""

import csv
import sys

PARTS = ["radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity",
         "concave points", "symmetry", "fractal dimension"]
FEATURES = ([f"mean {p}" for p in PARTS] + [f"{p} error" for p in PARTS]
            + [f"worst {p}" for p in PARTS])


def main(source):
    with open(source, newline="") as f:
        rows = list(csv.reader(f))
    count, width, *classes = rows[0]
    body = rows[1:]
    assert int(count) == len(body) and int(width) == len(FEATURES), rows[0]
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(FEATURES + ["diagnosis"])
    for row in body:
        assert len(row) == len(FEATURES) + 1, row
        out.writerow(row[:-1] + [classes[int(row[-1])]])


if __name__ == "__main__":
    main(sys.argv[1])
