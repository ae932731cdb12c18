#!/usr/bin/env python3
"""Runs the ONNX backend test corpus through the `onyx run` command line, case by case.

For every case this converts test_data_set_0/input_*.pb to .npy with the README's
conventions (bfloat16 as uint16 bits, float8/float4e2m1/float8e8m0 as uint8 bits, int4/int2
as int8, uint4/uint2 as uint8, strings as numpy unicode), runs

    onyx run model.onnx --input NAME=FILE.npy ... --output-dir DIR --threads 1

with a time limit, loads DIR/*.npy and compares them with output_*.pb by the rule of
tests/conformance/compare.cpp (dtype and shape equal; |a-b| <= atol + rtol*|b| for floats
with NaN == NaN and infinities exact; exact for integers, bools and strings; bit-exact for
complex). Cases are listed, fed and toleranced exactly as onyx_conformance does: only
test_data_set_0, input_<i>.pb feeds the i-th graph input that is not an initializer, a
missing output_<i>.pb expects an empty optional, light models get arange(n)/n float32
inputs and the tolerances of real/test_<name>/data.json.

Statuses: pass, fail, error (onyx exited non-zero, timed out or wrote unreadable output)
and cli-unsupported (the command line cannot express the case: an input name holding '=').
Sequence inputs are passed as folders of 0.npy, 1.npy, ...; empty optional and left-out
inputs are not passed, as the runner leaves them out. `onyx` reports every failure as one stderr line
and an exit code, so the runner's "unsupported" (NotImplemented) shows up here as "error".

  .venv/bin/python tools/cli_conformance.py [--suite node,simple] [--filter SUBSTRING]
      [--csv OUT.csv] [--compare-with RUNNER.csv] [--jobs 2] [--timeout 60] [--onyx PATH]
      [--expected tests/conformance/expected_failures.txt --check]

--compare-with takes the CSV `onyx_conformance --csv FILE` writes and lists every case
whose verdict differs; the runner's "unsupported" and "error" count as the same verdict.
--check fails (exit 1) as the runner's does: a case that does not pass and is not in the
--expected list, or a listed case that passes (ctest `conformance_cli` runs it).
The corpus is $ONYX_ONNX_TESTS, else ../shared/onnx-tests next to the repository.
"""

import argparse
import csv
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np
import onnx
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = "node,simple,pytorch-converted,pytorch-operator,light"
STATUSES = ("pass", "fail", "error", "unsupported", "cli-unsupported")

TP = onnx.TensorProto
# ONNX types numpy lacks: (file dtype on disk, dtype that decodes the bits, or None for ints).
SPECIAL = {
    TP.BFLOAT16: (np.uint16, "bfloat16"),
    TP.FLOAT8E4M3FN: (np.uint8, "float8_e4m3fn"),
    TP.FLOAT8E4M3FNUZ: (np.uint8, "float8_e4m3fnuz"),
    TP.FLOAT8E5M2: (np.uint8, "float8_e5m2"),
    TP.FLOAT8E5M2FNUZ: (np.uint8, "float8_e5m2fnuz"),
    TP.FLOAT4E2M1: (np.uint8, "float4_e2m1fn"),
    TP.FLOAT8E8M0: (np.uint8, "float8_e8m0fnu"),
    TP.INT4: (np.int8, None),
    TP.INT2: (np.int8, None),
    TP.UINT4: (np.uint8, None),
    TP.UINT2: (np.uint8, None),
}
FLOAT_TYPES = {TP.FLOAT, TP.DOUBLE, TP.FLOAT16} | {k for k, v in SPECIAL.items() if v[1]}


class CliUnsupported(Exception):
    """The command line cannot express this case."""


# ---- .pb <-> numpy in the .npy conventions ---------------------------------------------------


class Tensor:
    """An array as `onyx run` reads and writes it, plus the ONNX element type it stands for."""

    def __init__(self, elem, array):
        self.elem, self.array = elem, array


def tensor_from_proto(tp, base_dir):
    a = numpy_helper.to_array(tp, base_dir)
    elem = tp.data_type
    if elem == TP.STRING:
        items = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in a.ravel()]
        a = np.array(items, dtype=str).reshape(a.shape) if items else np.zeros(a.shape, "<U1")
    elif elem in SPECIAL:
        file_dtype, bits_of = SPECIAL[elem]
        # Floats keep their bit patterns; sub-byte ints widen by value (one per element).
        a = a.view(file_dtype) if bits_of else a.astype(file_dtype)
    return Tensor(elem, np.array(a, order="C"))  # ascontiguousarray would make scalars 1-d


def load_pb(path, kind):
    """A tensor, a list of tensors (sequence) or None (empty optional), as onyx_conformance."""
    data = open(path, "rb").read()
    base = os.path.dirname(os.path.abspath(path))
    if kind == "tensor":
        tp = TP()
        tp.ParseFromString(data)
        return tensor_from_proto(tp, base)
    if kind == "sequence":
        sp = onnx.SequenceProto()
        sp.ParseFromString(data)
        return sequence_from_proto(sp, base)
    op = onnx.OptionalProto()
    op.ParseFromString(data)
    return optional_from_proto(op, base)


def sequence_from_proto(sp, base):
    if sp.elem_type not in (onnx.SequenceProto.TENSOR, onnx.SequenceProto.UNDEFINED):
        raise ValueError(f"sequence of element type {sp.elem_type} is not handled")
    return [tensor_from_proto(t, base) for t in sp.tensor_values]


def optional_from_proto(op, base):
    if op.elem_type == onnx.OptionalProto.TENSOR:
        return tensor_from_proto(op.tensor_value, base)
    if op.elem_type == onnx.OptionalProto.SEQUENCE:
        return sequence_from_proto(op.sequence_value, base)
    if op.elem_type == onnx.OptionalProto.UNDEFINED:
        return None
    raise ValueError(f"optional of element type {op.elem_type} is not handled")


def kind_of(type_proto):
    field = type_proto.WhichOneof("value")
    return {"sequence_type": "sequence", "optional_type": "optional"}.get(field, "tensor")


def elem_of(type_proto):
    """The tensor element type of a tensor or optional(tensor) type; None otherwise."""
    if type_proto.HasField("optional_type"):
        type_proto = type_proto.optional_type.elem_type
    return type_proto.tensor_type.elem_type if type_proto.HasField("tensor_type") else None


# ---- comparison: tests/conformance/compare.cpp -----------------------------------------------


def as_float64(t):
    if t.elem in SPECIAL and SPECIAL[t.elem][1]:
        import ml_dtypes  # installed with onnx

        return t.array.view(getattr(ml_dtypes, SPECIAL[t.elem][1])).astype(np.float64)
    return t.array.astype(np.float64)


def compare_tensors(got, want, rtol, atol):
    """"" when `got` (as read from onyx's .npy) matches `want`, else a one-line reason."""
    a = got.array
    b = want.array
    # numpy dtypes stand in for onyx dtypes: the same file dtype is the same convention.
    strings = b.dtype.kind == "U"
    if (a.dtype.kind == "U") != strings or (not strings and a.dtype != b.dtype):
        return f"dtype {a.dtype.str} != expected {b.dtype.str} ({TP.DataType.Name(want.elem)})"
    if a.shape != b.shape:
        return f"shape {list(a.shape)} != expected {list(b.shape)}"
    if b.dtype.kind == "U":
        for i, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
            if x != y:
                return f"element {i}: '{x}' != expected '{y}'"
        return ""
    if b.dtype.kind == "c":
        return "" if a.tobytes() == b.tobytes() else "complex values differ"
    if want.elem not in FLOAT_TYPES:
        diff = np.flatnonzero(a.ravel() != b.ravel())
        if diff.size:
            i = diff[0]
            return f"element {i}: {a.ravel()[i]} != expected {b.ravel()[i]}"
        return ""
    got.elem = want.elem  # same file dtype: decode onyx's bits as the expected type
    x, y = as_float64(got).ravel(), as_float64(want).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        nan = np.isnan(x) | np.isnan(y)
        inf = (np.isinf(x) | np.isinf(y)) & ~nan
        close = np.abs(x - y) <= atol + rtol * np.abs(y)
        ok = np.where(nan, np.isnan(x) & np.isnan(y), np.where(inf, x == y, close))
        bad = np.flatnonzero(~ok)
        if not bad.size:
            return ""
        d = np.abs(x[bad] - y[bad])
        worst = float(np.max(d[~np.isnan(d)])) if np.any(~np.isnan(d)) else 0.0
    i = bad[0]
    return (f"{bad.size} of {y.size} elements differ; first at {i}: {x[i]:g} vs expected "
            f"{y[i]:g}; max abs diff {worst:.3g}")


def compare_values(got, want, rtol, atol):
    if want is None:
        return "" if got is None else "expected an empty optional"
    if got is None:
        return "got an empty optional"
    if isinstance(want, Tensor):
        if not isinstance(got, Tensor):
            return "expected a tensor, got a sequence"
        return compare_tensors(got, want, rtol, atol)
    if not isinstance(got, list):
        return "expected a sequence, got a tensor"
    if len(got) != len(want):
        return f"sequence length {len(got)} != expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        r = compare_tensors(g, w, rtol, atol)
        if r:
            return f"sequence element {i}: {r}"
    return ""


# ---- cases -----------------------------------------------------------------------------------


def read_ops(corpus):
    ops = {}
    with open(os.path.join(corpus, "cases.csv"), newline="") as f:
        for row in csv.DictReader(f):
            ops[row["suite"] + "/" + row["case_name"]] = row["op_type"]
    return ops


def list_cases(corpus, suites):
    """The cases onyx_conformance runs, in its order."""
    ops = read_ops(corpus)
    cases = []
    for suite in suites:
        d = os.path.join(corpus, suite)
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            p = os.path.join(d, entry)
            c = {"suite": suite, "rtol": 1e-3, "atol": 1e-7}
            if suite == "light":
                if not entry.endswith(".onnx"):
                    continue
                stem = entry[: -len(".onnx")]
                c.update(name=stem, model=p, op="<model>",
                         light_output=os.path.join(d, stem + "_output_0.pb"))
                meta = os.path.join(corpus, "real", "test_" + stem[6:], "data.json")
                if os.path.exists(meta):
                    j = json.load(open(meta))
                    c["rtol"], c["atol"] = j.get("rtol", c["rtol"]), j.get("atol", c["atol"])
            else:
                if not os.path.isfile(os.path.join(p, "model.onnx")):
                    continue
                c.update(name=entry, model=os.path.join(p, "model.onnx"),
                         data_dir=os.path.join(p, "test_data_set_0"),
                         op=ops.get(suite + "/" + entry, "<multi>"))
            cases.append(c)
    return cases


def output_file_name(name):
    """launcher/cmd_run.cpp output_file_name: '/' and '\\' become '_', a leading '.' gets '_'."""
    name = name.replace("/", "_").replace("\\", "_")
    if not name or name[0] == ".":
        name = "_" + name
    return name


def read_output(name, elem, stdout, out_dir):
    """One output as `onyx run` reported it: a Tensor, a list of them, or None."""
    prefix = f"  {name:<24} "
    line = next((ln for ln in stdout.splitlines() if ln.startswith(prefix)), None)
    if line is None:
        raise RuntimeError(f"onyx run printed no line for output '{name}'")
    rest = line[len(prefix):]
    if rest == "none (empty optional)":
        return None
    m = re.fullmatch(r"sequence of (\d+) tensors", rest)
    count = int(m.group(1)) if m else None
    stem = output_file_name(name)
    files = ([os.path.join(stem, f"{i}.npy") for i in range(count)] if m else [stem + ".npy"])
    # Sequence elements carry no ONNX type in the file; decode them as the expected type.
    ts = [Tensor(elem, np.load(os.path.join(out_dir, f), allow_pickle=False)) for f in files]
    return ts if m else ts[0]


def light_input(value_info):
    tt = value_info.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n, dtype=np.float64) / max(n, 1)).astype(np.float32).reshape(shape)


def prepare(case, model, work):
    """(--input arguments, expected outputs) for a case; CliUnsupported when inexpressible."""
    # Session::inputs(): inputs that are also initializers are not listed (onnx_io.cpp).
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    args, expected = [], []
    if case["suite"] == "light":
        for i, vi in enumerate(inputs):
            path = os.path.join(work, f"input_{i}.npy")
            np.save(path, light_input(vi))
            args.append(f"--input={vi.name}={path}")
        expected.append(load_pb(case["light_output"], "tensor"))
        return args, expected
    for i, vi in enumerate(inputs):
        pb = os.path.join(case["data_dir"], f"input_{i}.pb")
        if "=" in vi.name:
            raise CliUnsupported(f"input name '{vi.name}' holds '=' (--input NAME=FILE)")
        # A left-out input and an empty optional are both not passed, as the runner does.
        value = load_pb(pb, kind_of(vi.type)) if os.path.exists(pb) else None
        if value is None:
            continue
        path = os.path.join(work, f"input_{i}")
        if isinstance(value, list):  # a sequence: a folder of 0.npy, 1.npy, ...
            os.makedirs(path)
            for k, t in enumerate(value):
                np.save(os.path.join(path, f"{k}.npy"), t.array, allow_pickle=False)
        else:
            path += ".npy"
            np.save(path, value.array, allow_pickle=False)
        args.append(f"--input={vi.name}={path}")
    for i, vi in enumerate(model.graph.output):
        pb = os.path.join(case["data_dir"], f"output_{i}.pb")
        expected.append(load_pb(pb, kind_of(vi.type)) if os.path.exists(pb) else None)
    return args, expected


def run_case(job):
    case, onyx_bin, timeout = job
    start = time.monotonic()
    work = tempfile.mkdtemp(prefix="onyx_cli_")
    try:
        status, reason = run_case_in(case, onyx_bin, timeout, work)
    except CliUnsupported as e:
        status, reason = "cli-unsupported", str(e)
    except Exception as e:  # a corpus file this script cannot read
        status, reason = "error", f"script: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return status, " ".join(reason.split())[:300], time.monotonic() - start


def run_case_in(case, onyx_bin, timeout, work):
    model = onnx.load(case["model"], load_external_data=False)
    args, expected = prepare(case, model, work)
    out_dir = os.path.join(work, "out")
    cmd = [onyx_bin, "--log-level", "off", "run", case["model"], "--threads", "1",
           "--output-dir", out_dir] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           errors="replace")
    except subprocess.TimeoutExpired:
        return "error", f"timed out after {timeout:g} s"
    if p.returncode != 0:
        msg = p.stderr.strip().splitlines()
        why = msg[-1] if msg else f"exit status {p.returncode}"
        if p.returncode < 0:
            why = f"crashed with signal {-p.returncode}"
        return "error", why.removeprefix("onyx: error: ")
    outs = model.graph.output
    for i, want in enumerate(expected):
        if i >= len(outs):
            break
        try:
            got = read_output(outs[i].name, elem_of(outs[i].type), p.stdout, out_dir)
        except Exception as e:
            return "error", f"output '{outs[i].name}': {e}"
        if isinstance(got, list) and isinstance(want, list):
            for g, w in zip(got, want):
                g.elem = w.elem
        why = compare_values(got, want, case["rtol"], case["atol"])
        if why:
            return "fail", f"output '{outs[i].name}': {why}"
    return "pass", ""


# ---- report ----------------------------------------------------------------------------------


def print_counts(title, counts):
    print(title)
    cols = ["cases", "pass", "fail", "error", "unsupported", "cli-unsupported"]
    print(f"{'suite':<20} " + " ".join(f"{c:>{max(6, len(c))}}" for c in cols))
    for suite in sorted(counts):
        c = counts[suite]
        row = [sum(c.values())] + [c.get(k, 0) for k in cols[1:]]
        print(f"{suite:<20} " + " ".join(f"{v:>{max(6, len(k))}}" for v, k in zip(row, cols)))


def tally(rows):
    counts = defaultdict(lambda: defaultdict(int))
    for r in rows:
        counts[r["suite"]][r["status"]] += 1
        counts["total"][r["status"]] += 1
    return counts


def verdict(status):
    """Runner "unsupported" (NotImplemented) and "error" look alike from the command line."""
    return "error" if status in ("error", "unsupported") else status


def compare_with(rows, runner_csv):
    with open(runner_csv, newline="") as f:
        runner = {(r["suite"], r["case"]): r for r in csv.DictReader(f)}
    picked = [runner[(r["suite"], r["case"])] for r in rows if (r["suite"], r["case"]) in runner]
    print_counts(f"\nrunner ({runner_csv}), same cases:", tally(picked))
    diffs, missing = [], 0
    for r in rows:
        other = runner.get((r["suite"], r["case"]))
        if other is None:
            missing += 1
        elif r["status"] != "cli-unsupported" and verdict(r["status"]) != verdict(other["status"]):
            diffs.append((r, other))
    print(f"\n{len(diffs)} disagreement(s) with the runner"
          + (f"; {missing} case(s) not in {runner_csv}" if missing else ""))
    for r, other in diffs:
        print(f"  {r['suite']}/{r['case']}: cli {r['status']} ({r['reason'][:160]}) | "
              f"runner {other['status']} ({other['reason'][:160]})")
    return diffs


def check_expected(rows, path):
    """As onyx_conformance --check: every case passes unless listed, and no listed case passes
    (except one whose reason starts with "[random]": an unseeded reference it may match by
    chance). A case the command line cannot express counts as a failure: it must be listed."""
    listed, may_pass = set(), set()
    with open(path) as f:
        for ln in f:
            key, _, why = ln.partition("#")
            key = key.strip()
            if not key:
                continue
            listed.add(key)
            if why.strip().startswith("[random]"):
                may_pass.add(key)
    bad = []
    for r in rows:
        key = f"{r['suite']}/{r['case']}"
        if r["status"] != "pass" and key not in listed:
            bad.append(f"  regression: {key}: {r['status']} ({r['reason'][:200]})")
        elif r["status"] == "pass" and key in listed and key not in may_pass:
            bad.append(f"  now passes, remove it from {path}: {key}")
    print(f"\ncheck against {path}: " + ("ok" if not bad else f"{len(bad)} problem(s)"))
    for b in bad:
        print(b)
    return not bad


def main():
    default_corpus = os.environ.get("ONYX_ONNX_TESTS") or os.path.join(REPO, "..", "shared",
                                                                       "onnx-tests")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=default_corpus)
    ap.add_argument("--onyx", default=os.path.join(REPO, "build", "launcher", "onyx"))
    ap.add_argument("--suite", default=SUITES, help="comma-separated suites")
    ap.add_argument("--filter", default="", help="only cases whose suite/name contains this")
    ap.add_argument("--csv", default="", help="write per-case results here")
    ap.add_argument("--compare-with", default="", help="CSV from onyx_conformance --csv")
    ap.add_argument("--jobs", "-j", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--expected", default="",
                    help="expected-failures list (tests/conformance/expected_failures.txt)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a case not in --expected fails, or a listed case passes")
    ap.add_argument("--verbose", "-v", action="store_true")
    a = ap.parse_args()
    if a.check and not a.expected:
        sys.exit("cli_conformance: error: --check needs --expected FILE")

    if not os.path.isdir(a.corpus):
        sys.exit(f"cli_conformance: error: ONNX test corpus not found at '{a.corpus}'; "
                 "set ONYX_ONNX_TESTS")
    if not os.access(a.onyx, os.X_OK):
        sys.exit(f"cli_conformance: error: no onyx binary at '{a.onyx}' (build it or pass --onyx)")
    cases = [c for c in list_cases(a.corpus, a.suite.split(","))
             if a.filter in c["suite"] + "/" + c["name"]]
    if not cases:
        sys.exit(f"cli_conformance: error: no cases found under '{a.corpus}'")

    t0 = time.monotonic()
    jobs = [(c, a.onyx, a.timeout) for c in cases]
    rows = []
    with multiprocessing.Pool(max(1, a.jobs)) as pool:
        for k, (c, (status, reason, secs)) in enumerate(zip(cases, pool.imap(run_case, jobs))):
            rows.append({"case": c["name"], "suite": c["suite"], "op": c["op"], "status": status,
                         "reason": reason, "seconds": f"{secs:.3f}"})
            if a.verbose:
                print(f"[{k + 1}/{len(cases)}] {c['suite']}/{c['name']}: {status} {reason[:160]}",
                      file=sys.stderr)
    secs = time.monotonic() - t0

    print_counts("onyx run (command line):", tally(rows))
    print(f"({len(rows)} cases in {secs:.1f} s" + (f"; details in {a.csv})" if a.csv else ")"))
    unsupported = [r for r in rows if r["status"] == "cli-unsupported"]
    if unsupported:
        print(f"\n{len(unsupported)} case(s) the command line cannot express:")
        for r in unsupported:
            print(f"  {r['suite']}/{r['case']}: {r['reason']}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, ["case", "suite", "op", "status", "reason", "seconds"])
            w.writeheader()
            w.writerows(rows)
    failed = False
    if a.compare_with:
        failed |= bool(compare_with(rows, a.compare_with))
    if a.check:
        failed |= not check_expected(rows, a.expected)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
