#!/usr/bin/env python3
"""PyTorch (CPU) formulations of ops 1 and 2, timed at the spec's benchmark shapes.

Not part of CI: a baseline for bench/RESULTS.md. It writes what a PyTorch user would write for the
same math, on the same thread count as the mlakit benchmarks:

  op 1 (lightning indexer): FP8 codes decoded through a 256-entry lookup table, K gathered through
       the page table, q·Kᵀ as one matmul per query chunk (all heads at once), ReLU, the weighted
       head sum as a batched matmul, times the key scales, causal mask (-inf), torch.topk.
  op 2 (MSA block indexer): bf16 q and K, q·Kᵀ per index head (bf16 matmul, and f32 matmul on the
       upcast operands: the faster is reported), scale, causal mask, block max through a reshape of
       the key axis padded with -inf, forced init/local blocks, torch.topk.

Prefill rows are processed in chunks so that the score tensor stays under ~0.5 GB (the whole
[T, H, keys] tensor of op 1 would need 13 GB). Work (flops) is counted as the mlakit drivers do:
2·heads·head_dim per (query row, visible key).

Usage: /usr/bin/python3 bench/torch_baseline.py [--threads 2] [--reps 3] [--op 1|2|all] [--quick] [--breakdown]
"""

import argparse
import math
import os
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

import numpy as np  # noqa: E402
import torch  # noqa: E402


def fp8_e4m3_table():
    """f32 value of every f8e4m3fn code (0x7F/0xFF: NaN), computed from the bit fields."""
    t = np.zeros(256, dtype=np.float32)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> 3) & 0xF
        m = c & 0x7
        if e == 0xF and m == 0x7:
            t[c] = np.nan
        elif e == 0:
            t[c] = s * m * 2.0 ** -9
        else:
            t[c] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return torch.from_numpy(t)


FP8 = fp8_e4m3_table()


def random_codes(gen, shape):
    """Random finite fp8 codes (NaN codes would turn whole rows into NaN)."""
    c = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
    c = torch.where((c & 0x7F) == 0x7F, c ^ 1, c)
    return c.to(torch.uint8)


def paged_cache(gen, lengths, page_size, width, dtype):
    """A one-layer, one-head paged cache [num_blocks, page_size, width] with shuffled pages, and its
    lookup table [B, max_pages]."""
    pages = [math.ceil(n / page_size) for n in lengths]
    total = sum(pages)
    perm = torch.randperm(total, generator=gen)
    max_pages = max(pages) if pages else 0
    lut = torch.full((len(lengths), max_pages), total, dtype=torch.int64)
    at = 0
    for b, p in enumerate(pages):
        lut[b, :p] = perm[at:at + p]
        at += p
    if dtype == "fp8":
        blocks = random_codes(gen, (total + 1, page_size, width))
    else:
        blocks = (torch.randn((total + 1, page_size, width), generator=gen) * 0.5).to(torch.bfloat16)
    return blocks, lut


def gather_rows(blocks, lut_row, n, page_size):
    """The first n rows of one sequence, in position order: [n, ...]."""
    pages = lut_row[: math.ceil(n / page_size)]
    return blocks.index_select(0, pages).reshape(-1, *blocks.shape[2:])[:n]


def best_time(fn, reps):
    """Best wall time of `reps` calls after a warm-up, and the process CPU time (all threads) of
    that call: on a shared machine the CPU time says what the cores spent while they ran."""
    fn()  # warm-up
    best, best_cpu = float("inf"), float("inf")
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        t, c = time.perf_counter() - t0, time.process_time() - c0
        if t < best:
            best, best_cpu = t, c
    return best, best_cpu


# ---- op 1 ---------------------------------------------------------------------------------------

def op1_case(seq_lens, cache_lens, H, D=128, top_k=2048, page_size=64, seed=1):
    gen = torch.Generator().manual_seed(seed)
    T = sum(seq_lens)
    q = random_codes(gen, (T, H, D))
    q_s = torch.randn((T, H), generator=gen) * 0.25
    n_keys = [c + s for c, s in zip(cache_lens, seq_lens)]
    blocks, lut = paged_cache(gen, n_keys, page_size, D, "fp8")
    scales = torch.rand((blocks.shape[0], page_size), generator=gen) * 0.056 + 0.004
    return dict(seq_lens=seq_lens, cache_lens=cache_lens, H=H, D=D, top_k=top_k, page_size=page_size,
                q=q, q_s=q_s, blocks=blocks, scales=scales, lut=lut)


def op1_torch(c, rows_per_chunk=None):
    H, D, top_k, ps = c["H"], c["D"], c["top_k"], c["page_size"]
    out = torch.full((c["q"].shape[0], top_k), -1, dtype=torch.int64)
    t0 = 0
    for b, (seq, cl) in enumerate(zip(c["seq_lens"], c["cache_lens"])):
        if seq == 0:
            continue
        n = cl + seq
        k = FP8[gather_rows(c["blocks"], c["lut"][b], n, ps).long()]          # [n, D]
        ks = gather_rows(c["scales"], c["lut"][b], n, ps)                      # [n]
        chunk = rows_per_chunk or max(1, (1 << 27) // (H * n))                 # ~0.5 GB of scores
        for r0 in range(0, seq, chunk):
            r1 = min(seq, r0 + chunk)
            q = FP8[c["q"][t0 + r0:t0 + r1].long()]                             # [r, H, D]
            logits = torch.matmul(q.reshape(-1, D), k.t()).reshape(r1 - r0, H, n)
            logits.relu_()
            w = c["q_s"][t0 + r0:t0 + r1].unsqueeze(1)                          # [r, 1, H]
            score = torch.bmm(w, logits).squeeze(1) * ks                        # [r, n]
            visible = cl + torch.arange(r0, r1).unsqueeze(1) + 1                # causal
            score.masked_fill_(torch.arange(n).unsqueeze(0) >= visible, float("-inf"))
            m = min(top_k, n)
            idx = torch.topk(score, m, dim=1).indices
            out[t0 + r0:t0 + r1, :m] = idx
        t0 += seq
    return out


def op1_breakdown(c, reps):
    """Where the PyTorch prefill spends its time: each stage of op1_torch timed on its own over the
    same chunks (wall and CPU seconds summed over the chunks, best of `reps`)."""
    H, D, top_k, ps = c["H"], c["D"], c["top_k"], c["page_size"]
    seq, cl = c["seq_lens"][0], c["cache_lens"][0]
    n = cl + seq
    chunk = max(1, (1 << 27) // (H * n))
    stages = ["lut decode", "matmul", "relu", "weighted head sum", "mask", "topk"]
    best = {s: (float("inf"), 0.0) for s in stages}
    for _ in range(reps):
        acc = {s: [0.0, 0.0] for s in stages}

        def timed(stage, fn):
            c0, t0 = time.process_time(), time.perf_counter()
            r = fn()
            acc[stage][0] += time.perf_counter() - t0
            acc[stage][1] += time.process_time() - c0
            return r

        k = timed("lut decode", lambda: FP8[gather_rows(c["blocks"], c["lut"][0], n, ps).long()])
        ks = gather_rows(c["scales"], c["lut"][0], n, ps)
        for r0 in range(0, seq, chunk):
            r1 = min(seq, r0 + chunk)
            q = timed("lut decode", lambda: FP8[c["q"][r0:r1].long()])
            logits = timed("matmul", lambda: torch.matmul(q.reshape(-1, D), k.t()).reshape(r1 - r0, H, n))
            timed("relu", lambda: logits.relu_())
            w = c["q_s"][r0:r1].unsqueeze(1)
            score = timed("weighted head sum", lambda: torch.bmm(w, logits).squeeze(1) * ks)
            visible = cl + torch.arange(r0, r1).unsqueeze(1) + 1
            timed("mask", lambda: score.masked_fill_(torch.arange(n).unsqueeze(0) >= visible, float("-inf")))
            timed("topk", lambda: torch.topk(score, min(top_k, n), dim=1).indices)
        for s in stages:
            if acc[s][0] < best[s][0]:
                best[s] = tuple(acc[s])
    return best


def op1_decode_torch(c):
    """Decode (one token per sequence, equal cache lengths): the batched formulation."""
    H, D, top_k, ps = c["H"], c["D"], c["top_k"], c["page_size"]
    B = len(c["seq_lens"])
    n = c["cache_lens"][0] + 1
    pages = math.ceil(n / ps)
    k = FP8[c["blocks"].index_select(0, c["lut"][:, :pages].reshape(-1)).reshape(B, pages * ps, D)[:, :n].long()]
    ks = c["scales"].index_select(0, c["lut"][:, :pages].reshape(-1)).reshape(B, pages * ps)[:, :n]
    q = FP8[c["q"].long()]                                                      # [B, H, D]
    logits = torch.bmm(q, k.transpose(1, 2))                                    # [B, H, n]
    logits.relu_()
    score = torch.bmm(c["q_s"].unsqueeze(1), logits).squeeze(1) * ks           # [B, n]
    return torch.topk(score, min(top_k, n), dim=1).indices


def op1_flops(c):
    pairs = sum(s * cl + s * (s + 1) / 2 for s, cl in zip(c["seq_lens"], c["cache_lens"]) if s)
    return 2.0 * c["H"] * c["D"] * pairs


# ---- op 2 ---------------------------------------------------------------------------------------

def op2_case(seq_lens, prefix_lens, Hi, Di=128, block=128, topk=16, init=1, local=2, seed=1):
    gen = torch.Generator().manual_seed(seed)
    R = sum(seq_lens)
    q = (torch.randn((R, Hi, Di), generator=gen) * 0.5).to(torch.bfloat16)
    n_keys = [p + s for p, s in zip(prefix_lens, seq_lens)]
    blocks, lut = paged_cache(gen, n_keys, block, Di, "bf16")
    return dict(seq_lens=seq_lens, prefix_lens=prefix_lens, Hi=Hi, Di=Di, block=block, topk=topk, init=init,
                local=local, scale=Di ** -0.5, q=q, blocks=blocks, lut=lut)


def op2_torch(c, bf16_matmul, rows_per_chunk=None):
    Hi, Di, bs, topk = c["Hi"], c["Di"], c["block"], c["topk"]
    out = torch.full((Hi, c["q"].shape[0], topk), -1, dtype=torch.int64)
    t0 = 0
    for b, (seq, pre) in enumerate(zip(c["seq_lens"], c["prefix_lens"])):
        if seq == 0:
            continue
        n = pre + seq
        nb = math.ceil(n / bs)
        k = gather_rows(c["blocks"], c["lut"][b], n, bs)                        # [n, Di] bf16
        k = k if bf16_matmul else k.float()
        chunk = rows_per_chunk or max(1, (1 << 27) // (Hi * nb * bs))
        for r0 in range(0, seq, chunk):
            r1 = min(seq, r0 + chunk)
            q = c["q"][t0 + r0:t0 + r1].transpose(0, 1)                           # [Hi, r, Di]
            q = q if bf16_matmul else q.float()
            s = torch.matmul(q, k.t()).float() * c["scale"]                       # [Hi, r, n]
            nk = pre + torch.arange(r0, r1) + 1                                   # causal key count per row
            s.masked_fill_(torch.arange(n).view(1, 1, n) >= nk.view(1, -1, 1), float("-inf"))
            s = torch.nn.functional.pad(s, (0, nb * bs - n), value=float("-inf"))
            s = s.view(Hi, r1 - r0, nb, bs).amax(dim=3)                            # [Hi, r, nb]
            rows_nb = (nk + bs - 1) // bs
            cblk = torch.arange(nb).view(1, 1, nb)
            s[..., : c["init"]] = 1e30
            s.masked_fill_((cblk >= (rows_nb - c["local"]).view(1, -1, 1)) & (cblk < rows_nb.view(1, -1, 1)), 1e29)
            m = min(topk, nb)
            v, idx = torch.topk(s, m, dim=2)
            idx.masked_fill_(v == float("-inf"), -1)
            out[:, t0 + r0:t0 + r1, :m] = idx
        t0 += seq
    return out


def op2_decode_torch(c, bf16_matmul):
    """Decode (one token per sequence, equal prefix lengths): the batched formulation."""
    Hi, Di, bs, topk = c["Hi"], c["Di"], c["block"], c["topk"]
    B = len(c["seq_lens"])
    n = c["prefix_lens"][0] + 1
    nb = math.ceil(n / bs)
    k = c["blocks"].index_select(0, c["lut"][:, :nb].reshape(-1)).reshape(B, nb * bs, Di)
    q = c["q"]                                                                   # [B, Hi, Di]
    if not bf16_matmul:
        k, q = k.float(), q.float()
    s = torch.bmm(q, k.transpose(1, 2)).float() * c["scale"]                     # [B, Hi, nb*bs]
    s[..., n:] = float("-inf")                                                   # causal cut in the last block
    s = s.view(B, Hi, nb, bs).amax(dim=3)
    s[..., : c["init"]] = 1e30
    s[..., max(0, nb - c["local"]):] = 1e29
    return torch.topk(s, min(topk, nb), dim=2).indices


def op2_flops(c):
    pairs = sum(s * p + s * (s + 1) / 2 for s, p in zip(c["seq_lens"], c["prefix_lens"]) if s)
    return 2.0 * c["Hi"] * c["Di"] * pairs


# ---- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--op", default="all", choices=["1", "2", "all"])
    ap.add_argument("--quick", action="store_true", help="only the headline shape of each kind")
    ap.add_argument("--breakdown", action="store_true", help="op 1 prefill: time each stage on its own")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.backends.mkldnn.is_available() and 'oneDNN' or 'no oneDNN'}")

    def report(name, times, flops):
        secs, cpu = times
        print(f"{name:48s} {secs * 1e3:10.1f} ms wall {flops / secs * 1e-9:8.2f} GFLOP/s   "
              f"{cpu * 1e3:10.1f} ms CPU (all threads) {flops / cpu * 1e-9 * args.threads:8.2f} GFLOP/s "
              f"at {args.threads} busy threads", flush=True)

    if args.op in ("1", "all"):
        shapes = [("op1/prefill_b1_s4096_c8192_h64", [4096], [8192], 64),
                  ("op1/prefill_b1_s4096_c0_h64", [4096], [0], 64)]
        decodes = [("op1/decode_b32_c32768_h64", 32, 32768, 64), ("op1/decode_b1_c131072_h64", 1, 131072, 64)]
        if args.quick:
            shapes, decodes = shapes[:1], decodes[:1]
        for name, seq, cache, H in shapes:
            c = op1_case(seq, cache, H)
            report(name, best_time(lambda: op1_torch(c), args.reps), op1_flops(c))
            if args.breakdown:
                for stage, (wall, cpu) in op1_breakdown(c, args.reps).items():
                    print(f"    {stage:24s} {wall * 1e3:10.1f} ms wall {cpu * 1e3:10.1f} ms CPU", flush=True)
        for name, B, cache, H in decodes:
            c = op1_case([1] * B, [cache] * B, H)
            report(name, best_time(lambda: op1_decode_torch(c), args.reps), op1_flops(c))

    if args.op in ("2", "all"):
        shapes = [("op2/prefill_s4096_c28672_h8", [4096], [28672], 8), ("op2/prefill_s4096_c0_h8", [4096], [0], 8),
                  ("op2/decode_b32_c32768_h8", [1] * 32, [32768] * 32, 8),
                  ("op2/decode_b32_c131072_h8", [1] * 32, [131072] * 32, 8)]
        if args.quick:
            shapes = [shapes[0], shapes[2]]
        for name, seq, pre, Hi in shapes:
            c = op2_case(seq, pre, Hi)
            decode = all(s == 1 for s in seq) and len(set(pre)) == 1
            for bf16 in (True, False):
                fn = (lambda: op2_decode_torch(c, bf16)) if decode else (lambda: op2_torch(c, bf16))
                report(name + ("/bf16_matmul" if bf16 else "/f32_matmul"), best_time(fn, args.reps), op2_flops(c))


if __name__ == "__main__":
    main()
