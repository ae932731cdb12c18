#!/usr/bin/env python3
"""Feeds every op of the ONNX backend corpus out-of-range integer attributes through `onyx run`.

Issue 14: a bad attribute (axis = rank, -rank-1, huge; empty perms; negative sizes) must be an
onyx::Error naming the node when the session is built, never a crash. For each op this takes
the first case of the corpus's `node` suite whose model has exactly one node, and for every
INT or INTS attribute the node has, plus every INT/INTS attribute the op's ONNX schema declares
that the node lacks, writes mutated models (onnx.checker is not run: invalid is the point):

    INT:  2**40, -2**40, -1, 0, r, r+1, -r-1     (r: rank of the node's first input)
    INTS: [], [2**40], [-2**40], the original list with its first element replaced by
          2**40, -2**40, -1 and 0, the original plus one element, the original minus its last

and runs each with the case's real inputs (converted by tools/cli_conformance.py):

    onyx run MODEL --input NAME=FILE.npy ... --output-dir DIR --threads 1

Verdicts: ok when onyx exits 0, or exits 1 with an "onyx: error: ..." line that is neither an
internal error nor C++ library text (std::, vector::, bad_alloc, ...). Anything else is a
finding: a signal (crash, abort), another exit code, a timeout, or one of those error lines.
An ok run whose error says "out of memory" (an allocation sized by a huge but valid attribute,
e.g. pads = 2**40) is listed as a note, not a finding. Findings are printed one a line, then a
summary; the exit status is 1 when there are findings.

  .venv/bin/python tests/validation/bad_attributes.py --onyx build/launcher/onyx
      [--corpus DIR] [--jobs 2] [--timeout 20] [--filter SUBSTRING] [--max-memory-gb 16]
      [--cases-per-op 1] [--verbose]

Each onyx run gets an address-space limit (RLIMIT_AS, --max-memory-gb, 0 for none, as a
sanitizer build needs), so an allocation sized by a huge attribute fails the same way on a
machine that overcommits memory instead of being killed while it fills terabytes.

The corpus is $ONYX_ONNX_TESTS, else ../shared/onnx-tests next to the repository.
"""

import argparse
import resource
import copy
import csv
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import onnx
from onnx import helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
import cli_conformance  # noqa: E402  (.pb -> .npy conversion and the --input arguments)

AT = onnx.AttributeProto
HUGE = 2**40
# stderr text that means the error was not a validation message.
BAD_TEXT = ("internal error", "vector::", "basic_string", "std::", "bad_alloc", "max_size",
            "_M_")


def first_rank(model):
    """Rank of the node's first input from the graph's declared types; None if unknown."""
    node = model.graph.node[0]
    if not node.input or not node.input[0]:
        return None
    types = {vi.name: vi.type for vi in list(model.graph.input) + list(model.graph.value_info)}
    for t in model.graph.initializer:
        if t.name == node.input[0]:
            return len(t.dims)
    tp = types.get(node.input[0])
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return len(tp.tensor_type.shape.dim)


def int_attributes(model):
    """{name: (type, original value or None)} for the node's and its schema's INT/INTS attributes."""
    node = model.graph.node[0]
    found = {}
    for a in node.attribute:
        if a.type == AT.INT:
            found[a.name] = (AT.INT, a.i)
        elif a.type == AT.INTS:
            found[a.name] = (AT.INTS, list(a.ints))
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    opset = next((o.version for o in model.opset_import
                  if (o.domain if o.domain not in ("ai.onnx",) else "") == domain), None)
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain) if opset else None
    except Exception:  # an op onnx does not know (e.g. a custom domain)
        schema = None
    if schema is not None:
        for name, attr in sorted(schema.attributes.items()):
            if name not in found and attr.type in (AT.INT, AT.INTS):
                found[name] = (attr.type, None)
    return found


def mutations(model):
    """(attribute, value) pairs: the out-of-range values to try, deduplicated per attribute."""
    r = first_rank(model)
    out = []
    for name, (kind, orig) in int_attributes(model).items():
        if kind == AT.INT:
            vals = [HUGE, -HUGE, -1, 0]
            if r is not None:
                vals += [r, r + 1, -r - 1]
        else:
            vals = [[], [HUGE], [-HUGE]]
            base = orig or []
            if base:
                for v in (HUGE, -HUGE, -1, 0):
                    vals.append([v] + base[1:])
                vals.append(base + [base[-1]])
                vals.append(base[:-1])
            else:
                vals.append([0])
        seen = []
        for v in vals:
            if v != orig and v not in seen:
                seen.append(v)
        out += [(name, v) for v in seen]
    return out


def mutate(model, name, value):
    m = copy.deepcopy(model)
    node = m.graph.node[0]
    keep = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(keep)
    node.attribute.append(helper.make_attribute(name, value) if value != [] else
                          helper.make_attribute(name, [], attr_type=AT.INTS))
    return m


def verdict(p_returncode, stderr, timed_out, timeout):
    """("ok", "") or ("finding", what happened)."""
    if timed_out:
        return "finding", f"timed out after {timeout:g} s"
    if p_returncode == 0:
        return "ok", ""
    if p_returncode < 0:
        try:
            sig = signal.Signals(-p_returncode).name
        except ValueError:
            sig = str(-p_returncode)
        return "finding", f"killed by signal {sig}"
    if p_returncode != 1:
        return "finding", f"exit status {p_returncode}"
    lines = [ln for ln in stderr.splitlines() if ln.startswith("onyx: error:")]
    if not lines:
        return "finding", "exit status 1 without an 'onyx: error:' line"
    bad = [t for t in BAD_TEXT if t in lines[0]]
    if bad:
        return "finding", f"error line holds '{bad[0]}'"
    if "out of memory" in lines[0]:
        return "note", "out of memory"
    return "ok", ""


def limit_memory(gb):
    """A preexec_fn setting the child's address-space limit; None when gb is 0."""
    if not gb:
        return None
    limit = int(gb * 2**30)
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_op(job):
    """All mutations of one case; a list of result dicts."""
    case, onyx_bin, timeout, max_gb = job
    work = tempfile.mkdtemp(prefix="onyx_badattr_")
    results = []
    try:
        model = onnx.load(case["model"], load_external_data=False)
        try:
            args, _ = cli_conformance.prepare(case, model, work)
        except cli_conformance.CliUnsupported as e:
            return [dict(case=case["name"], op=case["op"], attr="-", value="-", status="skipped",
                         what=str(e), tail="", seconds=0.0)]
        for k, (name, value) in enumerate(mutations(model)):
            path = os.path.join(work, f"m{k}.onnx")
            onnx.save(mutate(model, name, value), path)
            out_dir = os.path.join(work, f"out{k}")
            cmd = [onyx_bin, "--log-level", "off", "run", path, "--threads", "1",
                   "--output-dir", out_dir] + args
            t0 = time.monotonic()
            timed_out, rc, err = False, None, ""
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                   errors="replace", preexec_fn=limit_memory(max_gb))
                rc, err = p.returncode, p.stderr
            except subprocess.TimeoutExpired as e:
                timed_out = True
                err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (
                    e.stderr or "")
            status, what = verdict(rc, err, timed_out, timeout)
            tail = " | ".join(ln.strip() for ln in err.strip().splitlines()[-3:])
            results.append(dict(case=case["name"], op=case["op"], attr=name, value=str(value),
                                status=status, what=what, tail=tail[:400],
                                seconds=time.monotonic() - t0))
            shutil.rmtree(out_dir, ignore_errors=True)
            os.remove(path)
    except Exception as e:  # a corpus file this script cannot read
        results.append(dict(case=case["name"], op=case["op"], attr="-", value="-",
                            status="skipped", what=f"script: {type(e).__name__}: {e}", tail="",
                            seconds=0.0))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def pick_cases(corpus, filt, per_op=1):
    """The first `per_op` single-node `node` cases of every op, in name order."""
    single = set()
    with open(os.path.join(corpus, "cases.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["suite"] == "node" and row["n_nodes"] == "1":
                single.add(row["case_name"])
    picked, seen = [], defaultdict(int)
    for c in cli_conformance.list_cases(corpus, ["node"]):
        if c["name"] not in single:
            continue
        if seen[c["op"]] >= per_op:
            continue
        seen[c["op"]] += 1
        if filt in c["op"] or filt in c["name"]:
            picked.append(c)
    return picked


def main():
    default_corpus = os.environ.get("ONYX_ONNX_TESTS") or os.path.join(REPO, "..", "shared",
                                                                       "onnx-tests")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onyx", default=os.path.join(REPO, "build", "launcher", "onyx"))
    ap.add_argument("--corpus", default=default_corpus)
    ap.add_argument("--jobs", "-j", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--filter", default="", help="only ops or case names containing this")
    ap.add_argument("--cases-per-op", type=int, default=1,
                    help="single-node cases per op (more: slower, wider)")
    ap.add_argument("--max-memory-gb", type=float, default=16,
                    help="address-space limit of each onyx run (0: none)")
    ap.add_argument("--verbose", "-v", action="store_true")
    a = ap.parse_args()
    if not os.path.isdir(a.corpus):
        sys.exit(f"bad_attributes: error: ONNX test corpus not found at '{a.corpus}'; "
                 "set ONYX_ONNX_TESTS or pass --corpus")
    if not os.access(a.onyx, os.X_OK):
        sys.exit(f"bad_attributes: error: no onyx binary at '{a.onyx}' (build it or pass --onyx)")
    cases = pick_cases(a.corpus, a.filter, a.cases_per_op)
    if not cases:
        sys.exit(f"bad_attributes: error: no single-node cases under '{a.corpus}'")

    t0 = time.monotonic()
    rows = []
    jobs = [(c, a.onyx, a.timeout, a.max_memory_gb) for c in cases]
    with multiprocessing.Pool(max(1, a.jobs)) as pool:
        for k, res in enumerate(pool.imap_unordered(run_op, jobs)):
            rows += res
            if a.verbose and res:
                n_bad = sum(r["status"] == "finding" for r in res)
                print(f"[{k + 1}/{len(cases)}] {res[0]['op']} ({res[0]['case']}): {len(res)} "
                      f"run(s), {n_bad} finding(s)", file=sys.stderr)
    secs = time.monotonic() - t0

    findings = [r for r in rows if r["status"] == "finding"]
    skipped = [r for r in rows if r["status"] == "skipped"]
    runs = [r for r in rows if r["status"] != "skipped"]
    findings.sort(key=lambda r: (r["op"], r["attr"], r["value"]))
    for r in findings:
        print(f"FINDING {r['op']} ({r['case']}) {r['attr']}={r['value']}: {r['what']}; "
              f"stderr: {r['tail'] or '(empty)'}")
    for r in (r for r in rows if r["status"] == "note"):
        print(f"note {r['op']} ({r['case']}) {r['attr']}={r['value']}: {r['what']}; "
              f"stderr: {r['tail']}")
    for r in skipped:
        print(f"skipped {r['op']} ({r['case']}): {r['what']}")

    per_op = defaultdict(lambda: [0, 0])
    for r in runs:
        per_op[r["op"]][0] += 1
        per_op[r["op"]][1] += r["status"] == "finding"
    bad_ops = sorted(op for op, (_, f) in per_op.items() if f)
    print(f"\nbad_attributes: {len(cases)} case(s) of {len({c['op'] for c in cases})} op(s), {len(runs)} run(s), "
          f"{len(runs) - len(findings)} ok, {len(findings)} finding(s), "
          f"{sum(r['status'] == 'note' for r in rows)} note(s), {len(skipped)} skipped "
          f"({secs:.1f} s)")
    if bad_ops:
        print(f"{'op':<32} {'runs':>5} {'findings':>8}")
        for op in bad_ops:
            print(f"{op:<32} {per_op[op][0]:>5} {per_op[op][1]:>8}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
