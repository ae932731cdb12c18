"""Writes numpy_fixtures.txt: .npy files as numpy writes them, one per line as NAME HEX, for
tests/unit/test_npy.cpp (kept as text because the repository ignores *.npy).

Run: python3 launcher/testdata/make_npy_fixtures.py   (needs numpy >= 1.17)
"""
import io
import os

import numpy as np


def npy_bytes(a, version=None):
    f = io.BytesIO()
    if version is None:
        np.save(f, a)
    else:
        np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


FIXTURES = [
    ("f4_2x3", np.arange(6, dtype="<f4").reshape(2, 3) - 2.5, None),
    ("f8_scalar", np.array(3.25, dtype="<f8"), None),
    ("f2_3", np.array([1.0, -2.0, 0.5], dtype="<f2"), None),
    ("i8_0x2", np.zeros((0, 2), dtype="<i8"), None),
    ("u2_bits_3", np.array([0x3F80, 0xC000, 0x0000], dtype="<u2"), None),
    ("b1_4", np.array([True, False, False, True]), None),
    ("U_strings", np.array(["a", "h\u00e9llo", "", "\u65e5\u672c"]), None),
    ("S_bytes", np.array([b"ab", b"xyz"]), None),
    ("i4_v2", np.array([1, -2, 3], dtype="<i4"), (2, 0)),
    ("i4_v3", np.array([7, 8], dtype="<i4"), (3, 0)),
    ("fortran_2x2", np.asfortranarray(np.arange(4, dtype="<f4").reshape(2, 2)), None),
    ("big_endian_i4", np.array([1, 2], dtype=">i4"), None),
    ("structured", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]), None),
]

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "numpy_fixtures.txt")
with open(out, "w") as f:
    for name, a, version in FIXTURES:
        f.write("%s %s\n" % (name, npy_bytes(a, version).hex()))
