"""Benchmark cases of the PyTorch baseline: the C++ golden drivers' bench cases (bench_cases() in
src/goldens/<op>.cpp, same names, so rows join), a few smaller ones for a CPU smoke run, and the
work (flops) each case is credited with, counted as the golden drivers' work() counts it.

Inputs are synthetic, in the golden layout (rank-6 paged caches with shuffled pages), built on the
CPU from a seeded generator; the runner moves them to the device before timing.
"""

import math
from typing import NamedTuple

import torch

import torch_ops

OPS = {1: "lightning_indexer", 2: "msa_block_indexer", 3: "mla_prefill_fp8", 4: "sparse_mla_prefill",
       5: "fused_qkv_paged"}


class Case(NamedTuple):
    op: int
    name: str
    harness: bool      # a bench case of the C++ golden drivers (the name joins with its rows)
    knobs: dict


# ---- shared input builders ---------------------------------------------------------------------

def random_codes(gen, shape):
    """Random finite fp8 codes (NaN codes would turn whole rows into NaN)."""
    c = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    return torch.where((c & 0x7F) == 0x7F, c ^ 1, c)


def normal(gen, shape, sigma, dtype=torch.bfloat16):
    return (torch.randn(shape, generator=gen) * sigma).to(dtype)


def paged_cache(gen, needed, page_size, row_shape, fill, kv_dim=1, spare=1):
    """A one-layer paged cache [num_blocks, kv_dim, 1, page_size, *row_shape] whose sequences own
    shuffled pages, and its lookup table [B, max_pages] (the sentinel num_blocks past each
    sequence's pages)."""
    pages = [math.ceil(n / page_size) for n in needed]
    total = sum(pages)
    nb = total + spare
    perm = torch.randperm(total, generator=gen)
    lut = torch.full((len(needed), max(pages + [1])), nb, dtype=torch.int64)
    at = 0
    for b, n in enumerate(pages):
        lut[b, :n] = perm[at:at + n]
        at += n
    return fill((nb, kv_dim, 1, page_size) + tuple(row_shape)), lut


def offsets(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def i64(values):
    return torch.tensor(values, dtype=torch.int64)


def seq_lens(h):
    """Rows per sequence, from the host copy of input_row_offsets."""
    o = h["input_row_offsets"]
    return [b - a for a, b in zip(o, o[1:])]


def causal_pairs(seq_lens, cache_lens):
    return sum(s * c + s * (s + 1) / 2 for s, c in zip(seq_lens, cache_lens) if s)


# ---- op 1 --------------------------------------------------------------------------------------

def op1_cases(small):
    if small:
        return [Case(1, "small_prefill_b1_s256_c512_h16", False, dict(seq=[256], cache=[512], H=16, ps=64, top_k=256)),
                Case(1, "small_decode_b4_c2048_h16", False,
                     dict(seq=[1] * 4, cache=[2048] * 4, H=16, ps=64, top_k=256))]
    v = []
    for H in (64, 32):
        v += [Case(1, f"prefill_b1_s4096_c0_h{H}", True, dict(seq=[4096], cache=[0], H=H, ps=64)),
              Case(1, f"prefill_b1_s4096_c8192_h{H}", True, dict(seq=[4096], cache=[8192], H=H, ps=64)),
              Case(1, f"prefill_b4_s1024_c4096_h{H}", True, dict(seq=[1024] * 4, cache=[4096] * 4, H=H, ps=64))]
        for c in (8192, 32768, 131072):
            v += [Case(1, f"decode_b1_c{c}_h{H}", True, dict(seq=[1], cache=[c], H=H, ps=64)),
                  Case(1, f"decode_b32_c{c}_h{H}", True, dict(seq=[1] * 32, cache=[c] * 32, H=H, ps=64))]
    v += [Case(1, "prefill_b1_s4096_c8192_h64_p128", True, dict(seq=[4096], cache=[8192], H=64, ps=128)),
          Case(1, "decode_b32_c32768_h64_p128", True, dict(seq=[1] * 32, cache=[32768] * 32, H=64, ps=128))]
    return v


OP1_QUICK = ("prefill_b1_s4096_c8192_h64", "decode_b32_c32768_h64")


def op1_build(k, gen):
    seq, cache, H, ps = k["seq"], k["cache"], k["H"], k["ps"]
    D, top_k = 128, k.get("top_k", 2048)
    T = sum(seq)
    blocks, lut = paged_cache(gen, [c + s for c, s in zip(cache, seq)], ps, (1, D), lambda s: random_codes(gen, s))
    t = {"q": random_codes(gen, (T, H, D)), "q_s": torch.randn((T, H), generator=gen) * 0.25,
         "input_row_offsets": i64(offsets(seq)), "k_cache.blocks": blocks,
         "k_cache.scales": torch.rand(blocks.shape[:-1] + (1,), generator=gen) * 0.056 + 0.004,
         "k_cache.lookup_table": lut, "k_cache.cache_lengths": i64(cache)}
    h = {"input_row_offsets": offsets(seq), "cache_lengths": list(cache)}
    p = {"num_heads": H, "head_dim": D, "top_k": top_k, "mask": "causal", "quant_granularity": D, "layer_idx": 0,
         "page_size": ps}
    return t, h, p


def op1_flops(t, h, p):
    return 2.0 * p["num_heads"] * p["head_dim"] * causal_pairs(seq_lens(h), h["cache_lengths"])


# ---- op 2 --------------------------------------------------------------------------------------

def op2_cases(small):
    if small:
        return [Case(2, "small_prefill_s512_c1536_h4", False, dict(seq=[512], pre=[1536], Hi=4)),
                Case(2, "small_decode_b4_c8192_h4", False, dict(seq=[1] * 4, pre=[8192] * 4, Hi=4)),
                Case(2, "small_prefill_s512_c1536_h4_fp8", False, dict(seq=[512], pre=[1536], Hi=4, fp8=True))]
    v = []
    for Hi in (4, 8):
        v += [Case(2, f"prefill_s4096_c0_h{Hi}", True, dict(seq=[4096], pre=[0], Hi=Hi)),
              Case(2, f"prefill_s4096_c28672_h{Hi}", True, dict(seq=[4096], pre=[28672], Hi=Hi)),
              Case(2, f"decode_b1_c32768_h{Hi}", True, dict(seq=[1], pre=[32768], Hi=Hi)),
              Case(2, f"decode_b1_c131072_h{Hi}", True, dict(seq=[1], pre=[131072], Hi=Hi)),
              Case(2, f"decode_b32_c32768_h{Hi}", True, dict(seq=[1] * 32, pre=[32768] * 32, Hi=Hi)),
              Case(2, f"decode_b32_c131072_h{Hi}", True, dict(seq=[1] * 32, pre=[131072] * 32, Hi=Hi))]
    v += [Case(2, "prefill_s4096_c28672_h8_fp8", True, dict(seq=[4096], pre=[28672], Hi=8, fp8=True)),
          Case(2, "decode_b32_c131072_h8_fp8", True, dict(seq=[1] * 32, pre=[131072] * 32, Hi=8, fp8=True))]
    return v


OP2_QUICK = ("prefill_s4096_c28672_h8", "decode_b32_c32768_h8")


def op2_build(k, gen):
    seq, pre, Hi = k["seq"], k["pre"], k["Hi"]
    Di, bs = 128, 128
    fill = (lambda s: random_codes(gen, s)) if k.get("fp8") else (lambda s: normal(gen, s, 0.5))
    blocks, lut = paged_cache(gen, [a + b for a, b in zip(pre, seq)], bs, (1, Di), fill)
    t = {"q": normal(gen, (sum(seq), Hi, Di), 0.5), "input_row_offsets": i64(offsets(seq)), "prefix_lens": i64(pre),
         "k_cache.blocks": blocks, "k_cache.lookup_table": lut, "k_cache.cache_lengths": i64(pre)}
    h = {"input_row_offsets": offsets(seq), "prefix_lens": list(pre)}
    p = {"num_index_heads": Hi, "idx_head_dim": Di, "block_size": bs, "topk": 16, "init_blocks": 1, "local_blocks": 2,
         "scale": Di ** -0.5, "layer_idx": 0, "page_size": bs}
    return t, h, p


def op2_flops(t, h, p):
    return 2.0 * p["num_index_heads"] * p["idx_head_dim"] * causal_pairs(seq_lens(h), h["prefix_lens"])


# ---- op 3 --------------------------------------------------------------------------------------

def op3_cases(small):
    if small:
        return [Case(3, "small_h4_b1_s128_c256", False, dict(H=4, seq=[128], cache=[256], ps=64)),
                Case(3, "small_h4_b2_s64_c128", False, dict(H=4, seq=[64, 64], cache=[128, 128], ps=64))]
    shapes = [("b1_s1024_c0", [1024], [0]), ("b1_s1024_c4096", [1024], [4096]), ("b1_s4096_c0", [4096], [0]),
              ("b1_s4096_c4096", [4096], [4096]), ("b4_s512_c2048", [512] * 4, [2048] * 4)]
    v = [Case(3, f"h{H}_{n}", True, dict(H=H, seq=s, cache=c, ps=64)) for H in (128, 16) for n, s, c in shapes]
    v.append(Case(3, "h128_b1_s4096_c4096_page128", True, dict(H=128, seq=[4096], cache=[4096], ps=128)))
    return v


OP3_QUICK = ("h128_b1_s4096_c4096", "h16_b1_s1024_c4096")


def rope_table(max_pos, rope, base=10000.0):
    """freqs_cis rows: interleaved (cos θ_i, sin θ_i) of position · base^(-2i/rope)."""
    inv = base ** (-torch.arange(0, rope, 2, dtype=torch.float64) / rope)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.stack((ang.cos(), ang.sin()), dim=2).reshape(max_pos, rope).to(torch.bfloat16)


def op3_build(k, gen):
    H, seq, cache, ps = k["H"], k["seq"], k["cache"], k["ps"]
    nope, rope, v, latent, bn, bk = 128, 64, 128, 512, 128, 128
    N = H * (nope + v)
    # One window per sequence from position 0, padded to a page multiple (as MAX pads it).
    window = [math.ceil((c + s) / ps) * ps for c, s in zip(cache, seq)]
    blocks, lut = paged_cache(gen, window, ps, (1, latent + rope), lambda s: normal(gen, s, 1.0))
    T = sum(seq)
    t = {"q": normal(gen, (T, H, nope + rope), 1.0), "input_row_offsets": i64(offsets(seq)),
         "freqs_cis": rope_table(max(c + s for c, s in zip(cache, seq)) + 3, rope),
         "kv_norm_gamma": (1.0 + 0.1 * torch.randn(latent, generator=gen)).to(torch.bfloat16),
         "kv_cache.blocks": blocks, "kv_cache.lookup_table": lut, "kv_cache.cache_lengths": i64(cache),
         "buffer_row_offsets": i64(offsets(window)), "cache_offsets": i64([0] * len(seq)),
         "kv_b_proj": random_codes(gen, (N, latent)),
         "kv_b_proj_scale": torch.rand((math.ceil(N / bn), math.ceil(latent / bk)), generator=gen) * 1e-3 + 1e-4}
    h = {"input_row_offsets": offsets(seq), "cache_lengths": list(cache), "buffer_row_offsets": offsets(window),
         "cache_offsets": [0] * len(seq)}
    p = {"num_heads": H, "nope": nope, "rope": rope, "v": v, "latent": latent, "bn": bn, "bk": bk,
         "scale": (nope + rope) ** -0.5, "epsilon": 1e-6, "buffer_length": sum(window), "layer_idx": 0,
         "page_size": ps}
    return t, h, p


def op3_flops(t, h, p):
    iro, bro, co, lens = h["input_row_offsets"], h["buffer_row_offsets"], h["cache_offsets"], h["cache_lengths"]
    H = p["num_heads"]
    pairs = 0
    for b in range(len(lens)):
        window = bro[b + 1] - bro[b]
        for i in range(iro[b + 1] - iro[b]):
            pairs += min(max(lens[b] + i - co[b] + 1, 0), window)
    N = H * (p["nope"] + p["v"])
    return 2.0 * p["buffer_length"] * p["latent"] * N + 2.0 * H * (p["nope"] + p["rope"] + p["v"]) * pairs


# ---- op 4 --------------------------------------------------------------------------------------

def op4_cases(small):
    if small:
        return [Case(4, "small_t32_h16_k256", False, dict(T=32, Hq=16, topk=256, rows=2048)),
                Case(4, "small_fp8_t32_h16_k256", False, dict(T=32, Hq=16, topk=256, rows=2048, fp8=True))]
    return [Case(4, "dsv32_t256", True, dict(T=256, Hq=128, topk=2048, rows=8192)),
            Case(4, "dsv32_t1024", True, dict(T=1024, Hq=128, topk=2048, rows=32768)),
            Case(4, "dsv32_t4096", True, dict(T=4096, Hq=128, topk=2048, rows=131072)),
            Case(4, "dsv32_fp8_t1024", True, dict(T=1024, Hq=128, topk=2048, rows=32768, fp8=True)),
            Case(4, "quick_h64_k512", True, dict(T=256, Hq=64, topk=512, rows=8192))]


OP4_QUICK = ("quick_h64_k512", "dsv32_t1024")


def op4_build(k, gen):
    T, Hq, stride, rows, fp8 = k["T"], k["Hq"], k["topk"], k["rows"], k.get("fp8", False)
    qk, vd, ps = 576, 512, 64
    fill = (lambda s: random_codes(gen, s)) if fp8 else (lambda s: normal(gen, s, 1.0))
    blocks, lut = paged_cache(gen, [rows], ps, (1, qk), fill, spare=2)
    # The T queries are the sequence's last positions; each picks `stride` earlier-or-same
    # positions (an indexer's choice), encoded as physical rows.
    pos = rows - T + torch.arange(T)
    x = (torch.rand((T, stride), generator=gen) * (pos[:, None] + 1)).long()
    t = {"q": normal(gen, (T, Hq, qk), 1.0), "kv_cache.blocks": blocks, "kv_cache.lookup_table": lut,
         "kv_cache.cache_lengths": i64([rows - T]), "indices": (lut[0, x // ps] * ps + x % ps).to(torch.int32),
         "topk_lengths": torch.full((T,), stride, dtype=torch.int64)}
    p = {"num_q_heads": Hq, "qk_depth": qk, "v_depth": vd, "indices_stride": stride, "scale": 192 ** -0.5,
         "layer_idx": 0, "page_size": ps}
    if fp8:
        t["kv_cache.scales"] = torch.rand(blocks.shape[:-1] + (1,), generator=gen) * (1.5 / 64) + 0.5 / 64
        p["quant_granularity"] = qk
    return t, {}, p


def op4_flops(t, h, p):
    idx = t["indices"].long()
    num_rows = t["kv_cache.blocks"].shape[0] * p["page_size"]
    valid = (idx >= 0) & (idx < num_rows) & (torch.arange(idx.shape[1]) < t["topk_lengths"][:, None])
    return 2.0 * p["num_q_heads"] * (p["qk_depth"] + p["v_depth"]) * float(valid.sum())


# ---- op 5 --------------------------------------------------------------------------------------

LLAMA3_8B = dict(K=4096, q_dim=4096, mla=False, Hkv=8, hd=128, ps=128, fmt="dense")
DSV3_MLA = dict(K=7168, q_dim=1536, mla=True, Hkv=1, hd=576, ps=64, fmt="fp8_block")


def op5_rows(t):
    """(seq_lens, cache_lens) of the golden drivers: decode batches below 64 rows, else prefill."""
    if t <= 32:
        return [1] * t, [512 + 37 * i for i in range(t)]
    return ([512], [0]) if t == 512 else ([1024, 1024], [0, 256])


def op5_cases(small):
    if small:
        base = dict(K=512, q_dim=256, mla=False, Hkv=2, hd=64, ps=16, fmt="dense")
        mk = lambda name, T, **kw: Case(5, name, False, dict(base, seq=[T], cache=[40], **kw))
        return [mk("small_dense_t64", 64), mk("small_fp8_t64", 64, fmt="fp8_block"),
                mk("small_gptq_t64", 64, fmt="gptq"), mk("small_gptq_zp_gidx_t64", 64, fmt="gptq", zp=True, gidx=True),
                Case(5, "small_dense_decode_t4", False, dict(base, seq=[1] * 4, cache=[7, 30, 0, 61]))]
    models = [("llama3_8b_dense", LLAMA3_8B), ("llama3_8b_gptq", dict(LLAMA3_8B, fmt="gptq")),
              ("deepseek_v3_mla_fp8", DSV3_MLA)]
    v = []
    for name, m in models:
        for T in (1, 8, 32, 512, 2048):
            seq, cache = op5_rows(T)
            v.append(Case(5, f"{name}_t{T}", True, dict(m, seq=seq, cache=cache)))
    # GPTQ with zero points and an act-order g_idx: the golden drivers' bench set has T 1, 8 and
    # 512, not 2048.
    for T in (1, 8, 512, 2048):
        seq, cache = op5_rows(T)
        v.append(Case(5, f"llama3_8b_gptq_zp_gidx_t{T}", T != 2048, dict(LLAMA3_8B, fmt="gptq", zp=True, gidx=True,
                                                                        seq=seq, cache=cache)))
    return v


OP5_QUICK = ("llama3_8b_dense_t32", "llama3_8b_gptq_t512", "deepseek_v3_mla_fp8_t512")


def op5_build(k, gen):
    K, q_dim, hkv, hd, ps, fmt = k["K"], k["q_dim"], k["Hkv"], k["hd"], k["ps"], k["fmt"]
    seq, cache = k["seq"], k["cache"]
    kv_dim = 1 if k["mla"] else 2
    N = q_dim + kv_dim * hkv * hd
    gs = 128
    blocks, lut = paged_cache(gen, [c + s for c, s in zip(cache, seq)], ps, (hkv, hd),
                              lambda s: torch.zeros(s, dtype=torch.bfloat16), kv_dim=kv_dim)
    t = {"hidden_state": normal(gen, (sum(seq), K), 1.0), "input_row_offsets": i64(offsets(seq)),
         "kv_cache.blocks": blocks, "kv_cache.lookup_table": lut, "kv_cache.cache_lengths": i64(cache)}
    if fmt == "dense":
        t["weight"] = normal(gen, (N, K), 0.02)
    elif fmt == "fp8_block":
        t["weight"] = random_codes(gen, (N, K))
        t["weight_scale"] = torch.rand((math.ceil(N / 128), math.ceil(K / 128)), generator=gen) * 1e-4 + 1e-5
    else:
        t["qweight"] = torch.randint(-2 ** 31, 2 ** 31, (K // 8, N), generator=gen, dtype=torch.int64).to(torch.int32)
        t["scales"] = (torch.rand((K // gs, N), generator=gen) * 0.01 + 0.001).to(torch.float16)
        if k.get("zp"):
            t["qzeros"] = torch.randint(-2 ** 31, 2 ** 31, (K // gs, N // 8), generator=gen,
                                        dtype=torch.int64).to(torch.int32)
        if k.get("gidx"):
            t["g_idx"] = (torch.arange(K) // gs)[torch.randperm(K, generator=gen)].to(torch.int32)
    h = {"input_row_offsets": offsets(seq), "cache_lengths": list(cache)}
    p = {"q_dim": q_dim, "weight_format": fmt, "group_size": gs, "has_zp": bool(k.get("zp")), "num_kv_heads": hkv,
         "head_dim": hd, "layer_idx": 0, "page_size": ps}
    return t, h, p


def op5_flops(t, h, p):
    T, K = t["hidden_state"].shape
    b = t["kv_cache.blocks"]
    return 2.0 * T * (p["q_dim"] + b.shape[1] * b.shape[4] * b.shape[5]) * K


# ---- registry ----------------------------------------------------------------------------------

CASES = {1: op1_cases, 2: op2_cases, 3: op3_cases, 4: op4_cases, 5: op5_cases}
QUICK = {1: OP1_QUICK, 2: OP2_QUICK, 3: OP3_QUICK, 4: OP4_QUICK, 5: OP5_QUICK}
BUILD = {1: op1_build, 2: op2_build, 3: op3_build, 4: op4_build, 5: op5_build}
FLOPS = {1: op1_flops, 2: op2_flops, 3: op3_flops, 4: op4_flops, 5: op5_flops}
RUN = {1: torch_ops.lightning_indexer, 2: torch_ops.msa_block_indexer, 3: torch_ops.mla_prefill_fp8,
       4: torch_ops.sparse_mla_prefill, 5: torch_ops.fused_qkv_paged}


def unsupported(op):
    """Why this torch cannot run op `op`, or None."""
    if op == 3 and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return f"needs torch >= 2.1 for scaled_dot_product_attention(scale=...), this is {torch.__version__}"
    return None


def cases(op, small=False, quick=False):
    v = CASES[op](small)
    if quick:
        v = v[:1] if small else [c for c in v if c.name in QUICK[op]]
    return v


def build(case, seed=1):
    return BUILD[case.op](case.knobs, torch.Generator().manual_seed(seed))
