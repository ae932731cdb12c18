#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into tests/fuzz/seeds/<target>/ (checked in).

fuzz_model's seeds are not here: scripts/fuzz.sh takes them from the ONNX conformance
corpus. Run with the venv's Python (numpy): .venv/bin/python tests/fuzz/make_seeds.py
"""
import io
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def npy_bytes(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a)
    else:
        np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def npy_seeds():
    put("npy", "f4_2x3", npy_bytes(np.arange(6, dtype="<f4").reshape(2, 3)))
    put("npy", "i8_scalar", npy_bytes(np.array(7, dtype="<i8")))
    put("npy", "u1_empty", npy_bytes(np.zeros((0, 4), dtype="u1")))
    put("npy", "b1", npy_bytes(np.array([True, False, True])))
    put("npy", "f2", npy_bytes(np.array([1.5, -2], dtype="<f2")))
    put("npy", "u2_bf16_bits", npy_bytes(np.array([0x3F80, 0xC000], dtype="<u2")))
    put("npy", "c8", npy_bytes(np.array([1 + 2j], dtype="<c8")))
    put("npy", "U3", npy_bytes(np.array(["ab", "xyz"], dtype="<U3")))
    put("npy", "f8_v2", npy_bytes(np.ones((2, 2), dtype="<f8"), version=(2, 0)))
    put("npy", "i1_v3", npy_bytes(np.array([-8, 7], dtype="i1"), version=(3, 0)))


def fnv1a(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint(tensors, meta):
    """training/checkpoint.cpp's layout: magic, u32 version, u64 header length, JSON header,
    tensor bytes, u64 FNV-1a of everything before it."""
    entries, blob = [], b""
    for name, a in tensors:
        dtype = {np.dtype("<f4"): 1, np.dtype("<i8"): 7, np.dtype("<f2"): 10}[a.dtype]
        entries.append({"name": name, "dtype": dtype, "shape": list(a.shape), "offset": len(blob),
                        "bytes": a.nbytes})
        blob += a.tobytes()
    head = json.dumps({"meta": meta, "tensors": entries}, separators=(",", ":")).encode()
    body = b"ONYXCKPT" + struct.pack("<IQ", 1, len(head)) + head + blob
    return body + struct.pack("<Q", fnv1a(body))


def checkpoint_seeds():
    meta = {"format": "onyx-training", "params": [["w", [2, 2]]], "optimizer": "adamw", "step": 3,
            "micro": 3, "seed": 0}
    w = np.arange(4, dtype="<f4").reshape(2, 2)
    ckpt = checkpoint([("param/w", w), ("optim/w/m", np.zeros((2, 2), "<f4")),
                       ("optim/step", np.array([3], "<i8"))], meta)
    # The harness reads the first byte as a flag: odd = re-sum the rest after mutation.
    put("checkpoint", "adamw_resum", b"\x01" + ckpt)
    put("checkpoint", "adamw_as_is", b"\x00" + ckpt)
    put("checkpoint", "empty_resum", b"\x01" + checkpoint([], {"format": "onyx-training"}))
    put("checkpoint", "half_resum", b"\x01" + checkpoint([("h", np.ones(3, "<f2"))], {}))


def launch_seeds():
    # First byte: bit 0 = hostfile (else --hosts), the rest = ranks - 1.
    put("launch", "hosts", bytes([4 << 1]) + b"h1:2,h2:3,h3")
    put("launch", "hosts_one", bytes([0]) + b"localhost")
    put("launch", "hostfile", bytes([(3 << 1) | 1]) + b"# cluster\nh1 slots=2\nh2 slots=2 max_slots=4\n\nh3\n")
    put("launch", "hostfile_crlf", bytes([1]) + b"node-a.example slots = 8\r\n")


def config_seeds():
    put("train_config", "digits", json.dumps(
        {"data": "out/digits/train", "val-data": "out/digits/test", "optimizer": "adamw", "lr": 0.003,
         "schedule": "cosine", "warmup": 40, "epochs": 20, "batch": 32}).encode())
    put("train_config", "sgd", json.dumps(
        {"optimizer": "sgd", "momentum": 0.9, "nesterov": True, "clip-norm": 1.0, "betas": [0.9, 0.99],
         "param-group": ["bias:weight_decay=0"], "recompute-budget": "256MiB", "precision": "fp16"}).encode())
    put("train_config", "step", json.dumps({"schedule": "step", "step-size": 10, "gamma": 0.5}).encode())


if __name__ == "__main__":
    npy_seeds()
    checkpoint_seeds()
    launch_seeds()
    config_seeds()
