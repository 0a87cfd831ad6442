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
