#!/usr/bin/env python3
"""Mutation campaign over golden files' metadata: every params key of every file made missing, null,
of each wrong JSON kind, zero, negative, huge, plus unknown and contradictory keys, broken tolerance
entries and tensors renamed away; each mutant goes through `mlakit run` and `mlakit check
--candidate`. A mutant must either run (status 0, or 1 for a check whose outputs no longer match) or
be refused cleanly: status 2, one stderr line "mlakit: <op>: ..." naming the key or tensor, no
library exception text, and no output file written. Anything else (a signal, another status, a
raw exception, two lines) is a finding.

usage: params_campaign.py --mlakit BINARY [GOLDEN_FILE ...] [--per-op N] [--max-bytes B] [--jobs J]
       params_campaign.py --write-mutants DIR [GOLDEN_FILE ...] [--per-op N] [--max-bytes B]
       (no files: every file in data/golden; --per-op N keeps the first N files of each operator;
       --write-mutants writes the mutants as files, e.g. as a fuzzer's seeds, and runs nothing)
"""
import argparse
import concurrent.futures
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RAW_TEXT = ("json.exception", "std::", "bad_alloc", "vector::", "basic_string", "terminate called", "Sanitizer")


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def key_values(value):
    """The mutants of one params value: (class, new value); None drops the key."""
    out = [("missing", None), ("null", "null"), ("string", '"7"'), ("bool", "true"), ("array", "[1]"),
           ("object", '{"a":1}'), ("zero", "0"), ("negative", "-1"), ("negative_big", "-2147483649"),
           ("huge", "2147483648"), ("huge64", "9223372036854775807"), ("huge_u64", "18446744073709551615"),
           ("real", "1.5"), ("big_real", "1e300"), ("tiny_real", "1e-300"), ("neg_real", "-3.5")]
    if isinstance(value, str):
        out.append(("other_string", '"nonsense"'))
    if isinstance(value, int) and not isinstance(value, bool):
        out += [("plus_one", str(value + 1)), ("times_1000", str(value * 1000)), ("as_real", f"{value}.0")]
    return out


def mutants(header):
    meta = header.get("__metadata__", {})
    params = json.loads(meta.get("params", "{}"))
    for key, value in params.items():
        for cls, text in key_values(value):
            p = dict(params)
            if text is None:
                del p[key]
                yield f"params.{key}:{cls}", key, {"params": json.dumps(p)}
            else:
                q = dict(params)
                q[key] = "\0MARK\0"
                yield f"params.{key}:{cls}", key, {"params": json.dumps(q).replace('"\\u0000MARK\\u0000"', text)}
    yield "params:unknown_key", "bogus_key", {"params": json.dumps({**params, "bogus_key": 1})}
    yield "params:not_object", "params", {"params": "[1,2]"}
    yield "params:empty", "params", {"params": "{}"}
    if "weight_format" in params and params["weight_format"] != "gptq":
        yield "params:contradictory_has_zp", "has_zp", {"params": json.dumps({**params, "has_zp": True})}
    tol = json.loads(meta.get("tolerance", "{}"))
    for out_name, entry in tol.items():
        if not isinstance(entry, dict):
            continue
        for k in entry:
            for cls, text in (("string", '"x"'), ("negative", "-1"), ("huge", "1e300"), ("object", "{}")):
                t = dict(tol)
                e = dict(entry)
                e[k] = json.loads(text)
                t[out_name] = e
                yield f"tolerance.{out_name}.{k}:{cls}", k, {"tolerance": json.dumps(t)}
        t = dict(tol)
        t[out_name] = 3
        yield f"tolerance.{out_name}:number", out_name, {"tolerance": json.dumps(t)}
    yield "tolerance:unknown_output", "out.bogus", {"tolerance": json.dumps({**tol, "out.bogus": {"atol": 1}})}
    for name in [n for n in header if n != "__metadata__"]:
        yield f"tensor {name}:renamed", name, {"__rename__": name}


def run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120)
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", ""


def judge(op, key, status, err, out_path, tensors=()):
    lines = [line for line in err.splitlines() if line.strip()]
    if status in (0, 1):
        return None
    if status != 2:
        return f"status {status}: {err.strip()[:300]}"
    if len(lines) != 1:
        return f"{len(lines)} stderr lines: {err.strip()[:300]}"
    line = lines[0]
    if any(t in line for t in RAW_TEXT):
        return f"raw library text: {line}"
    if not line.startswith("mlakit: "):
        return f"not an mlakit line: {line}"
    if op not in line and "safetensors" not in line:
        return f"does not name the operator: {line}"
    # The key itself, or (for a size that contradicts the tensors) the tensor whose shape disagrees.
    if key.split(".")[-1] not in line and key not in line and not any(t in line for t in tensors):
        return f"does not name {key} nor a tensor: {line}"
    if os.path.exists(out_path):
        return f"refused but wrote {out_path}"
    return None


def mutated(header, change):
    """A copy of the header with one mutant's change: metadata entries replaced, or a tensor renamed."""
    h = json.loads(json.dumps(header))
    if "__rename__" in change:
        h["tensor_renamed_" + change["__rename__"]] = h.pop(change["__rename__"])
    else:
        h["__metadata__"].update(change)
    return h


def write_mutants(path, out_dir):
    header, data = read(path)
    for i, (_, _, change) in enumerate(mutants(header)):
        write(os.path.join(out_dir, f"{os.path.basename(path)}.{i}"), mutated(header, change), data)


def one(binary, path, tmp):
    header, data = read(path)
    op = header.get("__metadata__", {}).get("op", "")
    tensors = [n for n in header if n != "__metadata__"]
    results = []
    for i, (label, key, change) in enumerate(mutants(header)):
        base = os.path.join(tmp, f"{os.path.basename(path)}.{i}")
        write(base + ".safetensors", mutated(header, change), data)
        out = base + ".out.safetensors"
        status, err = run([binary, "run", base + ".safetensors", "--out", out, "--backend", "reference"])
        finding = judge(op, key if "__rename__" not in change else "tensor", status, err, out, tensors)
        if status == 0 and finding is None:
            status2, err2 = run([binary, "check", path, "--candidate", out])
            f2 = judge(op, key, status2, err2, "/nonexistent", tensors)
            if f2:
                finding = "check: " + f2
        status3, err3 = run([binary, "check", base + ".safetensors", "--candidate", path])
        f3 = judge(op, key if "__rename__" not in change else "tensor", status3, err3, "/nonexistent", tensors)
        results.append((path, label, status, finding or (("check --candidate: " + f3) if f3 else None)))
        for f in (base + ".safetensors", out):
            if os.path.exists(f):
                os.remove(f)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlakit")
    ap.add_argument("--write-mutants")
    ap.add_argument("files", nargs="*")
    ap.add_argument("--per-op", type=int, default=0)
    ap.add_argument("--max-bytes", type=int, default=0, help="skip files larger than this")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    files = a.files or sorted(os.path.join(ROOT, "data", "golden", f) for f in os.listdir(os.path.join(ROOT, "data", "golden"))
                              if f.endswith(".safetensors"))
    if a.max_bytes:
        files = [f for f in files if os.path.getsize(f) <= a.max_bytes]
    if a.per_op:
        kept, count = [], {}
        for f in files:
            op = os.path.basename(f).split(".")[0]
            if count.get(op, 0) < a.per_op:
                kept.append(f)
                count[op] = count.get(op, 0) + 1
        files = kept
    if a.write_mutants:
        os.makedirs(a.write_mutants, exist_ok=True)
        for f in files:
            write_mutants(f, a.write_mutants)
        return 0
    if not a.mlakit:
        ap.error("--mlakit BINARY or --write-mutants DIR")
    total = refused = ran = 0
    findings = []
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for results in pool.map(lambda f: one(a.mlakit, f, tmp), files):
            for path, label, status, finding in results:
                total += 1
                refused += status == 2
                ran += status in (0, 1)
                if finding:
                    findings.append(f"{os.path.basename(path)} {label}: {finding}")
    for f in findings:
        print("FINDING", f)
    print(f"{total} mutants of {len(files)} files: {refused} refused cleanly, {ran} ran, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
