#!/usr/bin/env python3
"""The GPU table of RESULTS.md from one GPU run: mlakit_bench_ops' cuda rows (Google Benchmark
JSON) joined on (operator, case) with bench/torch_baseline.py's rows (its --json), as Markdown.

    python3 bench/gpu_table.py OUT/bench_ops.json OUT/torch.json

Columns: mlakit time and TFLOP/s, its share of the bf16 matmul rate measured by PyTorch in the
torch run (torch.matmul 8192^3) and by cuBLAS in the benchmark's own process, the PyTorch time (the
fastest variant of the case) and the speedup over it, and the targets: every operator at least 3x
the PyTorch formulation; op 4 at least 40 % of the matmul rate, op 3 and op 1's prefill at least 25 %.
Rows of an alternative cuda route (back-end "cuda.ROUTE", e.g. op 4's first kernel measured with
MLAKIT_CUDA_SPARSE_MLA_RING=off) are listed beside the default route's as "CASE [ROUTE]".
"""
import json
import sys

SPEEDUP_TARGET = 3.0
# Share of the matmul rate: op 4 at least 40 %, op 3 and op 1's prefill cases at least 25 %.
MATMUL_SHARE_TARGET = {"mla_prefill_fp8": 25.0, "sparse_mla_prefill": 40.0, "lightning_indexer": 25.0}


def share_target(op, case):
    if op == "lightning_indexer" and not case.startswith("prefill"):
        return None
    return MATMUL_SHARE_TARGET.get(op)


def mlakit_rows(path):
    with open(path) as f:
        run = json.load(f)
    rows = {}
    for b in run.get("benchmarks", []):
        parts = b["name"].split("/")
        if len(parts) != 3 or parts[2].split(".")[0] != "cuda":
            continue
        route = parts[2].partition(".")[2]
        key = (parts[0], parts[1] + (f" [{route}]" if route else ""))
        if b.get("error_occurred"):
            rows[key] = {"error": b.get("error_message", "error")}
            continue
        ms = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ms")]
        rows[key] = {"ms": ms, "tflops": b.get("gflops", 0.0) * 1e-3, "pct_cublas": b.get("pct_peak")}
    return rows, run.get("context", {}).get("gpu_peak", "")


def torch_rows(path):
    with open(path) as f:
        run = json.load(f)
    best = {}
    for r in run.get("results", []):
        if r.get("skipped") or "ms" not in r:
            continue
        key = (r["op"], r["case"])
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    return best, run


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    mine, gpu_peak = mlakit_rows(sys.argv[1])
    theirs, torch_run = torch_rows(sys.argv[2])
    matmul = torch_run.get("matmul", {}).get("tflops")
    print(f"GPU: {torch_run.get('device', '?')}; torch {torch_run.get('torch', '?')}; "
          f"torch.matmul bf16 {torch_run.get('matmul', {}).get('n', '?')}^3: "
          f"{matmul:.0f} TFLOP/s" if matmul else "torch.matmul: not measured")
    if gpu_peak:
        print(f"{gpu_peak}")
    print()
    print("| operator | case | mlakit ms | TFLOP/s | % of torch.matmul | % of cuBLAS | torch ms | speedup | targets |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(mine):
        op, case = key
        m = mine[key]
        if "error" in m:
            print(f"| {op} | {case} | {m['error']} | | | | | | |")
            continue
        share = m["tflops"] / matmul * 100 if matmul else None
        t = theirs.get((op, case.split(" [")[0]))
        speedup = t["ms"] / m["ms"] if t else None
        verdicts = []
        if speedup is not None:
            verdicts.append(f"{SPEEDUP_TARGET:g}x: {'met' if speedup >= SPEEDUP_TARGET else 'missed'}")
        target = share_target(op, case)
        if target is not None and share is not None:
            verdicts.append(f"{target:g} %: {'met' if share >= target else 'missed'}")
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"
        print(f"| {op} | {case} | {m['ms']:.3f} | {m['tflops']:.1f} | {fmt(share, '.1f')} | "
              f"{fmt(m['pct_cublas'], '.1f')} | {fmt(t['ms'] if t else None, '.3f')} | "
              f"{fmt(speedup, '.1f')}{'x' if speedup is not None else ''} | {'; '.join(verdicts)} |")


if __name__ == "__main__":
    main()
