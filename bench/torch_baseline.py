#!/usr/bin/env python3
"""PyTorch formulations of the five mlakit operators, timed at the spec's benchmark sizes on the CPU
or on a CUDA GPU, beside the dense bf16 matmul rate of the same device.

Not part of CI: a baseline for bench/RESULTS.md. The formulations (bench/torch_ops.py) are what a
PyTorch user would write for the same math:

  op 1 lightning indexer    fp8 codes decoded (float8 dtype or a 256-entry table), K gathered through
                            the page table, q·Kᵀ as one matmul per query chunk (all heads), ReLU, the
                            weighted head sum as a bmm, key scales, causal mask, torch.topk
  op 2 MSA block indexer    q·Kᵀ per index head, scale, causal mask, block max through a reshape of the
                            key axis padded with -inf, forced init/local blocks, torch.topk
  op 3 MLA prefill FP8      RoPE and RMSNorm in place (advanced indexing into the cache), window gather,
                            per-128 fp8 quantization through the float8 dtype, one matmul per k-group of
                            kv_b_proj scaled and summed, F.scaled_dot_product_attention per sequence
  op 4 sparse MLA prefill   rows gathered by advanced indexing, bmm for scores and P·V (one gathered row
                            serves all heads), softmax with sink, lse
  op 5 fused QKV paged      weight dequantized per call (bf16 / fp8 block scales / GPTQ int4 unpacked
                            with shifts and masks), one matmul, K/V rows scattered into the cache

Matmul operands are bf16 on a GPU and f32 on a CPU (op 2 on a CPU reports both, as its bf16 path
is sometimes the faster); --compute picks one. Prefill rows are processed in chunks so that the
largest intermediate stays near 2^27 (CPU) or 2^28 (GPU) elements. Work (flops) is counted as the
C++ golden drivers' work() counts it, and cases carry the golden drivers' bench case names so rows join.

Timing: inputs are built on the host and moved to the device first; each case is warmed up, then
timed `--reps` times (CUDA: events around each call, mean reported as ms; CPU: wall clock, best
reported, as before). `--check` runs the formulations in float64 on the golden files instead.

Usage:
  python3 bench/torch_baseline.py [--device cpu|cuda] [--op 1|2|3|4|5|all] [--threads 2] [--reps N]
                                  [--quick] [--small] [--case TEXT] [--breakdown] [--json FILE]
                                  [--compute bf16|f32] [--matmul-n N]
  python3 bench/torch_baseline.py --check [--op ...]
"""

import argparse
import json
import os
import platform
import sys
import time


def _threads_from_argv(default=2):
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return str(default)


# OpenBLAS (behind torch.matmul in Debian's build) and OpenMP read these when they load.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, _threads_from_argv())

import torch  # noqa: E402

import torch_cases  # noqa: E402
import torch_ops  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- device and timing -------------------------------------------------------------------------

def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_fn(fn, reps, dev, warmup):
    """Times `reps` calls after `warmup` calls: (mean ms, best ms, process CPU s of the best call).
    On CUDA each call sits between two events (launch overhead included, host copies excluded:
    inputs are resident); on the CPU the process CPU time says what the cores spent, which matters
    on a shared machine."""
    for _ in range(warmup):
        fn()
    sync(dev)
    ms, cpu = [], []
    for _ in range(reps):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            ms.append(start.elapsed_time(end))
            cpu.append(0.0)
        else:
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
            cpu.append(time.process_time() - c0)
    best = min(range(reps), key=lambda i: ms[i])
    return sum(ms) / reps, ms[best], cpu[best]


def matmul_rate(dev, n, reps, warmup):
    """Dense bf16 matmul of two n×n matrices: the yardstick every case is a percentage of."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn((n, n), generator=gen).to(device=dev, dtype=torch.bfloat16)
    b = torch.randn((n, n), generator=gen).to(device=dev, dtype=torch.bfloat16)
    mean, best, _ = time_fn(lambda: torch.matmul(a, b), reps, dev, warmup)
    return {"n": n, "dtype": "bf16", "reps": reps, "ms": mean, "ms_best": best, "tflops": 2.0 * n ** 3 / mean * 1e-9}


# ---- op 1 breakdown ----------------------------------------------------------------------------

def op1_breakdown(t, h, p, reps, dev, cdt, budget):
    """Where the prefill of one sequence spends its time: each stage of the formulation timed on its
    own over the same chunks (wall and CPU seconds summed over the chunks, best of `reps`)."""
    H, D, ps, top_k = p["num_heads"], p["head_dim"], p["page_size"], p["top_k"]
    seq, cl = h["input_row_offsets"][1], h["cache_lengths"][0]
    n = cl + seq
    keys = torch_ops.cache_layer(t["k_cache.blocks"], 0)[:, :, 0]
    kscale = torch_ops.cache_layer(t["k_cache.scales"], 0)[:, :, 0, 0]
    lut = t["k_cache.lookup_table"][:1]
    acc = torch_ops.acc_dtype(cdt)
    stages = ["gather + decode", "matmul", "relu", "weighted head sum", "mask", "topk"]
    best = {s: (float("inf"), 0.0) for s in stages}
    for _ in range(reps):
        spent = {s: [0.0, 0.0] for s in stages}

        def timed(stage, fn):
            sync(dev)
            c0, t0 = time.process_time(), time.perf_counter()
            r = fn()
            sync(dev)
            spent[stage][0] += time.perf_counter() - t0
            spent[stage][1] += time.process_time() - c0
            return r

        k = timed("gather + decode", lambda: torch_ops.decode_fp8(torch_ops.gather_rows(keys, lut, n, ps)[0], cdt))
        ks = torch_ops.gather_rows(kscale, lut, n, ps)[0].to(acc)
        for r0, r1 in torch_ops.chunks(seq, budget // (H * n)):
            q = timed("gather + decode", lambda: torch_ops.decode_fp8(t["q"][r0:r1], cdt))
            logits = timed("matmul", lambda: torch.matmul(q.reshape(-1, D), k.t()).view(r1 - r0, H, n))
            timed("relu", lambda: logits.relu_())
            w = t["q_s"][r0:r1, None].to(logits.dtype)
            score = timed("weighted head sum", lambda: torch.bmm(w, logits)[:, 0].to(acc) * ks)
            nk = cl + torch.arange(r0, r1, device=dev) + 1
            timed("mask", lambda: score.nan_to_num_(nan=torch.finfo(acc).min, posinf=float("inf"),
                                                    neginf=float("-inf")).masked_fill_(
                torch.arange(n, device=dev) >= nk[:, None], float("-inf")))
            timed("topk", lambda: torch.topk(score, min(top_k, n), dim=1).indices)
        for s in stages:
            if spent[s][0] < best[s][0]:
                best[s] = tuple(spent[s])
    return best


# ---- main --------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    ap.add_argument("--op", default="all", choices=["1", "2", "3", "4", "5", "all"])
    ap.add_argument("--threads", type=int, default=2, help="host threads (torch.set_num_threads)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per case (default 3 on cpu, 10 on cuda)")
    ap.add_argument("--quick", action="store_true", help="only the headline cases of each operator")
    ap.add_argument("--small", action="store_true", help="small shapes (not the golden drivers') for a quick CPU run")
    ap.add_argument("--case", action="append", metavar="TEXT", help="only cases whose name contains TEXT (repeatable)")
    ap.add_argument("--breakdown", action="store_true", help="op 1 prefill: time each stage on its own")
    ap.add_argument("--compute", choices=sorted(DTYPES), help="matmul operand dtype (default bf16 on cuda, f32 on cpu)")
    ap.add_argument("--matmul-n", type=int, default=None, help="size of the bf16 matmul yardstick "
                    "(default 8192 on cuda, 2048 on cpu, 1024 with --small; 0 skips it)")
    ap.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="compare the formulations with the golden files and exit")
    ap.add_argument("--golden", default=os.path.join(REPO, "data", "golden"), help="golden file folder for --check")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ops = [1, 2, 3, 4, 5] if args.op == "all" else [int(args.op)]

    if args.check:
        import torch_check
        failed = torch_check.run_checks(args.golden, {torch_cases.OPS[o] for o in ops})
        sys.exit(1 if failed else 0)

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("--device cuda: this torch build sees no CUDA device")
    reps = args.reps or (10 if cuda else 3)
    warmup = 3 if cuda else 1
    budget = 1 << (28 if cuda else 27)
    name = device_name(dev)
    print(f"torch {torch.__version__}, device {name}, {torch.get_num_threads()} host threads"
          + ("" if cuda else f", {torch.backends.mkldnn.is_available() and 'oneDNN' or 'no oneDNN'}"), flush=True)

    mm_n = args.matmul_n if args.matmul_n is not None else (8192 if cuda else 1024 if args.small else 2048)
    mm = matmul_rate(dev, mm_n, 10 if cuda else reps, warmup) if mm_n else None
    if mm:
        print(f"{'bf16 matmul ' + str(mm_n) + 'x' + str(mm_n):56s} {mm['ms']:10.3f} ms "
              f"{mm['tflops']:8.2f} TFLOP/s (mean of {mm['reps']})", flush=True)

    rows = []

    def report(op, case, variant, show_variant, times, flops):
        mean, best, cpu = times
        ms = mean if cuda else best
        tflops = flops / ms * 1e-9
        pct = 100.0 * tflops / mm["tflops"] if mm else None
        label = f"{torch_cases.OPS[op]}/{case.name}" + (f"/{variant}" if show_variant else "")
        pct_txt = f"{pct:7.2f}% of matmul" if pct is not None else ""
        if cuda:
            print(f"{label:56s} {ms:10.3f} ms {tflops:8.2f} TFLOP/s {pct_txt}", flush=True)
        else:
            print(f"{label:56s} {ms:10.1f} ms wall {tflops * 1e3:8.2f} GFLOP/s   {cpu * 1e3:10.1f} ms CPU "
                  f"{flops / max(cpu, 1e-9) * 1e-9 * args.threads:8.2f} GFLOP/s at {args.threads} busy threads "
                  f"{pct_txt}", flush=True)
        rows.append({"op": torch_cases.OPS[op], "op_num": op, "case": case.name,
                     "name": f"{torch_cases.OPS[op]}/{case.name}/torch-{dev.type}", "variant": variant,
                     "harness_case": case.harness, "device": name, "torch": torch.__version__, "ms": ms,
                     "ms_mean": mean, "ms_best": best, "reps": reps, "flops": flops, "tflops": tflops,
                     "pct_of_matmul": pct})

    def bench_case(op, case, variants):
        t, h, p = torch_cases.build(case, args.seed)
        flops = torch_cases.FLOPS[op](t, h, p)
        t = {k: v.to(dev) for k, v in t.items()}
        sync(dev)
        run = torch_cases.RUN[op]
        for v in variants:
            cdt = DTYPES[v]
            times = time_fn(lambda: run(t, h, p, cdt, budget), reps, dev, warmup)
            report(op, case, f"{v}_matmul", len(variants) > 1, times, flops)
        if args.breakdown and op == 1 and len(h["cache_lengths"]) == 1 and h["input_row_offsets"][1] > 1:
            for stage, (wall, cpu) in op1_breakdown(t, h, p, reps, dev, DTYPES[variants[0]], budget).items():
                print(f"    {stage:24s} {wall * 1e3:10.1f} ms wall {cpu * 1e3:10.1f} ms CPU", flush=True)

    for op in ops:
        why = torch_cases.unsupported(op)
        if why:
            print(f"{torch_cases.OPS[op]}: skipped ({why})", flush=True)
            continue
        for case in torch_cases.cases(op, args.small, args.quick):
            if args.case and not any(c in case.name for c in args.case):
                continue
            if args.compute:
                variants = [args.compute]
            elif op == 2 and not cuda:
                variants = ["bf16", "f32"]   # on a CPU either can be the faster
            else:
                variants = ["bf16" if cuda else "f32"]
            try:
                bench_case(op, case, variants)
            except Exception as e:  # e.g. out of memory on a smaller device: report it, go on with the rest
                why = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
                print(f"{torch_cases.OPS[op]}/{case.name}: skipped ({why})", flush=True)
                rows.append({"op": torch_cases.OPS[op], "op_num": op, "case": case.name, "device": name,
                             "torch": torch.__version__, "error": why})
            if cuda:
                torch.cuda.empty_cache()

    if args.json:
        doc = {"device": name, "device_type": dev.type, "torch": torch.__version__, "threads": args.threads,
               "matmul": mm, "results": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
