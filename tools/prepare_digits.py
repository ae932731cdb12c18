#!/usr/bin/env python3
"""Writes the 1,797-image digits data set as `onyx train` data folders of .npy files.

Reads sklearn/datasets/data/digits.csv.gz as Debian's python3-sklearn package ships it
(64 pixel values in 0..16, then the digit, per line) with the standard library and numpy
only; sklearn itself is not imported. Splits it the same way examples/digits.h does: every
fifth image (index % 5 == 0, 360 images) is held out for test, the other 1,437 train.

    <out>/train/x.npy        float32 [1437, 64], pixels scaled to [0, 1]
    <out>/train/labels.npy   int64   [1437]
    <out>/test/...           the same for the 360 held-out images
    <out>/train_img/x.npy    float32 [1437, 1, 8, 8] (and test_img/), for the CNN

Usage: prepare_digits.py [--csv PATH] [--out DIR]
"""
import argparse
import gzip
import os
import sys

import numpy as np

DEFAULT_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def read_digits(path):
    """Images as float32 [N, 64] in [0, 1] and labels as int64 [N]."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != 65:
        sys.exit(f"prepare_digits: {path}: expected 65 columns (64 pixels + label), found shape "
                 f"{rows.shape}")
    return (rows[:, :64] / 16.0).astype(np.float32), rows[:, 64].astype(np.int64)


def write(folder, x, y):
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "labels.npy"), y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", default=DEFAULT_CSV, help="digits.csv.gz (python3-sklearn)")
    ap.add_argument("--out", default="out/digits", help="folder for train/ and test/")
    args = ap.parse_args()
    if not os.path.exists(args.csv):
        sys.exit(f"prepare_digits: {args.csv} not found; install Debian's python3-sklearn "
                 "(scripts/setup.sh does) or pass --csv")
    x, y = read_digits(args.csv)
    test = np.arange(len(y)) % 5 == 0
    for split, mask in (("train", ~test), ("test", test)):
        write(os.path.join(args.out, split), x[mask], y[mask])
        write(os.path.join(args.out, split + "_img"), x[mask].reshape(-1, 1, 8, 8), y[mask])
    print(f"prepare_digits: {int((~test).sum())} train and {int(test.sum())} test images in "
          f"{args.out}/")


if __name__ == "__main__":
    main()
