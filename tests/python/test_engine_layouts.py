"""mlakit.indexer_cache: the DeepGEMM / SGLang / vLLM FP8 indexer cache read in place by op 1 gives
the bits of mlakit's own layout (every lightning_indexer golden file with one scale per row), with
padded blocks whose spare bytes hold NaN codes; refused layouts name the field."""
import re

import numpy as np
import pytest

import mlakit
import mlakit.golden as golden
from conftest import golden_files
from test_api import poisoned, same_bits


def indexer_files():
    out = []
    for path in golden_files():
        if path.name.startswith("lightning_indexer."):
            g = golden.load(path)
            if g.inputs["k_cache.scales"].shape[5] == 1:  # one scale per row: the engine layout's
                out.append(path)
    return out


def pack(blocks, scales, block_pad):
    """An engine buffer of the cache (all layers), spare bytes 0x7F."""
    nb, _, layers, ps, _, d = blocks.shape
    block = ps * (d + 4) + block_pad
    buf = np.full(layers * nb * block + 16, 0x7F, dtype=np.uint8)
    codes = blocks.view(np.uint8)
    for ly in range(layers):
        for b in range(nb):
            base = (ly * nb + b) * block
            buf[base:base + ps * d] = codes[b, 0, ly, :, 0, :].reshape(-1)
            buf[base + ps * d:base + ps * d + 4 * ps] = scales[b, 0, ly, :, 0, 0].astype(np.float32).view(np.uint8)
    return buf, block


@pytest.mark.parametrize("path", indexer_files(), ids=lambda p: p.name[: -len(".safetensors")])
@pytest.mark.parametrize("block_pad", [0, 64])
def test_the_engine_layout_gives_the_own_layouts_bits(path, block_pad):
    g = golden.load(path)
    t, p = g.inputs, g.params
    nb, _, layers, ps, _, d = t["k_cache.blocks"].shape
    buf, block = pack(t["k_cache.blocks"], t["k_cache.scales"], block_pad)
    engine = mlakit.indexer_cache(buf, t["k_cache.lookup_table"], t["k_cache.cache_lengths"], num_blocks=nb,
                                  page_size=ps, head_dim=d, block_stride_bytes=block, num_layers=layers,
                                  layer_stride_bytes=nb * block)
    before = buf.copy()
    for backend in ("reference", "cpu"):
        want = poisoned((t["q"].shape[0], p["top_k"]), np.int32)
        got = poisoned((t["q"].shape[0], p["top_k"]), np.int32)
        own = mlakit.PagedKVCache(t["k_cache.blocks"], t["k_cache.lookup_table"], t["k_cache.cache_lengths"],
                                  t["k_cache.scales"])
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], own, top_k=p["top_k"], mask=p["mask"],
                                 layer_idx=p["layer_idx"], out=want, backend=backend)
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], engine, top_k=p["top_k"], mask=p["mask"],
                                 layer_idx=p["layer_idx"], out=got, backend=backend)
        assert same_bits(got, want), backend
    assert same_bits(buf, before), "the engine's buffer was written"


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_blocks=4, page_size=8, head_dim=32, block_stride_bytes=280),
     "block_stride_bytes=280 (expected 0 or at least page_size·(head_dim + 4) = 288)"),
    (dict(num_blocks=4, page_size=8, head_dim=32, block_stride_bytes=290), "block_stride_bytes=290 (expected a multiple"),
    (dict(num_blocks=0, page_size=8, head_dim=32), "num_blocks=0"),
    (dict(num_blocks=64, page_size=8, head_dim=32), "buffer.size=1024 (expected at least"),
])
def test_refused_layouts_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=re.escape("indexer_cache: " + message)):
        mlakit.indexer_cache(np.zeros(1024, np.uint8), np.zeros((1, 1), np.uint32), np.zeros(1, np.uint32), **kwargs)


def flashmla_files():
    """The op 4 golden files whose cache has FlashMLA's split rows (V32: 512 codes, 4 f32 scales;
    MODEL1: 448 codes, 7 e8m0 scales; both a 64-column bf16 tail)."""
    out = []
    for path in golden_files():
        if path.name.startswith("sparse_mla_prefill."):
            t = golden.load(path).inputs
            if "kv_cache.tail" in t and t["kv_cache.blocks"].shape[5] in (512, 448) and t["kv_cache.tail"].shape[5] == 64:
                out.append(path)
    return out


def pack_flashmla(t, fmt, token_pad, block_pad):
    """The spec's byte records of the file's cache, spare bytes 0xFF (NaN codes and NaN scales)."""
    blocks, scales, tail = t["kv_cache.blocks"], t["kv_cache.scales"], t["kv_cache.tail"]
    nb, _, layers, ps, _, wq = blocks.shape
    token = (656 if fmt == "v32" else 576) + token_pad
    used = ps * token + (0 if fmt == "v32" else 8 * ps)
    block = (used if fmt == "v32" else -(-used // 576) * 576) + block_pad
    buf = np.full(layers * nb * block + 64, 0xFF, dtype=np.uint8)
    for ly in range(layers):
        for b in range(nb):
            base = (ly * nb + b) * block
            for o in range(ps):
                rec = base + o * token
                buf[rec:rec + wq] = blocks[b, 0, ly, o, 0].view(np.uint8)
                sc = np.ascontiguousarray(scales[b, 0, ly, o, 0]).view(np.uint8)
                at = rec + 512 if fmt == "v32" else base + ps * token + 8 * o
                buf[at:at + sc.size] = sc
                tl = rec + 528 if fmt == "v32" else rec + 448
                buf[tl:tl + 128] = np.ascontiguousarray(tail[b, 0, ly, o, 0]).view(np.uint8)
    return buf, token, block


@pytest.mark.parametrize("path", flashmla_files(), ids=lambda p: p.name[: -len(".safetensors")])
@pytest.mark.parametrize("padded", [False, True])
def test_flashmla_caches_give_the_bits_of_separate_tensors(path, padded):
    g = golden.load(path)
    t, p = g.inputs, g.params
    fmt = "v32" if t["kv_cache.blocks"].shape[5] == 512 else "model1"
    nb, _, layers, ps, _, _ = t["kv_cache.blocks"].shape
    buf, token, block = pack_flashmla(t, fmt, 16 if padded and fmt == "v32" else 0, 576 if padded else 0)
    engine = mlakit.flashmla_sparse_cache(buf, t["kv_cache.lookup_table"], t["kv_cache.cache_lengths"], format=fmt,
                                          num_blocks=nb, page_size=ps, token_stride_bytes=token if fmt == "v32" else 0,
                                          block_stride_bytes=block, num_layers=layers)
    own = mlakit.PagedKVCache(t["kv_cache.blocks"], t["kv_cache.lookup_table"], t["kv_cache.cache_lengths"],
                              t["kv_cache.scales"], p["quant_granularity"], tail=t["kv_cache.tail"])
    before = buf.copy()
    T, Hq = t["q"].shape[:2]
    for backend in ("reference", "cpu"):
        outs = []
        for cache in (own, engine):
            out = poisoned((T, Hq, p["v_depth"]), np.uint16)
            lse = poisoned((T, Hq), np.float32)
            mlakit.sparse_mla_prefill(t["q"], cache, t["indices"], topk_lengths=t.get("topk_lengths"),
                                      attn_sink=t.get("attn_sink"), scale=p["scale"], v_depth=p["v_depth"],
                                      layer_idx=p["layer_idx"], out=out, lse=lse, backend=backend)
            outs.append((out, lse))
        assert same_bits(outs[0][0], outs[1][0]) and same_bits(outs[0][1], outs[1][1]), backend
    assert same_bits(buf, before), "the engine's buffer was written"


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_blocks=4, page_size=8, token_stride_bytes=650), "token_stride_bytes=650 (expected 0, or a multiple of 4"),
    (dict(num_blocks=4, page_size=8, format="model1", block_stride_bytes=4608),
     "block_stride_bytes=4608 (expected 0 or at least the block's records, 4672 bytes)"),
    (dict(num_blocks=4, page_size=8, format="fp4"), "format='fp4' (expected 'v32' or 'model1')"),
    (dict(num_blocks=64, page_size=8), "buffer.size=1024 (expected at least"),
])
def test_flashmla_refused_layouts_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=re.escape("flashmla_sparse_cache: " + message)):
        mlakit.flashmla_sparse_cache(np.zeros(1024, np.uint8), np.zeros((1, 1), np.uint32), np.zeros(1, np.uint32),
                                     **kwargs)
