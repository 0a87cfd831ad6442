"""MiniMax block-sparse attention (MSA): the block-indexer step on the CPU with mlakit's torch op,
checked and timed against the same selection written in plain PyTorch.

For every index head and new token, `mlakit.torch.msa_block_indexer` picks the key blocks (one
cache page each) that the sparse attention will visit: the first `init_blocks` and the last
`local_blocks` blocks the token can see are always kept, the other slots go to the blocks whose
best key scores highest against the token's index query.

The sequences arrive with some tokens already cached (an earlier prefill chunk, random here), run
one prefill chunk, then a few decode steps. The index-K cache holds every layer of the model; the
step runs as layer LAYER.

    python examples/minimax_msa_step.py --small
"""
import argparse
import math
import statistics
import sys
import time

import torch

import mlakit
import mlakit.torch as mt

NUM_LAYERS, LAYER = 2, 1
INIT, LOCAL = 1, 2
FORCED_INIT, FORCED_LOCAL = 1e30, 1e29   # the op's forced block scores (docs/msa_block_indexer.md §3)
U = 2.0 ** -24
ROW_CHUNK = 32                           # plain rows per chunk: the fastest on a 2-core AVX2 machine

SIZES = {
    "small": dict(heads=4, dim=128, block=64, topk=16, batch=3, context=512, prefill=768),
    "default": dict(heads=8, dim=128, block=128, topk=16, batch=4, context=8192, prefill=4096),
}


def build(cfg, decode_steps, gen):
    B, bs = cfg["batch"], cfg["block"]
    # Ragged on purpose: later sequences are shorter, and the shortest may have fewer than topk blocks.
    context = [cfg["context"] * (B - b) // B for b in range(B)]
    prefill = [cfg["prefill"] * (B - b) // B for b in range(B)]
    pages = [-(-(c + p + decode_steps) // bs) for c, p in zip(context, prefill)]
    nb = sum(pages) + 2                                              # two blocks no sequence owns
    lut = torch.full((B, max(pages) + 1), nb, dtype=torch.int32)     # nb = "no page"
    perm, k = torch.randperm(nb, generator=gen).to(torch.int32), 0
    for b, n in enumerate(pages):
        lut[b, :n] = perm[k:k + n]
        k += n
    keys = torch.randn((nb, 1, NUM_LAYERS, bs, 1, cfg["dim"]), generator=gen).to(torch.bfloat16)
    return dict(lut=lut, prefix=torch.tensor(context, dtype=torch.int32), prefill=prefill, keys=keys)


def step_inputs(cfg, m, new, gen):
    """The step's index queries; the new tokens' index keys are written into the cache first, as
    the op expects (its caller owns the key projection)."""
    T, bs = sum(new), cfg["block"]
    q = torch.randn((T, cfg["heads"], cfg["dim"]), generator=gen).to(torch.bfloat16)
    seq = torch.cat([torch.full((n,), b) for b, n in enumerate(new)])
    pos = torch.cat([torch.arange(c, c + n) for c, n in zip(m["prefix"].tolist(), new)])
    m["keys"][m["lut"][seq, pos // bs].long(), 0, LAYER, pos % bs, 0] = \
        torch.randn((T, cfg["dim"]), generator=gen).to(torch.bfloat16)
    offsets = torch.tensor([0] + torch.tensor(new).cumsum(0).tolist(), dtype=torch.int32)
    return dict(q=q, offsets=offsets, new=new)


def mlakit_step(cfg, s, prefix, cache, scale):
    return mt.msa_block_indexer(s["q"], s["offsets"], prefix, cache, block_size=cfg["block"], topk=cfg["topk"],
                                init_blocks=INIT, local_blocks=LOCAL, scale=scale, layer_idx=LAYER)


# ---- the same selection in plain PyTorch -------------------------------------------------------

def block_chunks(cfg, m, s, prefix):
    """(rows, keys [n, Di] f32, visible key count per row) per chunk of each sequence's rows."""
    bs, t0 = cfg["block"], 0
    for b, (c, n_new) in enumerate(zip(prefix, s["new"])):
        n = c + n_new
        pages = m["lut"][b, :-(-n // bs)].long()
        k = m["keys"][:, 0, LAYER, :, 0][pages].reshape(-1, cfg["dim"])[:n].float()
        for r0 in range(0, n_new, ROW_CHUNK):
            r1 = min(n_new, r0 + ROW_CHUNK)
            yield slice(t0 + r0, t0 + r1), k[:c + r1], c + torch.arange(r0, r1) + 1   # keys the chunk sees
        t0 += n_new


def block_scores(q, k, nk, bs, scale, forced=True):
    """s[r, h, c]: the best visible key score of block c, forced blocks set as the op sets them,
    -inf for blocks the row cannot see."""
    n = k.shape[0]
    nb = -(-n // bs)
    e = torch.matmul(q, k.t()) * scale                                   # [r, Hi, n]
    e.masked_fill_(torch.arange(n) >= nk[:, None, None], -math.inf)      # causal, token by token
    s = torch.nn.functional.pad(e, (0, nb * bs - n), value=-math.inf).view(*e.shape[:2], nb, bs).amax(dim=3)
    if forced:
        c, row_nb = torch.arange(nb), (nk[:, None, None] + bs - 1) // bs
        s = torch.where((c < INIT) & (c < row_nb), FORCED_INIT, s)
        s = torch.where((c >= row_nb - LOCAL) & (c < row_nb), FORCED_LOCAL, s)   # second: overrides
    return s


def plain_step(cfg, m, s, prefix, scale):
    T, Hi, topk = s["q"].shape[0], cfg["heads"], cfg["topk"]
    out = torch.full((Hi, T, topk), -1, dtype=torch.int32)
    for rows, k, nk in block_chunks(cfg, m, s, prefix):
        sc = block_scores(s["q"][rows].float(), k, nk, cfg["block"], scale)
        v, idx = sc.topk(min(topk, sc.shape[2]), dim=2)
        out[:, rows, :idx.shape[2]] = idx.masked_fill_(v == -math.inf, -1).transpose(0, 1).to(torch.int32)
    return out


# ---- checks ------------------------------------------------------------------------------------

def check(cfg, m, s, prefix, scale, got_all, plain_all):
    """docs/msa_block_indexer.md §4/§6 on random data, per (head, row): min(topk, n_b) distinct
    blocks in [0, n_b) then -1; the forced blocks first (init-only ascending, then local
    ascending); no left-out block outscores the lowest free pick, and no free pick outscores an
    earlier one, by more than beta = 4*u*Di*|scale|*max_j sum_d |q_d k_jd| (scores in plain f32).
    Returns (agreeing picks, all picks, failing (head, row) pairs) against the plain selection."""
    topk, bs = cfg["topk"], cfg["block"]
    agree = total = bad = 0
    for rows, k, nk in block_chunks(cfg, m, s, prefix):
        q = s["q"][rows].float()
        sc = block_scores(q, k, nk, bs, scale, forced=False)             # [r, Hi, nb]
        a = torch.matmul(q.abs(), k.abs().t()).masked_fill_(torch.arange(k.shape[0]) >= nk[:, None, None], 0)
        beta = (4 * U * cfg["dim"] * abs(scale) * a.amax(dim=2))[..., None]    # [r, Hi, 1]
        got = got_all[:, rows].transpose(0, 1).long()                     # [r, Hi, topk]
        r, Hi, nb = sc.shape
        row_nb = ((nk + bs - 1) // bs)[:, None, None]
        want = row_nb.clamp(max=topk)
        used = torch.arange(topk) < want
        ok = (((got >= 0) == used) & ((got < row_nb) | ~used)).all(2)
        g = got.clamp(0, nb - 1)
        chosen = torch.zeros_like(sc, dtype=torch.bool).scatter_(2, torch.where(used, g, g[..., :1]), True)
        ok &= chosen.sum(2) == want[..., 0]                                  # distinct
        n_forced = torch.zeros((r, 1, 1), dtype=torch.long)
        for i, x in enumerate(row_nb.flatten().tolist()):
            local = list(range(max(0, x - LOCAL), x))
            forced = ([c for c in range(min(INIT, x)) if c not in local] + local)[:topk]
            ok[i] &= (got[i, :, :len(forced)] == torch.tensor(forced)).all(1)
            sc[i, :, forced] = math.inf            # a forced block left out fails below too
            n_forced[i] = len(forced)
        free = used & (torch.arange(topk) >= n_forced)
        s_got = sc.gather(2, g).masked_fill_(~used, -math.inf)
        lowest = s_got.masked_fill(~free, math.inf).amin(dim=2, keepdim=True)
        ok &= (sc.masked_fill(chosen, -math.inf).amax(dim=2, keepdim=True) <= lowest + beta)[..., 0]
        ok &= ((s_got[..., :-1] >= s_got[..., 1:] - beta) | ~free[..., 1:]).all(2)
        bad += int((~ok).sum())
        p = plain_all[:, rows].transpose(0, 1).long()
        mine = torch.zeros_like(chosen).scatter_(2, torch.where(p >= 0, p, p[..., :1]), True)
        agree += int((chosen & mine).sum())
        total += int(want.expand(r, Hi, 1).sum())
    return agree, total, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="sizes that run in a few seconds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3, help="repetitions per step; medians are printed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)          # mlakit's CPU threads follow torch's
    size = "small" if args.small else "default"
    cfg = SIZES[size]
    scale = 1.0 / math.sqrt(cfg["dim"])          # the usual QK scale; the op takes any finite value
    gen = torch.Generator().manual_seed(args.seed)
    m = build(cfg, args.decode_steps, gen)
    # One cache object for all layers and steps. The op reads only prefix_lens; the cache's
    # lengths (the same numbers here) are not looked at.
    cache = mlakit.PagedKVCache(m["keys"], m["lut"], m["prefix"])

    print(f"MiniMax MSA block indexer ({size}): {cfg['heads']} index heads x {cfg['dim']}, block {cfg['block']}, "
          f"topk {cfg['topk']} (init {INIT}, local {LOCAL}), batch {cfg['batch']} (cached {m['prefix'].tolist()}, "
          f"prefill {m['prefill']}), {args.threads} threads, mlakit {mlakit.info()['isa']}, torch {torch.__version__}")
    print(f"{'step':<9}{'rows':>6}{'keys':>7}{'blocks':>7}  {'mlakit ms':>10}  {'plain ms':>10}  speed-up  "
          f"{'top-k agree':>12}  {'pairs off':>9}")
    steps = [("prefill", m["prefill"])] + [(f"decode {i + 1}", [1] * cfg["batch"]) for i in range(args.decode_steps)]
    failed, totals = [], []
    for name, new in steps:
        prefix = m["prefix"].tolist()
        s = step_inputs(cfg, m, new, gen)
        t_mk, t_pl = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            got = mlakit_step(cfg, s, m["prefix"], cache, scale)
            t1 = time.perf_counter()
            plain = plain_step(cfg, m, s, prefix, scale)
            t_pl.append(time.perf_counter() - t1)
            t_mk.append(t1 - t0)
        mk_ms, pl_ms = statistics.median(t_mk) * 1e3, statistics.median(t_pl) * 1e3
        agree, total, bad = check(cfg, m, s, prefix, scale, got, plain)
        keys = max(c + n for c, n in zip(prefix, new))
        print(f"{name:<9}{sum(new):>6}{keys:>7}{-(-keys // cfg['block']):>7}  {mk_ms:>10.2f}  {pl_ms:>10.2f}  "
              f"{pl_ms / mk_ms:7.2f}x  {agree / total:>12.4%}  {bad:>9}")
        totals.append((mk_ms, pl_ms))
        failed += [f"{name}: {bad} (head, row) selections off"] * (bad > 0)
        m["prefix"] += torch.tensor(new, dtype=torch.int32)             # the step is now cached

    mk_total, pl_total = sum(t[0] for t in totals), sum(t[1] for t in totals)
    dec = [p / k for k, p in totals[1:]]
    print(f"\nsummary ({size}): {len(totals)} steps, mlakit {mk_total:.1f} ms vs plain PyTorch {pl_total:.1f} ms "
          f"({pl_total / mk_total:.2f}x); prefill {totals[0][1] / totals[0][0]:.2f}x, decode "
          f"{statistics.median(dec) if dec else float('nan'):.2f}x (median); "
          + ("checks passed" if not failed else "CHECKS FAILED: " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
