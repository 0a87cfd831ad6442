"""One DeepSeek-V3.2 sparse-attention layer on the CPU with mlakit's torch ops, over a paged cache,
checked and timed against the same layer written in plain PyTorch.

Each step of the layer:

  op 5  fused_qkv_paged        x @ W.T -> Q [T, Hq*576]; the new tokens' latent rows (512 latent +
                               64 rope) go straight into the MLA cache, in place
  op 1  lightning_indexer      FP8 multi-head score of every visible position -> top_k positions
        remap_indices_to_rows  positions within the sequence -> physical cache rows
  op 4  sparse_mla_prefill     every query head attends over its token's selected latent rows

The sequences arrive with some tokens already cached (an earlier prefill chunk, random here), run
one prefill chunk, then a few decode steps. The MLA cache and the indexer's K cache each hold every
layer of the model; this one runs as layer LAYER, so the other layers' pages must come back untouched.

    python examples/deepseek_v32_layer.py --small
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import mlakit
import mlakit.torch as mt

HEAD, V = 576, 512                   # latent row: 512 latent (the value) + 64 rope
IDX_HEADS, IDX_DIM = 64, 128         # the lightning indexer's heads
SCALE = 1.0 / math.sqrt(192)         # DeepSeek-V3.2's softmax scale (qk_nope 128 + rope 64)
NUM_LAYERS, LAYER = 2, 1
U = 2.0 ** -24
# Rows per chunk in the plain layer: they bound its temporaries, and were the fastest on a 2-core
# AVX2 machine (attention: 4 rows keep the gathered f32 rows of a chunk near the caches).
INDEXER_ROWS, ATTN_ROWS = 32, 4

SIZES = {
    "small": dict(heads=16, hidden=512, page=64, top_k=256, batch=3, context=512, prefill=256),
    # DeepSeek-V3.2's head count, top_k and page; hidden is cut from 7168 so that the dense
    # projection does not dominate a 2-core run.
    "default": dict(heads=128, hidden=1536, page=64, top_k=2048, batch=2, context=2048, prefill=512),
}


def quantize_rows(x):
    """Per-row FP8 quantization, as DeepSeek quantizes the indexer's q and K: codes, f32 scale [..., 1]."""
    s = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 448.0
    return (x / s).to(torch.float8_e4m3fn), s


def token_slots(lut, lens, new, page):
    """Sequence, position, block and in-page offset of every new token."""
    seq = torch.cat([torch.full((n,), b) for b, n in enumerate(new)])
    pos = torch.cat([torch.arange(c, c + n) for c, n in zip(lens, new)])
    return seq, pos, lut[seq, pos // page].long(), pos % page


def build(cfg, decode_steps, gen):
    B, page = cfg["batch"], cfg["page"]
    # Ragged on purpose: later sequences are shorter, and the shortest may see fewer than top_k keys.
    context = [cfg["context"] * (B - b) // B for b in range(B)]
    prefill = [cfg["prefill"] * (B - b) // B for b in range(B)]
    pages = [-(-(c + p + decode_steps) // page) for c, p in zip(context, prefill)]
    nb = sum(pages) + 2                              # two blocks no sequence owns
    lut = torch.full((B, max(pages) + 1), nb, dtype=torch.int32)   # nb = "no page"
    perm, k = torch.randperm(nb, generator=gen).to(torch.int32), 0
    for b, n in enumerate(pages):
        lut[b, :n] = perm[k:k + n]
        k += n
    lens = torch.tensor(context, dtype=torch.int32)
    blocks = torch.randn((nb, 1, NUM_LAYERS, page, 1, HEAD), generator=gen).to(torch.bfloat16)
    codes, scales = quantize_rows(torch.randn((nb, 1, NUM_LAYERS, page, 1, IDX_DIM), generator=gen))
    n_out = cfg["heads"] * HEAD + HEAD
    w = (torch.randn((n_out, cfg["hidden"]), generator=gen) / math.sqrt(cfg["hidden"])).to(torch.bfloat16)
    return dict(lut=lut, lens=lens, prefill=prefill, blocks=blocks, codes=codes, scales=scales, w=w,
                w32=w.float(), w_abs=w.float().abs())


def step_inputs(cfg, m, new, gen):
    """The step's hidden states and indexer queries; the new tokens' indexer keys are written into
    the cache here (DeepSeek projects them outside this layer's ops)."""
    T = sum(new)
    x = torch.randn((T, cfg["hidden"]), generator=gen).to(torch.bfloat16)
    iq, iq_scale = quantize_rows(torch.randn((T, IDX_HEADS, IDX_DIM), generator=gen))
    # DeepSeek folds the query's quantization scale and 1/sqrt(H*D) into the head weights.
    iqs = torch.randn((T, IDX_HEADS), generator=gen) * iq_scale[..., 0] / math.sqrt(IDX_HEADS * IDX_DIM)
    ik, ik_scale = quantize_rows(torch.randn((T, IDX_DIM), generator=gen))
    _, _, blk, off = token_slots(m["lut"], m["lens"].tolist(), new, cfg["page"])
    m["codes"][blk, 0, LAYER, off, 0] = ik
    m["scales"][blk, 0, LAYER, off, 0] = ik_scale
    offsets = torch.tensor([0] + torch.tensor(new).cumsum(0).tolist(), dtype=torch.int32)
    return dict(x=x, iq=iq, iqs=iqs, offsets=offsets, new=new)


# ---- the layer through mlakit ------------------------------------------------------------------

def mlakit_layer(cfg, s, w, cache, icache):
    t = [time.perf_counter()]
    q = mt.fused_qkv_paged(s["x"], s["offsets"], cache, q_dim=cfg["heads"] * HEAD, weight=w, layer_idx=LAYER)
    t.append(time.perf_counter())
    pos = mt.lightning_indexer(s["iq"], s["iqs"], s["offsets"], icache, top_k=cfg["top_k"], layer_idx=LAYER)
    rows = mt.remap_indices_to_rows(pos, s["offsets"], cache.lookup_table, page_size=cache.page_size,
                                    num_blocks=cache.num_blocks)
    t.append(time.perf_counter())
    out = mt.sparse_mla_prefill(q.view(-1, cfg["heads"], HEAD), cache, rows, scale=SCALE, v_depth=V,
                                layer_idx=LAYER)
    t.append(time.perf_counter())
    return dict(q=q, pos=pos, rows=rows, out=out), [b - a for a, b in zip(t, t[1:])]


# ---- the same layer in plain PyTorch -----------------------------------------------------------

def plain_fused_qkv(x, m, blocks, lens, new, page, q_dim):
    # Without AVX512-BF16 a CPU bf16 GEMM is slow for many rows, so prefill multiplies an f32 copy
    # of the weight; for a few rows, streaming the bf16 weight is faster.
    y = F.linear(x.float(), m["w32"]).to(torch.bfloat16) if x.shape[0] > 16 else F.linear(x, m["w"])
    _, _, blk, off = token_slots(m["lut"], lens, new, page)
    blocks[blk, 0, LAYER, off, 0] = y[:, q_dim:]
    return y[:, :q_dim]


def sequence_keys(m, b, n, page):
    """Decoded indexer keys [n, D] and their scales [n] of sequence b."""
    pages = m["lut"][b, :-(-n // page)].long()
    k = m["codes"][:, 0, LAYER, :, 0][pages].reshape(-1, IDX_DIM)[:n].float()
    return k, m["scales"][:, 0, LAYER, :, 0, 0][pages].reshape(-1)[:n]


def index_scores(q, w, k, ks):
    """S[r, j] = ks[j] * sum_h w[r, h] * relu(q[r, h] . k[j])."""
    a = torch.matmul(q.float(), k.t()).relu_()                        # [r, H, n]
    return torch.bmm(w[:, None, :], a)[:, 0] * ks


def indexer_chunks(m, s, lens, page):
    """(rows, keys, key scales, visible key count per row) per chunk of each sequence's rows."""
    t0 = 0
    for b, (c, n_new) in enumerate(zip(lens, s["new"])):
        k, ks = sequence_keys(m, b, c + n_new, page)
        for r0 in range(0, n_new, INDEXER_ROWS):
            r1 = min(n_new, r0 + INDEXER_ROWS)
            yield slice(t0 + r0, t0 + r1), k[:c + r1], ks[:c + r1], c + torch.arange(r0, r1) + 1   # keys it sees
        t0 += n_new


def plain_indexer(m, s, lens, page, top_k):
    out = torch.full((s["iq"].shape[0], top_k), -1, dtype=torch.int32)
    for rows, k, ks, nk in indexer_chunks(m, s, lens, page):
        score = index_scores(s["iq"][rows], s["iqs"][rows], k, ks)
        score.masked_fill_(torch.arange(k.shape[0]) >= nk[:, None], -math.inf)    # causal
        kk = min(top_k, k.shape[0])
        idx = score.topk(kk, dim=1).indices
        out[rows, :kk] = idx.masked_fill_(torch.arange(kk) >= nk[:, None], -1).to(torch.int32)
    return out


def plain_remap(pos, lut, new, page):
    seq = torch.repeat_interleave(torch.arange(len(new)), torch.tensor(new))
    p = pos.long().clamp(min=0)
    rows = lut[seq[:, None], p // page].long() * page + p % page
    return torch.where(pos >= 0, rows, -1).to(torch.int32)


def plain_sparse_mla(q, blocks, rows, page):
    layer = blocks[:, 0, LAYER, :, 0]                                  # [num_blocks, page, 576]
    out = torch.empty((q.shape[0], q.shape[1], V), dtype=torch.bfloat16)
    for t0 in range(0, q.shape[0], ATTN_ROWS):
        r = rows[t0:t0 + ATTN_ROWS].long()
        valid = r >= 0
        width = int(valid.sum(1).max())                               # the -1 tail is dropped
        r, valid = r[:, :width], valid[:, :width]
        # -1 slots gather the row's first pick (always valid): any other row might hold NaN,
        # and 0 * NaN would leak through the value product.
        r = torch.where(valid, r, r[:, :1])
        kv = layer[r // page, r % page].float()                       # [tc, width, 576]
        s = torch.bmm(q[t0:t0 + ATTN_ROWS].float(), kv.transpose(1, 2)) * SCALE
        p = torch.softmax(s.masked_fill_(~valid[:, None, :], -math.inf), dim=-1)
        out[t0:t0 + ATTN_ROWS] = torch.bmm(p, kv[..., :V]).to(torch.bfloat16)
    return out


def plain_layer(cfg, m, s, blocks, lens):
    page, new = cfg["page"], s["new"]
    t = [time.perf_counter()]
    q = plain_fused_qkv(s["x"], m, blocks, lens, new, page, cfg["heads"] * HEAD)
    t.append(time.perf_counter())
    pos = plain_indexer(m, s, lens, page, cfg["top_k"])
    rows = plain_remap(pos, m["lut"], new, page)
    t.append(time.perf_counter())
    out = plain_sparse_mla(q.view(-1, cfg["heads"], HEAD), blocks, rows, page)
    t.append(time.perf_counter())
    return dict(q=q, pos=pos, rows=rows, out=out), [b - a for a, b in zip(t, t[1:])]


# ---- checks ------------------------------------------------------------------------------------

def check_fused(cfg, m, s, lens, mk, pl, blocks_mk, blocks_pl):
    """Q and the new cache rows within the dot-product bound of docs/fused_qkv_paged.md §6, applied
    to two f32-accumulated results (twice the one-sided bound); every other cache element exact."""
    _, _, blk, off = token_slots(m["lut"], lens, s["new"], cfg["page"])
    a = torch.cat((mk["q"], blocks_mk[blk, 0, LAYER, off, 0]), dim=1).float()
    b = torch.cat((pl["q"], blocks_pl[blk, 0, LAYER, off, 0]), dim=1).float()
    bound = 8 * cfg["hidden"] * U * (s["x"].float().abs() @ m["w_abs"].t()) + 2.0 ** -8 * (a.abs() + b.abs())
    rest = blocks_mk.clone()
    rest[blk, 0, LAYER, off] = blocks_pl[blk, 0, LAYER, off]
    return bool(((a - b).abs() <= bound).all()) and torch.equal(rest.view(torch.int16), blocks_pl.view(torch.int16))


def check_indexer(cfg, m, s, lens, picks, plain):
    """docs/lightning_indexer.md §6 on random data: each row's first min(top_k, n) entries are
    distinct visible positions, then -1; no left-out visible key outscores the lowest pick, and no
    pick outscores an earlier one, by more than beta = 4*H*D*u*max_j A_j (scores in plain f32).
    Returns (agreeing picks, all picks, failing rows) against the plain top-k."""
    agree = total = bad = 0
    for rows, k, ks, nk in indexer_chunks(m, s, lens, cfg["page"]):
        n = k.shape[0]
        visible = torch.arange(n) < nk[:, None]
        score = index_scores(s["iq"][rows], s["iqs"][rows], k, ks).masked_fill_(~visible, -math.inf)
        a = index_scores(s["iq"][rows].float().abs(), s["iqs"][rows].abs(), k.abs(), ks.abs())
        beta = 4 * IDX_HEADS * IDX_DIM * U * a.masked_fill_(~visible, 0).amax(dim=1, keepdim=True)
        want = nk.clamp(max=cfg["top_k"])[:, None]
        got = picks[rows].long()
        used = torch.arange(got.shape[1]) < want
        ok = ((got >= 0) == used).all(1) & ((got < nk[:, None]) | ~used).all(1)
        g = got.clamp(0, n - 1)
        chosen = torch.zeros_like(visible).scatter_(1, torch.where(used, g, g[:, :1]), True)
        ok &= chosen.sum(1) == want[:, 0]                                     # distinct
        s_got = score.gather(1, g).masked_fill_(~used, -math.inf)      # the -1 tail ranks last
        lowest = s_got.masked_fill(~used, math.inf).amin(dim=1, keepdim=True)
        ok &= (score.masked_fill(chosen, -math.inf).amax(dim=1, keepdim=True) <= lowest + beta)[:, 0]
        ok &= (s_got[:, :-1] >= s_got[:, 1:] - beta).all(1)
        bad += int((~ok).sum())
        p = plain[rows].long()
        mine = torch.zeros_like(visible).scatter_(1, torch.where(p >= 0, p, p[:, :1]), True)
        agree += int((chosen & mine).sum())
        total += int(want.sum())
    return agree, total, bad


def medians(ts):
    """Per-op and total medians in ms of a list of per-op times in s."""
    return [statistics.median(col) * 1e3 for col in zip(*ts)] + [statistics.median(map(sum, ts)) * 1e3]


def fmt_times(t):
    return f"{t[3]:9.1f} ({t[0]:.1f} / {t[1]:.1f} / {t[2]:.1f})"


def rel_err(got, ref):
    return float((got.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-30))


def run_step(cfg, m, name, new, reps, gen, mk_cache, icache, blocks_pl):
    lens = m["lens"].tolist()
    s = step_inputs(cfg, m, new, gen)
    mk_t, pl_t = [], []
    for _ in range(reps):            # op 5 rewrites the same rows with the same values each time
        mk, t = mlakit_layer(cfg, s, m["w"], mk_cache, icache)
        mk_t.append(t)
        pl, t = plain_layer(cfg, m, s, blocks_pl, lens)
        pl_t.append(t)
    res = dict(name=name, rows=sum(new), keys=max(c + n for c, n in zip(lens, new)), mk=medians(mk_t),
               pl=medians(pl_t))

    res["fused_ok"] = check_fused(cfg, m, s, lens, mk, pl, mk_cache.blocks, blocks_pl)
    res["agree"], res["picks"], res["bad_rows"] = check_indexer(cfg, m, s, lens, mk["pos"], pl["pos"])
    # Op 4 alone: the plain attention on mlakit's own Q, cache and rows.
    q = mk["q"].view(-1, cfg["heads"], HEAD)
    res["op4_err"] = rel_err(mk["out"], plain_sparse_mla(q, mk_cache.blocks, mk["rows"], cfg["page"]))
    # End to end, on the tokens whose two top-k sets are equal (the others differ by near-ties).
    same = (mk["pos"].sort(dim=1).values == pl["pos"].sort(dim=1).values).all(1)
    res["same_rows"] = int(same.sum())
    res["e2e_err"] = rel_err(mk["out"][same], pl["out"][same]) if res["same_rows"] else 0.0
    # The next step starts both layers from the same cache, so each step is compared on its own.
    blocks_pl.copy_(mk_cache.blocks)
    m["lens"] += torch.tensor(new, dtype=torch.int32)                  # the step is now cached
    return res


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
    gen = torch.Generator().manual_seed(args.seed)
    m = build(cfg, args.decode_steps, gen)
    # One cache object per cache for all layers and steps; cache_lengths is advanced in place.
    mk_cache = mlakit.PagedKVCache(m["blocks"].clone(), m["lut"], m["lens"])
    icache = mlakit.PagedKVCache(m["codes"], m["lut"], m["lens"], m["scales"], IDX_DIM)
    blocks_pl = m["blocks"]

    print(f"DeepSeek-V3.2 sparse-attention layer ({size}): Hq {cfg['heads']}, hidden {cfg['hidden']}, "
          f"page {cfg['page']}, top_k {cfg['top_k']}, indexer {IDX_HEADS}x{IDX_DIM} FP8, batch {cfg['batch']} "
          f"(cached {m['lens'].tolist()}, prefill {m['prefill']}), {args.threads} threads, "
          f"mlakit {mlakit.info()['isa']}, torch {torch.__version__}")
    print(f"{'step':<9}{'rows':>6}{'keys':>6}  {'mlakit ms (op5 / op1 / op4)':>36}  "
          f"{'plain ms (op5 / op1 / op4)':>36}  speed-up")
    steps = [("prefill", m["prefill"])] + [(f"decode {i + 1}", [1] * cfg["batch"]) for i in range(args.decode_steps)]
    results = []
    for name, new in steps:
        r = run_step(cfg, m, name, new, args.reps, gen, mk_cache, icache, blocks_pl)
        results.append(r)
        print(f"{name:<9}{r['rows']:>6}{r['keys']:>6}  {fmt_times(r['mk']):>36}  {fmt_times(r['pl']):>36}  "
              f"{r['pl'][3] / r['mk'][3]:6.2f}x")

    print(f"\n{'check':<9} {'op5 Q+cache':>11} {'top-k agree':>12} {'rows off':>9} {'op4 err':>9} "
          f"{'end-to-end':>11} (rows)")
    failed = []
    for r in results:
        print(f"{r['name']:<9} {'ok' if r['fused_ok'] else 'FAIL':>11} {r['agree'] / r['picks']:>12.4%} "
              f"{r['bad_rows']:>9} {r['op4_err']:>9.1e} {r['e2e_err']:>11.1e} ({r['same_rows']}/{r['rows']})")
        failed += [f"{r['name']}: op 5 Q or cache rows"] * (not r["fused_ok"])
        failed += [f"{r['name']}: {r['bad_rows']} indexer rows outside the score bound"] * (r["bad_rows"] > 0)
        failed += [f"{r['name']}: op 4 error {r['op4_err']:.1e}"] * (r["op4_err"] > 2e-2)
        failed += [f"{r['name']}: end-to-end error {r['e2e_err']:.1e}"] * (r["e2e_err"] > 2e-2)
    mk_total, pl_total = sum(r["mk"][3] for r in results), sum(r["pl"][3] for r in results)
    dec = [r["pl"][3] / r["mk"][3] for r in results[1:]]
    print(f"\nsummary ({size}): {len(results)} steps, mlakit {mk_total:.1f} ms vs plain PyTorch {pl_total:.1f} ms "
          f"({pl_total / mk_total:.2f}x); prefill {results[0]['pl'][3] / results[0]['mk'][3]:.2f}x, decode "
          f"{statistics.median(dec) if dec else float('nan'):.2f}x (median); "
          + ("checks passed" if not failed else "CHECKS FAILED: " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
