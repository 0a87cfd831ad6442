"""Engines' own cache buffers as mlakit caches, read in place (docs/engine-layouts.md)."""
from .ops import PagedKVCache


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _flat(buffer, helper):
    """The buffer as one flat uint8 array or tensor (a view: no copy); `helper` names the caller."""
    if _is_torch(buffer):
        import torch
        if buffer.dtype != torch.uint8 or not buffer.is_contiguous():
            raise ValueError(f"{helper}: buffer must be a contiguous uint8 tensor, got "
                             f"{buffer.dtype}{'' if buffer.is_contiguous() else ' (strided)'}")
        return buffer.reshape(-1)
    import numpy as np
    if buffer.dtype != np.uint8 or not buffer.flags.c_contiguous:
        raise ValueError(f"{helper}: buffer must be a C-contiguous uint8 array, got {buffer.dtype}")
    return buffer.reshape(-1)


def _strided(flat, dtype_bytes, offset_bytes, shape, strides_elems, kind="float"):
    """A view of `flat` (uint8) as elements of dtype_bytes bytes (f32 scales, bf16 tails as their
    uint16 bits in NumPy, or bytes) from offset_bytes on."""
    if _is_torch(flat):
        import torch
        t = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32}[dtype_bytes]
        base = flat if dtype_bytes == 1 else flat[: flat.numel() // dtype_bytes * dtype_bytes].view(t)
        return base.as_strided(shape, strides_elems, offset_bytes // dtype_bytes)
    import numpy as np
    t = {1: np.uint8, 2: np.uint16, 4: np.float32}[dtype_bytes]
    base = flat if dtype_bytes == 1 else flat[: flat.size // dtype_bytes * dtype_bytes].view(t)
    return np.lib.stride_tricks.as_strided(base[offset_bytes // dtype_bytes:], shape,
                                           tuple(s * dtype_bytes for s in strides_elems), writeable=False)


def _layers_and_buffer(helper, need, buffer, num_blocks, block, block_used, num_layers, layer_stride_bytes):
    """The layer stride (0: num_blocks blocks) checked against the blocks, and the buffer as flat
    bytes checked to hold every layer's blocks (the last block's used bytes)."""
    layer = layer_stride_bytes or num_blocks * block
    need(num_layers == 1 or layer >= num_blocks * block, "layer_stride_bytes", layer_stride_bytes,
         f"expected 0 or at least num_blocks·block_stride = {num_blocks * block}")
    need(layer % 4 == 0, "layer_stride_bytes", layer, "expected a multiple of 4")
    flat = _flat(buffer, helper)
    size = flat.numel() if _is_torch(flat) else flat.size
    end = (num_layers - 1) * layer + (num_blocks - 1) * block + block_used
    need(size >= end, "buffer.size", size, f"expected at least {end} bytes for this layout")
    return layer, flat


def indexer_cache(buffer, lookup_table, cache_lengths, *, num_blocks, page_size=64, head_dim=128,
                  block_stride_bytes=0, num_layers=1, layer_stride_bytes=0):
    """The FP8 indexer K cache of DeepGEMM's fp8_paged_mqa_logits, SGLang and vLLM (DeepSeek-V3.2)
    as op 1's k_cache, read in place: per block, the page_size·head_dim f8e4m3 codes of its tokens
    (token-major), then page_size f32 scales; blocks block_stride_bytes apart (0: page_size·(head_dim
    + 4), 8448 for 64 x 128), layers layer_stride_bytes apart (0: num_blocks blocks). `buffer` is the
    engine's uint8 array or tensor; the views share its memory."""
    def need(ok, field, value, expected):
        if not ok:
            raise ValueError(f"indexer_cache: {field}={value} ({expected})")

    for field, v in (("num_blocks", num_blocks), ("page_size", page_size), ("head_dim", head_dim),
                     ("num_layers", num_layers)):
        need(int(v) >= 1, field, v, "expected >= 1")
    codes = page_size * head_dim
    packed = codes + 4 * page_size
    block = block_stride_bytes or packed
    need(block >= packed, "block_stride_bytes", block_stride_bytes,
         f"expected 0 or at least page_size·(head_dim + 4) = {packed}")
    need(block % 4 == 0, "block_stride_bytes", block, "expected a multiple of 4: the f32 scales of every block")
    need(codes % 4 == 0, "head_dim", head_dim, "page_size·head_dim must be a multiple of 4")
    layer, flat = _layers_and_buffer("indexer_cache", need, buffer, num_blocks, block, packed, num_layers,
                                     layer_stride_bytes)
    blocks = _strided(flat, 1, 0, (num_blocks, 1, num_layers, page_size, 1, head_dim),
                      (block, codes, layer, head_dim, head_dim, 1))
    scales = _strided(flat, 4, codes, (num_blocks, 1, num_layers, page_size, 1, 1),
                      (block // 4, 1, layer // 4, 1, 1, 1))
    if not _is_torch(flat):
        import ml_dtypes
        blocks = blocks.view(ml_dtypes.float8_e4m3fn)
    return PagedKVCache(blocks, lookup_table, cache_lengths, scales, head_dim)


def flashmla_sparse_cache(buffer, lookup_table, cache_lengths, *, num_blocks, format="v32", page_size=64,
                          token_stride_bytes=0, block_stride_bytes=0, num_layers=1, layer_stride_bytes=0):
    """FlashMLA's FP8 sparse-attention cache (also SGLang's) as sparse_mla_prefill's kv_cache, read
    in place (split rows: fp8 codes with their scales, then a bf16 tail):
      format="v32"    token records of 656 bytes, token_stride_bytes apart (0: 656): [512 fp8 codes]
                      [4 f32 scales, one per 128][64 bf16 rope]; blocks block_stride_bytes apart (0:
                      page_size records; FlashMLA's tests pad to (page_size + 1)·656); qk_depth 576.
      format="model1" per block, page_size records of 576 bytes, [448 fp8 codes][64 bf16 rope], then
                      page_size records of 8 bytes, [7 e8m0 scales, one per 64][pad]; the block padded
                      to a multiple of 576 (0: that size); qk_depth 512.
    Layers are layer_stride_bytes apart (0: num_blocks blocks). `buffer` is the engine's uint8 array
    or tensor (a 4-byte-aligned start); the views share its memory."""
    def need(ok, field, value, expected):
        if not ok:
            raise ValueError(f"flashmla_sparse_cache: {field}={value} ({expected})")

    need(format in ("v32", "model1"), "format", repr(format), "expected 'v32' or 'model1'")
    for field, v in (("num_blocks", num_blocks), ("page_size", page_size), ("num_layers", num_layers)):
        need(int(v) >= 1, field, v, "expected >= 1")
    v32 = format == "v32"
    codes, record = (512, 656) if v32 else (448, 576)
    token = token_stride_bytes or record
    if v32:
        need(token >= record and token % 4 == 0, "token_stride_bytes", token_stride_bytes,
             "expected 0, or a multiple of 4 of at least 656")
    else:
        need(token == record, "token_stride_bytes", token_stride_bytes, "expected 0 or 576: model1 records are packed")
    tokens = page_size * token
    used = tokens if v32 else tokens + 8 * page_size
    block = block_stride_bytes or (used if v32 else -(-used // record) * record)
    need(block >= used, "block_stride_bytes", block_stride_bytes,
         f"expected 0 or at least the block's records, {used} bytes")
    need(block % 4 == 0, "block_stride_bytes", block, "expected a multiple of 4: the scales and tails stay aligned")
    layer, flat = _layers_and_buffer("flashmla_sparse_cache", need, buffer, num_blocks, block, used, num_layers,
                                     layer_stride_bytes)
    address = flat.data_ptr() if _is_torch(flat) else flat.__array_interface__["data"][0]
    need(address % 4 == 0, "buffer address % 4", address % 4, "expected a 4-byte aligned buffer")
    shape = lambda w: (num_blocks, 1, num_layers, page_size, 1, w)  # noqa: E731
    blocks = _strided(flat, 1, 0, shape(codes), (block, token, layer, token, token, 1))
    if v32:
        scales = _strided(flat, 4, codes, shape(4), (block // 4, token // 4, layer // 4, token // 4, token // 4, 1))
        tail = _strided(flat, 2, codes + 16, shape(64), (block // 2, token // 2, layer // 2, token // 2, token // 2, 1))
    else:
        scales = _strided(flat, 1, tokens, shape(7), (block, 8, layer, 8, 8, 1))
        tail = _strided(flat, 2, codes, shape(64), (block // 2, token // 2, layer // 2, token // 2, token // 2, 1))
    if not _is_torch(flat):
        import ml_dtypes
        blocks = blocks.view(ml_dtypes.float8_e4m3fn)
        tail = tail.view(ml_dtypes.bfloat16)
        if not v32 and hasattr(ml_dtypes, "float8_e8m0fnu"):
            scales = scales.view(ml_dtypes.float8_e8m0fnu)
    return PagedKVCache(blocks, lookup_table, cache_lengths, scales, 128 if v32 else 64, tail=tail)
