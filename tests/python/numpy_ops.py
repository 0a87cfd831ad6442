"""Independent NumPy formulations of ops 1, 4 and 5 (spec pages 01, 04, 05), in float64."""
import numpy as np

from conftest import as_f64


def cache_rows(blocks, layer, page_size, lut, seq, positions, kv=0, head=None):
    """Rows of one layer of a paged cache for logical positions of sequence `seq`."""
    pages = lut[seq, positions // page_size].astype(np.int64)
    offs = positions % page_size
    rows = blocks[pages, kv, layer, offs]  # [n, heads, head_size]
    return rows if head is None else rows[:, head]


def lightning_indexer_scores(t, p, seq, local, n):
    """f64 scores of the n candidates of query row t, and the per-candidate Σ|terms| bound."""
    H, D = p["num_heads"], p["head_dim"]
    q = as_f64(t["q"])[local]  # [H, D]
    lut = t["k_cache.lookup_table"]
    pos = np.arange(n)
    k = as_f64(cache_rows(t["k_cache.blocks"], p["layer_idx"], p["page_size"], lut, seq, pos, head=0))  # [n, D]
    ks = as_f64(cache_rows(t["k_cache.scales"], p["layer_idx"], p["page_size"], lut, seq, pos, head=0))[:, 0]
    w = as_f64(t["q_s"])[local]  # [H]
    with np.errstate(invalid="ignore", over="ignore"):
        dots = k @ q.T  # [n, H]
        relu = np.maximum(dots, 0.0)  # propagates NaN, as IEEE maximum
        score = ks * (relu * w).sum(axis=1)
        mag = np.abs(ks) * (np.abs(k) @ np.abs(q).T * np.abs(w)).sum(axis=1)
    return score, mag


def spec_order(score):
    """Highest first, ties to the smaller index, NaN last (by smaller index)."""
    j = np.arange(score.size)
    nan = np.isnan(score)
    key = np.where(nan, 0.0, -score)
    return np.lexsort((j, key, nan))


def sparse_mla(t, p):
    Hq, qk, v = p["num_q_heads"], p["qk_depth"], p["v_depth"]
    q = as_f64(t["q"])
    T = q.shape[0]
    blocks = t["kv_cache.blocks"]
    layer, ps = p["layer_idx"], p["page_size"]
    wq = blocks.shape[5]
    rows_all = as_f64(blocks[:, 0, layer, :, 0, :]).reshape(-1, wq)
    if "kv_cache.scales" in t:  # each column times its group's scale (f32 or e8m0)
        sc = as_f64(t["kv_cache.scales"][:, 0, layer, :, 0, :]).reshape(rows_all.shape[0], -1)
        rows_all = rows_all * np.repeat(sc, p["quant_granularity"], axis=1)[:, :wq]
    if "kv_cache.tail" in t:  # split rows: the bf16 tail after the codes
        rows_all = np.concatenate([rows_all, as_f64(t["kv_cache.tail"][:, 0, layer, :, 0, :]).reshape(-1, qk - wq)], axis=1)
    idx = t["indices"].astype(np.int64)
    if t["indices"].dtype == np.uint32:
        idx = np.where(idx >= 2**31, idx - 2**32, idx)
    lengths = t["topk_lengths"].astype(np.int64) if "topk_lengths" in t else np.full(T, p["indices_stride"])
    sink = as_f64(t["attn_sink"]) if "attn_sink" in t else None
    out = np.zeros((T, Hq, v))
    lse = np.full((T, Hq), np.inf)
    for r in range(T):
        sel = idx[r, : lengths[r]]
        sel = sel[(sel >= 0) & (sel < rows_all.shape[0])]
        if sel.size == 0:
            continue
        kv = rows_all[sel]  # [n, qk]
        with np.errstate(invalid="ignore", over="ignore"):
            s = p["scale"] * (q[r] @ kv.T)  # [Hq, n]
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            l = e.sum(axis=1)
            den = l + (np.exp(sink - m[:, 0]) if sink is not None else 0.0)
            out[r] = (e @ kv[:, :v]) / den[:, None]
            lse[r] = m[:, 0] + np.log(l)
    return out, lse


def gptq_weight(t, p, K, N):
    gs = p["group_size"]
    qw = t["qweight"].view(np.uint32)
    shifts = (4 * np.arange(8, dtype=np.uint32))[None, :, None]
    q = ((qw[:, None, :] >> shifts) & 0xF).reshape(K, N).astype(np.float32)  # q[k, n]
    if p["has_zp"]:
        qz = t["qzeros"].view(np.uint32)
        z = ((qz[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))[None, None, :]) & 0xF).reshape(K // gs, N)
        if p.get("zero_format", "v2") == "v1":  # stored as z - 1 (AutoGPTQ)
            z = z.astype(np.int64) + 1
    else:
        z = np.full((K // gs, N), 8)
    g = t["g_idx"].astype(np.int64) if "g_idx" in t else np.arange(K) // gs
    scale = t["scales"].astype(np.float32)
    w = ((q - z[g].astype(np.float32)) * scale[g]).astype(np.bfloat16)  # rounded to bf16 as the spec says
    return as_f64(w).T  # [N, K]


def fused_qkv_weight(t, p, K):
    fmt = p["weight_format"]
    if fmt == "dense":
        return as_f64(t["weight"])
    if fmt == "fp8_block":
        w = as_f64(t["weight"])
        s = as_f64(t["weight_scale"])
        n_idx = np.arange(w.shape[0]) // 128
        k_idx = np.arange(K) // 128
        return w * s[n_idx][:, k_idx]
    N = t["qweight"].shape[1]
    return gptq_weight(t, p, K, N)
