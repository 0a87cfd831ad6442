"""The operators as PyTorch ops: `import mlakit.torch` registers torch.ops.mlakit.* for CPU and CUDA
tensors, each an out-variant that writes the tensors its schema marks `(a!)` and returns nothing,
with a fake kernel, so `torch.compile(fullgraph=True)` traces them and Inductor keeps the cache
written in place. The functional wrappers here (same names, same arguments as the NumPy API, a
PagedKVCache of torch tensors) allocate the outputs with torch.empty on the input's device.

Tensors are read in place (zero copy); a CUDA call runs on the current torch stream. The cpu
back-end's threads follow torch.get_num_threads() at every call, unless MLAKIT_NUM_THREADS or
mlakit.set_num_threads() set them.

    import mlakit.torch as mt
    cache = mlakit.PagedKVCache(blocks, lookup_table, cache_lengths, scales)
    idx = mt.lightning_indexer(q, q_s, offsets, cache, top_k=2048, layer_idx=l)
"""
import itertools
import math
import weakref

import torch

from . import _threads, ops
from ._errors import InvalidArgument
from .ops import PackedWeights, PagedKVCache

_LIB = torch.library.Library("mlakit", "DEF")

# Cache arguments travel as their tensors: one cache object for all layers plus layer_idx is what
# keeps Inductor from copying a mutated view of one layer.
_CACHE = "Tensor {p}_blocks, Tensor {p}_lookup_table, Tensor {p}_cache_lengths"
_SCHEMAS = {
    "lightning_indexer":
        "(Tensor q, Tensor q_s, Tensor input_row_offsets, " + _CACHE.format(p="k") + ", Tensor k_scales, "
        "int quant_granularity, int top_k, str mask, int layer_idx, Tensor(a!) out) -> ()",
    "remap_indices_to_rows":
        "(Tensor indices, Tensor input_row_offsets, Tensor lookup_table, int page_size, int num_blocks, "
        "Tensor(a!) out) -> ()",
    "msa_block_indexer":
        "(Tensor q, Tensor input_row_offsets, Tensor prefix_lens, " + _CACHE.format(p="k") + ", int block_size, "
        "int topk, int init_blocks, int local_blocks, float scale, bool reduce_heads, int layer_idx, Tensor(a!) out) -> ()",
    "mla_prefill_fp8":
        "(Tensor(a!) q, Tensor input_row_offsets, Tensor freqs_cis, Tensor kv_norm_gamma, Tensor(b!) kv_blocks, "
        "Tensor kv_lookup_table, Tensor kv_cache_lengths, Tensor buffer_row_offsets, Tensor cache_offsets, "
        "Tensor kv_b_proj, Tensor kv_b_proj_scale, int buffer_length, int nope, int rope, int v, int bn, int bk, "
        "float scale, float epsilon, str numerics, Tensor? topk_indices, int layer_idx, Tensor(c!) out) -> ()",
    "sparse_mla_prefill":
        "(Tensor q, " + _CACHE.format(p="kv") + ", Tensor? kv_scales, int quant_granularity, Tensor? kv_tail, "
        "Tensor indices, "
        "Tensor? topk_lengths, Tensor? attn_sink, float scale, int v_depth, int layer_idx, Tensor(a!) out, "
        "Tensor(b!)? lse, Tensor(c!)? max_logits) -> ()",
    "fused_qkv_paged":
        "(Tensor hidden_state, Tensor input_row_offsets, Tensor(a!) kv_blocks, Tensor kv_lookup_table, "
        "Tensor kv_cache_lengths, Tensor? weight, Tensor? weight_scale, Tensor? qweight, Tensor? scales, "
        "Tensor? qzeros, Tensor? g_idx, int q_dim, int group_size, str zero_format, int layer_idx, "
        "Tensor(b!) out, int packed_weights=0) -> ()",
}

# A layer's pack (mlakit.pack_weights) reaches the op as an int key: an int passes the dispatcher,
# opcheck and torch.compile (a constant of the graph, as the layer's weights are), a Python object
# does not. The keys hold their packs weakly, as the packs' owner (the layer) decides how long they
# live; a key whose pack is gone is refused.
_PACKS = weakref.WeakValueDictionary()
_PACK_KEYS = weakref.WeakKeyDictionary()
_next_key = itertools.count(1)


def pack_key(packed_weights):
    """The int that names `packed_weights` (from mlakit.pack_weights) in torch.ops.mlakit.fused_qkv_paged
    calls; 0 for None. The same pack always gets the same key."""
    if packed_weights is None:
        return 0
    if not isinstance(packed_weights, PackedWeights):
        raise TypeError("fused_qkv_paged: packed_weights must come from mlakit.pack_weights")
    key = _PACK_KEYS.get(packed_weights)
    if key is None:
        key = next(_next_key)
        _PACK_KEYS[packed_weights] = key
        _PACKS[key] = packed_weights
    return key


def _pack_of(key):
    if key == 0:
        return None
    pack = _PACKS.get(key)
    if pack is None:
        raise InvalidArgument(f"fused_qkv_paged: packed_weights={key} (expected 0 or the key of a live pack from "
                              "mlakit.torch.pack_key; this one was never given out or its pack was dropped)",
                              "fused_qkv_paged", "packed_weights")
    return pack


def _lightning_indexer(q, q_s, input_row_offsets, k_blocks, k_lookup_table, k_cache_lengths, k_scales,
                       quant_granularity, top_k, mask, layer_idx, out):
    cache = PagedKVCache(k_blocks, k_lookup_table, k_cache_lengths, k_scales, quant_granularity)
    ops.lightning_indexer(q, q_s, input_row_offsets, cache, top_k=top_k, mask=mask, layer_idx=layer_idx, out=out)


def _remap_indices_to_rows(indices, input_row_offsets, lookup_table, page_size, num_blocks, out):
    ops.remap_indices_to_rows(indices, input_row_offsets, lookup_table, page_size=page_size, num_blocks=num_blocks,
                              out=out)


def _msa_block_indexer(q, input_row_offsets, prefix_lens, k_blocks, k_lookup_table, k_cache_lengths, block_size, topk,
                       init_blocks, local_blocks, scale, reduce_heads, layer_idx, out):
    cache = PagedKVCache(k_blocks, k_lookup_table, k_cache_lengths)
    ops.msa_block_indexer(q, input_row_offsets, prefix_lens, cache, block_size=block_size, topk=topk,
                          init_blocks=init_blocks, local_blocks=local_blocks, scale=scale, reduce_heads=reduce_heads,
                          layer_idx=layer_idx, out=out)


def _mla_prefill_fp8(q, input_row_offsets, freqs_cis, kv_norm_gamma, kv_blocks, kv_lookup_table, kv_cache_lengths,
                     buffer_row_offsets, cache_offsets, kv_b_proj, kv_b_proj_scale, buffer_length, nope, rope, v, bn,
                     bk, scale, epsilon, numerics, topk_indices, layer_idx, out):
    cache = PagedKVCache(kv_blocks, kv_lookup_table, kv_cache_lengths)
    ops.mla_prefill_fp8(q, input_row_offsets, freqs_cis, kv_norm_gamma, cache, buffer_row_offsets, cache_offsets,
                        kv_b_proj, kv_b_proj_scale, buffer_length=buffer_length, nope=nope, rope=rope, v=v, bn=bn,
                        bk=bk, scale=scale, epsilon=epsilon, numerics=numerics, topk_indices=topk_indices,
                        layer_idx=layer_idx, out=out)


def _sparse_mla_prefill(q, kv_blocks, kv_lookup_table, kv_cache_lengths, kv_scales, quant_granularity, kv_tail,
                        indices, topk_lengths, attn_sink, scale, v_depth, layer_idx, out, lse, max_logits):
    cache = PagedKVCache(kv_blocks, kv_lookup_table, kv_cache_lengths, kv_scales, quant_granularity or None,
                         tail=kv_tail)
    ops.sparse_mla_prefill(q, cache, indices, topk_lengths=topk_lengths, attn_sink=attn_sink, scale=scale,
                           v_depth=v_depth, layer_idx=layer_idx, out=out, lse=lse, max_logits=max_logits)


def _fused_qkv_paged(hidden_state, input_row_offsets, kv_blocks, kv_lookup_table, kv_cache_lengths, weight,
                     weight_scale, qweight, scales, qzeros, g_idx, q_dim, group_size, zero_format, layer_idx, out,
                     packed_weights=0):
    cache = PagedKVCache(kv_blocks, kv_lookup_table, kv_cache_lengths)
    ops.fused_qkv_paged(hidden_state, input_row_offsets, cache, q_dim=q_dim, weight=weight, weight_scale=weight_scale,
                        qweight=qweight, scales=scales, qzeros=qzeros, g_idx=g_idx, group_size=group_size,
                        zero_format=zero_format, layer_idx=layer_idx, out=out, packed_weights=_pack_of(packed_weights))


def _register(name, kernel):
    _LIB.define(name + _SCHEMAS[name])

    def run(*args):
        if args and args[0].device.type == "cpu":
            _threads.follow(torch.get_num_threads())
        kernel(*args)

    for key in ("CPU", "CUDA"):
        _LIB.impl(name, run, key)

    # The ops return nothing and write only tensors their caller allocated: the fake kernel has
    # nothing to compute.
    def fake(*args):
        return None

    torch.library.register_fake("mlakit::" + name, fake, lib=_LIB)


for _name, _kernel in (("lightning_indexer", _lightning_indexer), ("remap_indices_to_rows", _remap_indices_to_rows),
                       ("msa_block_indexer", _msa_block_indexer), ("mla_prefill_fp8", _mla_prefill_fp8),
                       ("sparse_mla_prefill", _sparse_mla_prefill), ("fused_qkv_paged", _fused_qkv_paged)):
    _register(_name, _kernel)

_OPS = torch.ops.mlakit


# Functional wrappers: the NumPy API's names and arguments, outputs allocated here.

def lightning_indexer(q, q_s, input_row_offsets, k_cache, *, top_k=2048, mask="causal", layer_idx=0):
    """Op 1: int32 [T, top_k] cache positions (see mlakit.lightning_indexer)."""
    out = torch.empty((q.shape[0], top_k), dtype=torch.int32, device=q.device)
    _OPS.lightning_indexer(q, q_s, input_row_offsets, k_cache.blocks, k_cache.lookup_table, k_cache.cache_lengths,
                           k_cache.scales, k_cache.quant_granularity, top_k, mask, layer_idx, out)
    return out


def remap_indices_to_rows(indices, input_row_offsets, lookup_table, *, page_size, num_blocks):
    """Op 1's positions as cache rows for op 4; -1 stays -1."""
    out = torch.empty(indices.shape, dtype=torch.int32, device=indices.device)
    _OPS.remap_indices_to_rows(indices, input_row_offsets, lookup_table, page_size, num_blocks, out)
    return out


def msa_block_indexer(q, input_row_offsets, prefix_lens, k_cache, *, block_size=128, topk=16, init_blocks=1,
                      local_blocks=2, scale=1.0, reduce_heads=False, layer_idx=0):
    """Op 2: int32 [Hi, T, topk] key blocks, [1, T, topk] with reduce_heads (see mlakit.msa_block_indexer)."""
    out = torch.empty((1 if reduce_heads else q.shape[1], q.shape[0], topk), dtype=torch.int32, device=q.device)
    _OPS.msa_block_indexer(q, input_row_offsets, prefix_lens, k_cache.blocks, k_cache.lookup_table,
                           k_cache.cache_lengths, block_size, topk, init_blocks, local_blocks, scale, reduce_heads,
                           layer_idx, out)
    return out


def mla_prefill_fp8(q, input_row_offsets, freqs_cis, kv_norm_gamma, kv_cache, buffer_row_offsets, cache_offsets,
                    kv_b_proj, kv_b_proj_scale, *, buffer_length, nope=128, rope=64, v=128, bn=128, bk=128, scale=1.0,
                    epsilon=1e-6, numerics="max", topk_indices=None, layer_idx=0):
    """Op 3: bf16 [T, H, v]; q's rope part and the new cache rows are updated IN PLACE."""
    out = torch.empty((q.shape[0], q.shape[1], v), dtype=torch.bfloat16, device=q.device)
    _OPS.mla_prefill_fp8(q, input_row_offsets, freqs_cis, kv_norm_gamma, kv_cache.blocks, kv_cache.lookup_table,
                         kv_cache.cache_lengths, buffer_row_offsets, cache_offsets, kv_b_proj, kv_b_proj_scale,
                         buffer_length, nope, rope, v, bn, bk, scale, epsilon, numerics, topk_indices, layer_idx, out)
    return out


def sparse_mla_prefill(q, kv_cache, indices, *, topk_lengths=None, attn_sink=None, scale=None, v_depth=512,
                       layer_idx=0, return_lse=False, return_max_logits=False):
    """Op 4: bf16 [T, Hq, v_depth]; with return_lse / return_max_logits, the tuple (out, lse?,
    max_logits?) of f32 [T, Hq] tensors asked for."""
    T, Hq, qk = q.shape
    out = torch.empty((T, Hq, v_depth), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((T, Hq), dtype=torch.float32, device=q.device) if return_lse else None
    max_logits = torch.empty((T, Hq), dtype=torch.float32, device=q.device) if return_max_logits else None
    scale = 1.0 / math.sqrt(qk) if scale is None else scale
    _OPS.sparse_mla_prefill(q, kv_cache.blocks, kv_cache.lookup_table, kv_cache.cache_lengths, kv_cache.scales,
                            kv_cache.quant_granularity, kv_cache.tail, indices, topk_lengths, attn_sink, scale, v_depth, layer_idx,
                            out, lse, max_logits)
    extra = tuple(x for x in (lse, max_logits) if x is not None)
    return (out, *extra) if extra else out


def fused_qkv_paged(hidden_state, input_row_offsets, kv_cache, *, q_dim, weight=None, weight_scale=None, qweight=None,
                    scales=None, qzeros=None, g_idx=None, group_size=128, zero_format="v2", layer_idx=0,
                    packed_weights=None):
    """Op 5: [T, q_dim] Q columns; the K/V columns are written INTO kv_cache (in place).
    packed_weights: this layer's mlakit.pack_weights(...) of the same weight tensors (optional; the
    same bits), passed to the op as pack_key(packed_weights)."""
    out = torch.empty((hidden_state.shape[0], q_dim), dtype=hidden_state.dtype, device=hidden_state.device)
    _OPS.fused_qkv_paged(hidden_state, input_row_offsets, kv_cache.blocks, kv_cache.lookup_table,
                         kv_cache.cache_lengths, weight, weight_scale, qweight, scales, qzeros, g_idx, q_dim,
                         group_size, zero_format, layer_idx, out, pack_key(packed_weights))
    return out


__all__ = ["PagedKVCache", "pack_key", "lightning_indexer", "remap_indices_to_rows", "msa_block_indexer", "mla_prefill_fp8",
           "sparse_mla_prefill", "fused_qkv_paged"]
