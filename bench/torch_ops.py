"""PyTorch formulations of the five mlakit operators, written the way a PyTorch user would write them.

Every function takes the operator's tensors under their golden-file names and in the spec's layout
(golden-format.md; caches are rank 6: [num_blocks, kv_dim, num_layers, page_size, heads, head_size]),
so the same code is timed on synthetic inputs at the benchmark sizes and checked against the golden
files. Arguments:

  t      name -> tensor, all on one device; fp8 tensors hold their uint8 codes, u32 tensors are int64
  h      ragged metadata as host lists (input_row_offsets, cache_lengths, ...): the loops over
         sequences need them, and reading them back from the device would stall a GPU each call
  p      the scalar params (golden `params`)
  cdt    dtype of the matmul operands: bfloat16 on a GPU (tensor cores, f32 accumulation), float32
         on a CPU, float64 for the golden check (products of decoded bf16 / fp8 values are then
         exact, and outputs are rounded once, as the reference back-end does)
  budget elements of the largest intermediate (scores) per chunk

Only the math of the spec is reproduced, not its validation: inputs are trusted.
"""

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")
HAS_FP8_DTYPE = hasattr(torch, "float8_e4m3fn")


# ---- shared pieces -----------------------------------------------------------------------------

def fp8_e4m3_table():
    """Value of every f8e4m3fn code (0x7F/0xFF: NaN), from the bit fields: torch before 2.1 has no
    float8 dtype to convert through."""
    t = torch.zeros(256, dtype=torch.float64)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> 3) & 0xF
        m = c & 0x7
        if e == 0xF and m == 0x7:
            t[c] = float("nan")
        elif e == 0:
            t[c] = s * m * 2.0 ** -9
        else:
            t[c] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t


_FP8_TABLES = {}


def decode_fp8(codes, dtype):
    """Exact decode of uint8 fp8 codes (every e4m3 value is a bf16 value too)."""
    if HAS_FP8_DTYPE:
        return codes.view(torch.float8_e4m3fn).to(dtype)
    key = (dtype, codes.device)
    if key not in _FP8_TABLES:
        _FP8_TABLES[key] = fp8_e4m3_table().to(device=codes.device, dtype=dtype)
    return _FP8_TABLES[key][codes.long()]


def quantize_fp8(x):
    """f32 -> the nearest e4m3 value (ties to even), as f32; x is already clamped to ±448."""
    if HAS_FP8_DTYPE:
        return x.to(torch.float8_e4m3fn).to(torch.float32)
    # Spacing of e4m3 values in x's binade (2^-9 below the smallest normal): a power of two, so
    # the scaled value is exact and torch.round (half to even) rounds it as the cast would.
    _, e = torch.frexp(x)
    step = torch.ldexp(torch.ones_like(x), (e - 4).clamp(min=-9))
    return torch.round(x / step) * step


def round_to(x, dtype):
    """x rounded once to dtype. From float64 to bfloat16 the float32 step rounds to odd, so that the
    second rounding gives the correctly rounded bf16 value (the reference rounds once)."""
    if x.dtype != torch.float64 or dtype != torch.bfloat16:
        return x.to(dtype)
    f = x.to(torch.float32)
    finite = torch.isfinite(x)
    toward_zero = finite & (f.to(torch.float64).abs() > x.abs())
    f = torch.where(toward_zero, torch.nextafter(f, torch.zeros_like(f)), f)
    inexact = finite & (f.to(torch.float64) != x)
    f = (f.view(torch.int32) | inexact.to(torch.int32)).view(torch.float32)
    return f.to(torch.bfloat16)


def acc_dtype(cdt):
    """Where scores and softmax live: f32, or f64 when the matmuls are f64."""
    return torch.float64 if cdt == torch.float64 else torch.float32


def cache_layer(blocks, layer, kv=0):
    """One layer and K/V half of a paged cache: a view [num_blocks, page_size, heads, head_size]."""
    return blocks[:, kv, layer]


def gather_rows(layer_view, lut, n, page_size, start=0):
    """Positions [start, start + n) of every sequence of `lut` ([G, pages]) in position order:
    [G, n, ...]. Whole pages are gathered with index_select and the ends trimmed. Pages past a
    sequence's end may hold the sentinel or anything: they are clamped to a real block, and the
    caller masks what they hold."""
    G = lut.shape[0]
    if n == 0:
        return layer_view.new_empty((G, 0) + tuple(layer_view.shape[2:]))
    p0, p1 = start // page_size, (start + n - 1) // page_size + 1
    pages = lut[:, p0:p1].clamp(0, layer_view.shape[0] - 1)
    rows = layer_view.index_select(0, pages.reshape(-1))
    rows = rows.reshape(G, (p1 - p0) * page_size, *layer_view.shape[2:])
    s = start - p0 * page_size
    return rows[:, s:s + n]


def row_positions(t, h, page_size):
    """Block and in-page offset of each new token's cache position (cache_lengths[b] + i), built on
    the device from the device copies of the offsets (no host round trip)."""
    iro = t["input_row_offsets"]
    T = h["input_row_offsets"][-1]
    dev = iro.device
    seq_lens = iro[1:] - iro[:-1]
    b = torch.repeat_interleave(torch.arange(seq_lens.shape[0], device=dev), seq_lens, output_size=T)
    pos = t["kv_cache.cache_lengths"][b] + torch.arange(T, device=dev) - iro[b]
    blk = t["kv_cache.lookup_table"][b, pos // page_size]
    return pos, blk, pos % page_size


def sequences(h, lens_key):
    """(b, first row, rows, cached tokens) of every sequence with new rows."""
    iro, lens = h["input_row_offsets"], h[lens_key]
    return [(b, iro[b], iro[b + 1] - iro[b], lens[b]) for b in range(len(lens)) if iro[b + 1] > iro[b]]


def chunks(total, per_chunk):
    per_chunk = max(1, int(per_chunk))
    return [(r0, min(total, r0 + per_chunk)) for r0 in range(0, total, per_chunk)]


# ---- op 1: lightning indexer -------------------------------------------------------------------

def _indexer_topk(qc, w, k, ks, nk, top_k, cdt):
    """Top-k key positions of a batch of query groups sharing keys.

    qc [G, r, H, D] fp8 codes, k [G, n, D] decoded keys (cdt), w [G, r, H] (q_s), ks [G, n] key
    scales, nk [G, r] candidate count per row. Returns [G, r, min(top_k, n)], -1 past each row's count.
    """
    G, r, H, D = qc.shape
    n = k.shape[1]
    acc = acc_dtype(cdt)
    logits = torch.matmul(decode_fp8(qc, cdt).reshape(G, r * H, D), k.transpose(1, 2))
    logits = logits.view(G * r, H, n).relu_()                  # ReLU on the raw dot (NaN stays NaN)
    score = torch.bmm(w.reshape(G * r, 1, H).to(logits.dtype), logits).view(G, r, n).to(acc)
    score = score * ks[:, None, :].to(acc)
    # NaN ranks below every number but above non-candidates, which get -inf.
    score = score.nan_to_num_(nan=torch.finfo(acc).min, posinf=float("inf"), neginf=NEG_INF)
    cand = torch.arange(n, device=score.device)
    score.masked_fill_(cand >= nk[..., None], NEG_INF)
    m = min(top_k, n)
    idx = torch.topk(score, m, dim=2).indices
    idx.masked_fill_(torch.arange(m, device=idx.device) >= nk[..., None], -1)
    return idx


def lightning_indexer(t, h, p, cdt=torch.float32, budget=1 << 27):
    H, top_k, ps, layer = p["num_heads"], p["top_k"], p["page_size"], p["layer_idx"]
    causal = p.get("mask", "causal") == "causal"
    keys = cache_layer(t["k_cache.blocks"], layer)[:, :, 0]           # [nb, ps, D] codes
    kscale = cache_layer(t["k_cache.scales"], layer)[:, :, 0, 0]      # [nb, ps]: quant_granularity >= D
    q, q_s, lut = t["q"], t["q_s"], t["k_cache.lookup_table"]
    dev = q.device
    out = torch.full((q.shape[0], top_k), -1, dtype=torch.int32, device=dev)
    seqs = sequences(h, "cache_lengths")
    if seqs and len(seqs) == len(h["cache_lengths"]) and all(s == 1 for _, _, s, _ in seqs):
        # Decode: one row per sequence, all sequences batched, keys padded to the longest one's
        # whole pages (a trimmed batch is strided, and the batched matmul would copy it).
        n_max = -(-(max(c for _, _, _, c in seqs) + 1) // ps) * ps
        nk_all = t["k_cache.cache_lengths"] + 1
        for g0, g1 in chunks(len(seqs), budget // max(1, H * n_max)):
            k = decode_fp8(gather_rows(keys, lut[g0:g1], n_max, ps), cdt)
            ks = gather_rows(kscale, lut[g0:g1], n_max, ps)
            idx = _indexer_topk(q[g0:g1, None], q_s[g0:g1, None], k, ks, nk_all[g0:g1, None], top_k, cdt)
            out[g0:g1, :idx.shape[2]] = idx[:, 0].to(torch.int32)
        return out
    for b, t0, seq, cl in seqs:
        n = cl + seq
        k = decode_fp8(gather_rows(keys, lut[b:b + 1], n, ps), cdt)
        ks = gather_rows(kscale, lut[b:b + 1], n, ps)
        for r0, r1 in chunks(seq, budget // max(1, H * n)):
            rows = torch.arange(r0, r1, device=dev)
            nk = (cl + rows + 1) if causal else torch.full_like(rows, n)
            idx = _indexer_topk(q[None, t0 + r0:t0 + r1], q_s[None, t0 + r0:t0 + r1], k, ks, nk[None], top_k, cdt)
            out[t0 + r0:t0 + r1, :idx.shape[2]] = idx[0].to(torch.int32)
    return out


# ---- op 2: MSA block indexer -------------------------------------------------------------------

def _block_topk(q, k, nk, p, cdt):
    """Top-k key blocks. q [G, r, Hi, Di], k [G, n, Hk, Di] decoded keys (cdt; index head h reads K
    head h // (Hi // Hk)), nk [G, r] causal key count per row. Returns [G, r, S, min(topk, nb)]
    with -1 where nothing is left; S = Hi, or 1 with reduce_heads (the heads' maximum)."""
    bs, topk, init, local = p["block_size"], p["topk"], p["init_blocks"], p["local_blocks"]
    G, r, Hi, Di = q.shape
    n, Hk = k.shape[1], k.shape[2]
    grp = Hi // Hk
    nb = -(-n // bs)
    acc = acc_dtype(cdt)
    # All rows and heads of a K head against its keys in one matmul per group.
    qg = q.to(cdt).view(G, r, Hk, grp, Di).permute(0, 2, 1, 3, 4).reshape(G, Hk, r * grp, Di)
    s = torch.matmul(qg, k.permute(0, 2, 3, 1))                                        # [G, Hk, r*grp, n]
    s = s.view(G, Hk, r, grp, n).permute(0, 2, 1, 3, 4).reshape(G, r, Hi, n)
    s = s.to(acc) * p["scale"]
    nk = nk[:, :, None, None]                                                          # [G, r, 1, 1]
    s.masked_fill_(torch.arange(n, device=s.device) >= nk, NEG_INF)                    # causal cut
    s = F.pad(s, (0, nb * bs - n), value=NEG_INF).view(G, r, Hi, nb, bs).amax(dim=4)  # block max (NaN sticks)
    if p.get("reduce_heads", False):
        s = s.amax(dim=2, keepdim=True)                                                # heads' max (NaN sticks)
    blk = torch.arange(nb, device=s.device)
    row_nb = (nk + bs - 1) // bs
    s = torch.where((blk < init) & (blk < row_nb), torch.full_like(s, 1e30), s)
    s = torch.where((blk >= row_nb - local) & (blk < row_nb), torch.full_like(s, 1e29), s)
    s = s.nan_to_num_(nan=NEG_INF, posinf=float("inf"), neginf=NEG_INF)               # NaN never wins
    v, idx = torch.topk(s, min(topk, nb), dim=3)
    return idx.masked_fill_(v == NEG_INF, -1)


def msa_block_indexer(t, h, p, cdt=torch.bfloat16, budget=1 << 27):
    Hi, bs, topk, ps = p["num_index_heads"], p["block_size"], p["topk"], p["page_size"]
    S = 1 if p.get("reduce_heads", False) else Hi
    keys = cache_layer(t["k_cache.blocks"], p["layer_idx"])           # [nb, ps, Hk, Di]
    decode = (lambda k: decode_fp8(k, cdt)) if keys.dtype == torch.uint8 else (lambda k: k.to(cdt))
    q, lut = t["q"], t["k_cache.lookup_table"]
    dev = q.device
    out = torch.full((S, q.shape[0], topk), -1, dtype=torch.int32, device=dev)
    seqs = sequences(h, "prefix_lens")
    if seqs and len(seqs) == len(h["prefix_lens"]) and all(s == 1 for _, _, s, _ in seqs):
        # Decode: one row per sequence, all sequences batched, keys padded to the longest one's
        # whole pages (a trimmed batch is strided, and the batched matmul would copy it).
        n_max = -(-(max(c for _, _, _, c in seqs) + 1) // ps) * ps
        nk_all = t["prefix_lens"] + 1
        for g0, g1 in chunks(len(seqs), budget // max(1, Hi * n_max)):
            k = decode(gather_rows(keys, lut[g0:g1], n_max, ps))
            idx = _block_topk(q[g0:g1, None], k, nk_all[g0:g1, None], p, cdt)         # [G, 1, S, m]
            out[:, g0:g1, :idx.shape[3]] = idx[:, 0].transpose(0, 1).to(torch.int32)
        return out
    for b, t0, seq, pre in seqs:
        n = pre + seq
        k = decode(gather_rows(keys, lut[b:b + 1], n, ps))
        for r0, r1 in chunks(seq, budget // max(1, Hi * (-(-n // bs)) * bs)):
            nk = pre + torch.arange(r0, r1, device=dev) + 1
            idx = _block_topk(q[None, t0 + r0:t0 + r1], k, nk[None], p, cdt)           # [1, r, S, m]
            out[:, t0 + r0:t0 + r1, :idx.shape[3]] = idx[0].transpose(0, 1).to(torch.int32)
    return out


# ---- op 3: MLA prefill, FP8 --------------------------------------------------------------------

def _rotate(x, cos, sin, ew):
    """Interleaved-pair RoPE of x [..., rope] in precision ew, rounded once to bf16."""
    x = x.to(ew).unflatten(-1, (-1, 2))
    x0, x1 = x[..., 0], x[..., 1]
    y = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    return round_to(y, torch.bfloat16)


def _quantize_groups(x, bk, numerics="max"):
    """Step 4, bit-exact in f32: x [M, latent] -> decoded codes [M, G, bk] (zero-padded) and the
    group scales sa [M, G]. numerics "deepseek" / "deepseek_ue8m0": DeepSeek's act_quant (amax
    floored at 1e-4, sa = amax·f32(1/448), for ue8m0 rounded up to a power of two; codes x / sa)."""
    M, latent = x.shape
    G = -(-latent // bk)
    x = F.pad(x.to(torch.float32), (0, G * bk - latent)).view(M, G, bk)
    a = x.abs()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=2)   # NaN does not take part
    if numerics != "max":
        sa = amax.clamp(min=1e-4) * torch.tensor(1.0 / 448.0, dtype=torch.float32, device=x.device)
        if numerics == "deepseek_ue8m0":
            m, e = torch.frexp(sa)                                          # sa = m·2^e, m in [0.5, 1)
            sa = torch.where(m == 0.5, sa, torch.ldexp(torch.ones_like(sa), e))
            sa = torch.where(torch.isinf(amax), amax, sa)
        xq = quantize_fp8((x / sa[..., None]).clamp(-448.0, 448.0))
        return xq, sa
    sa = amax.clamp(max=1200.0) / 448.0
    inv = 1.0 / sa
    inv = torch.where((sa == 0) | torch.isinf(inv), torch.zeros_like(inv), inv)
    xq = quantize_fp8((x * inv[..., None]).clamp(-448.0, 448.0))
    return xq, sa


def _block_scaled_gemm(xq, sa, w, w_scale, bn, cdt, budget):
    """Step 5: KV[m, n] = Σ_g sa[m,g]·ws[n/bn,g]·(xq[m,g,:]·W[n,g,:]), one matmul per k-group
    (fp8 values are exact in bf16), scaled and summed in f32 (f64 when checking)."""
    M, G, bk = xq.shape
    N, latent = w.shape
    acc = acc_dtype(cdt)
    wd = F.pad(decode_fp8(w, cdt), (0, G * bk - latent)).view(N, G, bk)
    ws = w_scale.repeat_interleave(bn, dim=0)[:N].to(acc)                  # [N, G]
    out = torch.empty((M, N), dtype=torch.bfloat16, device=xq.device)
    for m0, m1 in chunks(M, budget // max(1, N)):
        kv = torch.zeros((m1 - m0, N), dtype=acc, device=xq.device)
        for g in range(G):
            part = torch.matmul(xq[m0:m1, g].to(cdt), wd[:, g].t()).to(acc)
            kv += part * (sa[m0:m1, g, None].to(acc) * ws[None, :, g])
        out[m0:m1] = round_to(kv, torch.bfloat16)
    return out


def _causal_lower_right(S, J):
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        return None
    return causal_lower_right(S, J)


def mla_prefill_fp8(t, h, p, cdt=torch.float32, budget=1 << 27):
    """Steps 1-7 of docs/mla_prefill_fp8.md. q and the cache are updated in place; returns out.output."""
    H, nope, rope, v, latent = p["num_heads"], p["nope"], p["rope"], p["v"], p["latent"]
    ps, bn, bk = p["page_size"], p["bn"], p["bk"]
    ew = acc_dtype(cdt)
    numerics = p.get("numerics", "max")
    q, blocks = t["q"], t["kv_cache.blocks"]
    cache = cache_layer(blocks, p["layer_idx"])[:, :, 0]                  # [nb, ps, latent + rope]
    lut = t["kv_cache.lookup_table"]
    T = q.shape[0]

    # Steps 1-2, in place: RoPE of q and of the new cache rows, RMSNorm of their latent part.
    pos, blk, off = row_positions(t, h, ps)
    f = t["freqs_cis"][pos].to(ew).view(T, rope // 2, 2)
    cos, sin = f[..., 0], f[..., 1]
    q[:, :, nope:] = _rotate(q[:, :, nope:], cos[:, None], sin[:, None], ew)
    rows = cache[blk, off]                                                 # [T, latent + rope]
    x = rows[:, :latent].to(ew)
    r = 1.0 / torch.sqrt(x.square().mean(dim=1, keepdim=True) + p["epsilon"])
    if numerics == "max":
        y = round_to(x * r, torch.bfloat16).to(ew)
        normed = round_to(y * t["kv_norm_gamma"].to(ew), torch.bfloat16)
    else:                                                                  # DeepSeek's RMSNorm: one rounding
        normed = round_to(t["kv_norm_gamma"].to(ew) * (x * r), torch.bfloat16)
    cache[blk, off] = torch.cat((normed, _rotate(rows[:, latent:], cos, sin, ew)), dim=1)

    # Step 3: gather each sequence's window of latent rows into the contiguous buffer.
    bro, co, iro, lens = h["buffer_row_offsets"], h["cache_offsets"], h["input_row_offsets"], h["cache_lengths"]
    B = len(lens)
    parts = [gather_rows(cache, lut[b:b + 1], bro[b + 1] - bro[b], ps, start=co[b])[0] for b in range(B)]
    buf = torch.cat(parts) if parts else cache.new_empty((0, latent + rope))

    # Steps 4-6: quantize, block-scaled GEMM with kv_b_proj, split into K_nope and V.
    xq, sa = _quantize_groups(buf[:, :latent], bk, numerics)
    kv = _block_scaled_gemm(xq, sa, t["kv_b_proj"], t["kv_b_proj_scale"], bn, cdt, budget)
    kv = kv.view(-1, H, nope + v)

    # Step 7: causal attention per sequence over the visible window rows.
    out = torch.zeros((T, H, v), dtype=torch.bfloat16, device=q.device)
    for b in range(B):
        t0, seq, cl = iro[b], iro[b + 1] - iro[b], lens[b]
        if seq == 0:
            continue
        # Window rows past the last query position are never attended (they may be page padding).
        J = max(0, min(bro[b + 1] - bro[b], cl + seq - co[b]))
        if J == 0:
            continue
        kvb = kv[bro[b]:bro[b] + J]
        k = torch.cat((kvb[..., :nope], buf[bro[b]:bro[b] + J, None, latent:].expand(J, H, rope)), dim=2)
        qb = q[t0:t0 + seq].to(cdt).transpose(0, 1)[None]                  # [1, H, S, nope + rope]
        kb = k.to(cdt).transpose(0, 1)[None]
        vb = kvb[..., nope:].to(cdt).transpose(0, 1)[None]
        qpos = cl + torch.arange(seq, device=q.device)
        visible = co[b] + torch.arange(J, device=q.device)[None, :] <= qpos[:, None]   # [S, J]
        if "topk_indices" in t:                                            # DeepSeek-V3.2's index mask
            idx = t["topk_indices"][t0:t0 + seq].long() - co[b]
            listed = torch.zeros((seq, J + 1), dtype=torch.bool, device=q.device)
            listed.scatter_(1, torch.where((idx >= 0) & (idx < J), idx, J), True)
            visible = visible & listed[:, :J]
        if numerics != "max":
            # DeepSeek: softmax normalized, rounded to bf16 (scores.type_as(x)), then P·V.
            s_ = torch.einsum("hsd,hjd->hsj", qb[0].to(ew), kb[0].to(ew)) * p["scale"]
            s_ = s_.masked_fill(~visible[None], float("-inf"))
            pr = round_to(torch.softmax(s_, dim=-1), torch.bfloat16).to(ew)
            o = torch.einsum("hsj,hjd->hsd", pr, vb[0].to(ew)).transpose(0, 1)          # [S, H, v]
            o = torch.where(visible.any(dim=1)[:, None, None], o, torch.zeros_like(o))
            out[t0:t0 + seq] = round_to(o, torch.bfloat16)
            continue
        # Bottom-right aligned causal (the usual single-chunk call) lets SDPA pick a fused kernel.
        exact_causal = cl - co[b] == J - seq and J >= seq and "topk_indices" not in t
        mask = _causal_lower_right(seq, J) if exact_causal else None
        if mask is None:
            mask = visible
        # Heads in chunks: where SDPA falls back to its math path (a CPU, or v_depth != qk_depth
        # there) it materializes the [heads, S, J] scores.
        o = torch.cat([F.scaled_dot_product_attention(qb[:, h0:h1], kb[:, h0:h1], vb[:, h0:h1], attn_mask=mask,
                                                      scale=p["scale"])[0]
                       for h0, h1 in chunks(H, budget // max(1, seq * J))]).transpose(0, 1)     # [S, H, v]
        o = torch.where(visible.any(dim=1)[:, None, None], o, torch.zeros_like(o))    # no key: output 0
        out[t0:t0 + seq] = round_to(o, torch.bfloat16)
    return out


# ---- op 4: sparse MLA prefill ------------------------------------------------------------------

def sparse_mla_prefill(t, h, p, cdt=torch.bfloat16, budget=1 << 27):
    """Returns (out.output, out.lse, out.max_logits)."""
    Hq, qk, vd, stride, ps = p["num_q_heads"], p["qk_depth"], p["v_depth"], p["indices_stride"], p["page_size"]
    acc = acc_dtype(cdt)
    q, idx_all = t["q"], t["indices"]
    cache = cache_layer(t["kv_cache.blocks"], p["layer_idx"])[:, :, 0]   # [nb, ps, wq]
    wq = cache.shape[2]                                                    # qk, or the codes of a split row
    tail = cache_layer(t["kv_cache.tail"], p["layer_idx"])[:, :, 0] if "kv_cache.tail" in t else None
    fp8 = cache.dtype == torch.uint8
    if fp8:
        scales = cache_layer(t["kv_cache.scales"], p["layer_idx"])[:, :, 0]  # [nb, ps, groups]
        qg = p.get("quant_granularity") or wq
    num_rows = cache.shape[0] * ps
    T, dev = q.shape[0], q.device
    lens = t.get("topk_lengths")
    sink = t.get("attn_sink")
    out = torch.empty((T, Hq, vd), dtype=torch.bfloat16, device=dev)
    lse = torch.empty((T, Hq), dtype=torch.float32, device=dev)
    max_logits = torch.empty((T, Hq), dtype=torch.float32, device=dev)
    slot = torch.arange(stride, device=dev)
    for t0, t1 in chunks(T, budget // max(1, stride * max(qk, Hq))):
        idx = idx_all[t0:t1].long()
        valid = (idx >= 0) & (idx < num_rows)
        if lens is not None:
            valid &= slot < lens[t0:t1, None]
        # Skipped slots gather a valid row of the same query (its weight is 0): a row chosen
        # elsewhere could hold NaN, and 0·NaN would reach the output through P·V.
        first = valid.to(torch.int32).argmax(dim=1, keepdim=True)
        r = torch.where(valid, idx, idx.gather(1, first)).clamp(0, num_rows - 1)
        rows = cache[r // ps, r % ps]                                        # [tc, stride, qk]
        if fp8:
            sc = scales[r // ps, r % ps].to(acc)                             # [tc, stride, groups]
            if sc.shape[2] > 1:
                sc = sc.repeat_interleave(qg, dim=2)[..., :wq]
            rows = (decode_fp8(rows, acc) * sc).to(cdt)
            if tail is not None:  # split rows: [codes · scales | bf16 tail]
                rows = torch.cat([rows, tail[r // ps, r % ps].to(cdt)], dim=2)
        else:
            rows = rows.to(cdt)
        s = torch.bmm(q[t0:t1].to(cdt), rows.transpose(1, 2)).to(acc) * p["scale"]   # [tc, Hq, stride]
        s.masked_fill_(~valid[:, None, :], NEG_INF)
        m = s.amax(dim=2, keepdim=True)                                      # NaN sticks
        any_valid = valid.any(dim=1)[:, None, None]
        m = torch.where(any_valid, m, torch.zeros_like(m))
        e = torch.exp(s - m)
        l = e.sum(dim=2, keepdim=True)
        den = l if sink is None else l + torch.exp(sink.to(acc)[None, :, None] - m)
        o = torch.bmm(e.to(cdt), rows[..., :vd]).to(acc) / den
        out[t0:t1] = round_to(torch.where(any_valid, o, torch.zeros_like(o)), torch.bfloat16)
        lse[t0:t1] = torch.where(any_valid, m + torch.log(l), torch.full_like(m, float("inf")))[..., 0].float()
        max_logits[t0:t1] = torch.where(any_valid, m, torch.full_like(m, NEG_INF))[..., 0].float()
    return out, lse, max_logits


# ---- op 5: fused QKV matmul into the paged cache -----------------------------------------------

def _unpack_nibbles(words, dim):
    """int32 words -> their eight 4-bit fields (nibble i = bits 4i..4i+3) along a new axis after
    `dim`, merged into it."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    shape = [1] * (words.dim() + 1)
    shape[dim + 1] = 8
    nib = (words.unsqueeze(dim + 1) >> shifts.view(shape)) & 0xF
    return nib.flatten(dim, dim + 1)


def dequantize_weight(t, p, N, K, cdt):
    """The logical weight as [K, N] in cdt (transposed: that is how x @ W wants it)."""
    fmt = p["weight_format"]
    if fmt == "dense":
        return t["weight"].to(cdt).t()
    if fmt == "fp8_block":
        ws = t["weight_scale"].to(acc_dtype(cdt))
        ws = ws.repeat_interleave(128, dim=0)[:N].repeat_interleave(128, dim=1)[:, :K]
        return (decode_fp8(t["weight"], acc_dtype(cdt)) * ws).to(cdt).t()
    # GPTQ: W[n, k] = bf16((q[k, n] - z[g, n]) · scale[g, n]), g = g_idx[k] (default k / group_size).
    q = _unpack_nibbles(t["qweight"], 0)                                   # [K, N]
    g = t.get("g_idx")
    g = g.long() if g is not None else torch.arange(K, device=q.device) // p["group_size"]
    # AutoGPTQ's v1 checkpoints store zero − 1 (spec 06 §D1).
    z = _unpack_nibbles(t["qzeros"], 1)[g] + (p.get("zero_format") == "v1") if p.get("has_zp") else 8  # [K, N]
    w = ((q - z).to(torch.float32) * t["scales"][g].to(torch.float32)).to(torch.bfloat16)
    return w.to(cdt)


def fused_qkv_paged(t, h, p, cdt=torch.bfloat16, budget=None):
    """Y = X·Wᵀ; the Q columns are returned, the K/V columns written into the cache in place."""
    x, blocks = t["hidden_state"], t["kv_cache.blocks"]
    T, K = x.shape
    kv_dim, hkv, hd = blocks.shape[1], blocks.shape[4], blocks.shape[5]
    q_dim = p["q_dim"]
    N = q_dim + kv_dim * hkv * hd
    y = round_to(torch.matmul(x.to(cdt), dequantize_weight(t, p, N, K, cdt)), x.dtype)   # [T, N]
    _, blk, off = row_positions(t, h, p["page_size"])
    blocks[blk, :, p["layer_idx"], off] = y[:, q_dim:].reshape(T, kv_dim, hkv, hd)
    return y[:, :q_dim]
