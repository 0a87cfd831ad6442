"""The five operators and remap_indices_to_rows over NumPy arrays or torch tensors (docs/ has each
operator's semantics; the argument names are the golden-format names)."""
import contextvars
import functools
import json
import math

import numpy as np

from . import _core
from ._errors import raise_refusal
from ._views import dtype_of, view, writable

try:
    import ml_dtypes

    _NP = {"bf16": np.dtype(ml_dtypes.bfloat16), "f8e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
           "e8m0": np.dtype(getattr(ml_dtypes, "float8_e8m0fnu", np.uint8))}
except ImportError:  # pragma: no cover
    _NP = {}
_NP.update({"f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
            "i32": np.dtype(np.int32), "u32": np.dtype(np.uint32), "u8": np.dtype(np.uint8)})


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _empty(like, shape, dtype):
    """An output array of mlakit dtype `dtype` from the array library of `like` (and its device)."""
    if _is_torch(like):
        import torch

        td = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "f16": torch.float16}[dtype]
        return torch.empty(shape, dtype=td, device=like.device)
    return np.empty(shape, dtype=_NP[dtype])


def _stream(x):
    if _is_torch(x) and x.device.type == "cuda":
        import torch

        return torch.cuda.current_stream(x.device).cuda_stream
    return 0


class _Call:
    """One operator call as the library takes it: golden-format params and named views (and op 5's
    packed weights, when named)."""
    __slots__ = ("op", "params", "views", "backend", "like", "result", "packed")

    def __init__(self, op, params, views, backend, like, result, packed=None):
        self.op, self.params, self.views, self.backend, self.like, self.result = op, params, views, backend, like, result
        self.packed = packed

    def invoke(self):
        raise_refusal(_core.call(self.op, json.dumps(self.params), self.views, self.backend or "automatic",
                                 _stream(self.like), self.packed))
        return self.result


# The function that makes argument views: a plan swaps in one that keeps the views of its step's
# arrays (mlakit.plan).
_VIEW = contextvars.ContextVar("mlakit_view", default=view)


def _operator(prepare):
    """An operator function from its preparation (which builds the _Call): calling it runs the call
    once; mlakit.plan(op, ...) plans it for many runs."""
    @functools.wraps(prepare)
    def operator(*args, **kwargs):
        return prepare(*args, **kwargs).invoke()

    operator.prepare = prepare
    return operator


def _out(name, given, like, shape, dtype):
    if given is None:
        return _empty(like, shape, dtype)
    writable(name, given)
    return given


class PagedKVCache:
    """A paged cache of every layer (the engine's own arrays, read and written in place).

    blocks         [num_blocks, kv_dim, num_layers, page_size, num_kv_heads, head_size]: fp8 (or its
                   uint8 bits), bf16 (or uint16 bits) or f32; strided views are accepted
    lookup_table   u32 (or int32) [batch, max_pages]: page p of sequence b is block lookup_table[b, p]
    cache_lengths  u32 (or int32) [batch]: tokens already cached per sequence
    scales         f32 [num_blocks, kv_dim, num_layers, page_size, num_kv_heads, head_size / quant_granularity]
                   for an fp8 cache with scales, else None; sparse_mla_prefill also reads e8m0 scale
                   bytes (ml_dtypes.float8_e8m0fnu, torch.float8_e8m0fnu, or uint8 holding them)
    tail           split rows (FlashMLA's V32 / MODEL1 caches, sparse_mla_prefill only): bf16
                   [num_blocks, kv_dim, num_layers, page_size, num_kv_heads, tail width] after the
                   blocks' fp8 columns; a row is then blocks.shape[5] + tail width columns
    """

    def __init__(self, blocks, lookup_table, cache_lengths, scales=None, quant_granularity=None, tail=None):
        self.blocks = blocks
        self.lookup_table = lookup_table
        self.cache_lengths = cache_lengths
        self.scales = scales
        self.tail = tail
        if quant_granularity is None and scales is not None:
            # Inferred only where the scales split the row evenly (V32: 512 / 4, MODEL1: 448 / 7);
            # otherwise several granularities fit the shape, and the caller must say which.
            width, per_row = int(blocks.shape[5]), max(1, int(scales.shape[5]))
            if width % per_row:
                raise ValueError(f"PagedKVCache: quant_granularity is needed: {per_row} scales per row of "
                                 f"{width} columns do not split it evenly")
            quant_granularity = width // per_row
        self.quant_granularity = quant_granularity or 0

    @property
    def page_size(self):
        return int(self.blocks.shape[3])

    @property
    def num_blocks(self):
        return int(self.blocks.shape[0])

    @property
    def num_kv_heads(self):
        return int(self.blocks.shape[4])

    def _blocks_dtype(self):
        dt = dtype_of(self.blocks)
        return {"u8": "f8e4m3", "u16": "bf16"}.get(dt, dt)

    def views(self, prefix, blocks_as=None):
        # Kept while the same arrays are attached: an engine hands one cache to every layer's call.
        # (A NumPy array's data pointer, dtype, shape and strides do not change; the arrays are held here.)
        key = (prefix, blocks_as, id(self.blocks), id(self.lookup_table), id(self.cache_lengths), id(self.scales),
               id(self.tail))
        cached = self.__dict__.get("_views")
        if cached is not None and cached[0] == key:
            return cached[1]
        view = _VIEW.get()
        v = [view(blocks_as or prefix + ".blocks", self.blocks, self._blocks_dtype()),
             view(prefix + ".lookup_table", self.lookup_table, "u32"),
             view(prefix + ".cache_lengths", self.cache_lengths, "u32")]
        if self.scales is not None:  # f32, or e8m0 bytes (raw uint8 scales can only be e8m0)
            v.append(view(prefix + ".scales", self.scales, "e8m0" if dtype_of(self.scales) in ("e8m0", "u8") else "f32"))
        if self.tail is not None:
            v.append(view(prefix + ".tail", self.tail, "bf16"))
        if not _is_torch(self.blocks):  # a torch tensor can be resized in place: read it every call
            self._views = (key, v)
        return v


@_operator
def lightning_indexer(q, q_s, input_row_offsets, k_cache, *, top_k=2048, mask="causal", layer_idx=0, out=None,
                      backend=None):
    """Op 1 (DeepSeek-V3.2): the top_k cache positions of each query row by its FP8 multi-head
    score. q fp8 [T, H, D], q_s f32 [T, H], input_row_offsets u32 [B+1], k_cache an fp8 cache with
    scales. Returns out: int32 [T, top_k] (-1 where a row has fewer visible keys)."""
    view = _VIEW.get()
    out = _out("out", out, q, (q.shape[0], top_k), "i32")
    params = {"num_heads": int(q.shape[1]), "head_dim": int(q.shape[2]), "top_k": int(top_k), "mask": mask,
              "quant_granularity": int(k_cache.quant_granularity), "layer_idx": int(layer_idx),
              "page_size": k_cache.page_size}
    views = [view("q", q, "f8e4m3"), view("q_s", q_s, "f32"), view("input_row_offsets", input_row_offsets, "u32"),
             *k_cache.views("k_cache"), view("out.output_indices", out, "i32")]
    return _Call("lightning_indexer", params, views, backend, q, out)


def remap_indices_to_rows(indices, input_row_offsets, lookup_table, *, page_size, num_blocks, out=None,
                          backend=None):
    """Op 1's positions [T, top_k] as cache rows (block · page_size + offset) for op 4; -1 stays -1."""
    out = _out("out", out, indices, tuple(indices.shape), "i32")
    views = [view("indices", indices, "i32"), view("input_row_offsets", input_row_offsets, "u32"),
             view("lookup_table", lookup_table, "u32"), view("rows", out, "i32")]
    raise_refusal(_core.remap(views, int(page_size), int(num_blocks), backend or "automatic", _stream(indices)))
    return out


@_operator
def msa_block_indexer(q, input_row_offsets, prefix_lens, k_cache, *, block_size=128, topk=16, init_blocks=1,
                      local_blocks=2, scale=1.0, reduce_heads=False, layer_idx=0, out=None, backend=None):
    """Op 2 (MiniMax MSA): the topk key blocks of each index head and query row, init and local
    blocks forced. q bf16 [T, Hi, D]; the index-K cache may hold Hk heads (Hk dividing Hi: head h
    reads K head h // (Hi // Hk)). Returns out: int32 [Hi, T, topk], or [1, T, topk] with
    reduce_heads (one selection per row over the heads' maximum, MiniMax-M3)."""
    view = _VIEW.get()
    out = _out("out", out, q, (1 if reduce_heads else q.shape[1], q.shape[0], topk), "i32")
    params = {"num_index_heads": int(q.shape[1]), "idx_head_dim": int(q.shape[2]), "block_size": int(block_size),
              "topk": int(topk), "init_blocks": int(init_blocks), "local_blocks": int(local_blocks),
              "scale": float(scale), "layer_idx": int(layer_idx), "page_size": k_cache.page_size,
              "num_k_heads": k_cache.num_kv_heads, "reduce_heads": bool(reduce_heads)}
    views = [view("q", q, "bf16"), view("input_row_offsets", input_row_offsets, "u32"),
             view("prefix_lens", prefix_lens, "u32"), *k_cache.views("k_cache"), view("out.out_idxs", out, "i32")]
    return _Call("msa_block_indexer", params, views, backend, q, out)


@_operator
def mla_prefill_fp8(q, input_row_offsets, freqs_cis, kv_norm_gamma, kv_cache, buffer_row_offsets, cache_offsets,
                    kv_b_proj, kv_b_proj_scale, *, buffer_length, nope=128, rope=64, v=128, bn=128, bk=128,
                    scale=1.0, epsilon=1e-6, numerics="max", topk_indices=None, layer_idx=0, out=None, backend=None):
    """Op 3 (MLA prefill, FP8): rotates q's rope part and normalizes the new cache rows IN PLACE
    (q and kv_cache.blocks are written), then causal MLA over the gathered, FP8-quantized latent
    window through the block-scaled kv_b_proj. q bf16 [T, H, nope + rope]. Returns out: bf16 [T, H, v].
    numerics: "max" (the spec's), "deepseek" or "deepseek_ue8m0" (DeepSeek-V3.2's released code:
    one-rounding RMSNorm with a bf16 or f32 gamma, act_quant, bf16 softmax weights).
    topk_indices: optional int32 [T, top_k] key positions each query may attend (op 1's output)."""
    view = _VIEW.get()
    H = int(q.shape[1])
    writable("q", q)
    writable("kv_cache.blocks", kv_cache.blocks)
    out = _out("out", out, q, (q.shape[0], H, v), "bf16")
    params = {"num_heads": H, "nope": int(nope), "rope": int(rope), "v": int(v), "latent": int(kv_norm_gamma.shape[0]),
              "bn": int(bn), "bk": int(bk), "scale": float(scale), "epsilon": float(epsilon),
              "buffer_length": int(buffer_length), "layer_idx": int(layer_idx), "page_size": kv_cache.page_size,
              "numerics": str(numerics)}
    views = [view("q", q, "bf16"), view("out.q", q, "bf16"), view("input_row_offsets", input_row_offsets, "u32"),
             view("freqs_cis", freqs_cis), view("kv_norm_gamma", kv_norm_gamma, "f32" if dtype_of(kv_norm_gamma) == "f32" else "bf16"),
             *kv_cache.views("kv_cache"), view("out.kv_cache.blocks", kv_cache.blocks, kv_cache._blocks_dtype()),
             view("buffer_row_offsets", buffer_row_offsets, "u32"), view("cache_offsets", cache_offsets, "u32"),
             view("kv_b_proj", kv_b_proj, "f8e4m3"), view("kv_b_proj_scale", kv_b_proj_scale, "f32"),
             view("out.output", out, "bf16")]
    if topk_indices is not None:
        views.append(view("topk_indices", topk_indices, "i32"))
    return _Call("mla_prefill_fp8", params, views, backend, q, out)


@_operator
def sparse_mla_prefill(q, kv_cache, indices, *, topk_lengths=None, attn_sink=None, scale=None, v_depth=512,
                       layer_idx=0, out=None, lse=None, return_lse=False, max_logits=None, return_max_logits=False,
                       backend=None):
    """Op 4 (DeepSeek-V3.2 sparse MLA): attention of each query row over the cache rows its indices
    name (invalid ones skipped). q bf16 [T, Hq, qk_depth], indices int32 [T, indices_stride] (rows,
    e.g. from remap_indices_to_rows). scale defaults to 1/sqrt(qk_depth). Returns out: bf16
    [T, Hq, v_depth]; with lse f32 [T, Hq] (when return_lse or lse is given) and max_logits f32
    [T, Hq] (the scaled maximum score, when return_max_logits or max_logits is given), the tuple
    (out, lse, max_logits) of those present."""
    view = _VIEW.get()
    T, Hq, qk = (int(d) for d in q.shape)
    out = _out("out", out, q, (T, Hq, v_depth), "bf16")
    if lse is None and return_lse:
        lse = _empty(q, (T, Hq), "f32")
    if max_logits is None and return_max_logits:
        max_logits = _empty(q, (T, Hq), "f32")
    params = {"num_q_heads": Hq, "qk_depth": qk, "v_depth": int(v_depth), "indices_stride": int(indices.shape[1]),
              "scale": float(1.0 / math.sqrt(qk) if scale is None else scale), "layer_idx": int(layer_idx),
              "page_size": kv_cache.page_size}
    if kv_cache.scales is not None:
        params["quant_granularity"] = int(kv_cache.quant_granularity)
    views = [view("q", q, "bf16"), *kv_cache.views("kv_cache"), view("indices", indices),  # i32 or u32
             view("out.output", out, "bf16")]
    if topk_lengths is not None:
        views.append(view("topk_lengths", topk_lengths, "u32"))
    if attn_sink is not None:
        views.append(view("attn_sink", attn_sink, "f32"))
    if lse is not None:
        writable("lse", lse)
        views.append(view("out.lse", lse, "f32"))
    if max_logits is not None:
        writable("max_logits", max_logits)
        views.append(view("out.max_logits", max_logits, "f32"))
    extra = tuple(x for x in (lse, max_logits) if x is not None)
    return _Call("sparse_mla_prefill", params, views, backend, q, (out, *extra) if extra else out)


def _weights(op, view, x_dtype, weight, weight_scale, qweight, scales, qzeros, g_idx, group_size, zero_format):
    """Op 5's weight format, its params (golden-format keys) and the views of its weight tensors,
    for a call and for pack_weights alike."""
    if qweight is not None:
        fmt = "gptq"
    elif weight is not None and weight_scale is not None:
        fmt = "fp8_block"
    else:
        fmt = "dense"
    params = {"weight_format": fmt}
    if fmt == "fp8_block":
        views = [view("weight", weight, "f8e4m3"), view("weight_scale", weight_scale, "f32")]
    elif fmt == "dense":
        if weight is None:
            raise TypeError(f"{op}: give weight (dense or fp8 with weight_scale) or qweight (GPTQ)")
        views = [view("weight", weight, x_dtype)]
    else:
        params.update(group_size=int(group_size), has_zp=qzeros is not None)
        if zero_format != "v2":
            params["zero_format"] = zero_format
        views = [view("qweight", qweight, "i32"), view("scales", scales)]
        if qzeros is not None:
            views.append(view("qzeros", qzeros, "i32"))
        if g_idx is not None:
            views.append(view("g_idx", g_idx, "i32"))
    return fmt, params, views


class PackedWeights:
    """A layer's op 5 weights laid out once for this CPU's prefill GEMM, and act-order GPTQ's codes
    sorted by group (pack_weights): name it in every fused_qkv_paged call of that layer
    (packed_weights=). It keeps the weight arrays it was made from, which the calls still pass and
    which must not change while it is used. nbytes: memory it holds (0 where nothing needs laying
    out: this CPU's prefills read the weights in place, or prefill_layout=False without a g_idx);
    layout: what."""
    __slots__ = ("_handle", "_weights", "nbytes", "layout", "__weakref__")

    def __init__(self, handle, weights):
        self._handle, self._weights = handle, weights
        self.nbytes, self.layout = handle.bytes(), handle.layout()

    def __repr__(self):
        return f"PackedWeights({self.layout}, {self.nbytes} bytes)"


def pack_weights(*, weight=None, weight_scale=None, qweight=None, scales=None, qzeros=None, g_idx=None,
                 group_size=128, zero_format="v2", activations="bf16", prefill_layout=True):
    """Packs one layer's fused_qkv_paged weights (the same arguments as the call's) for activations
    of dtype `activations` ("bf16" or "f32"): prefills that name the pack stop laying out the
    weights in every call, and GPTQ calls of any size read the pack's copy of the codes (rows
    padded apart; in group order with an act-order g_idx, which they then stop regrouping), with
    the same bits (docs/fused_qkv_paged.md, "Packed weights"). prefill_layout=False keeps only
    GPTQ's codes (about N·K/2 bytes, and on avx2 the decode rows' tables and their own layout of
    the codes, 3·N·K/4 more; nothing for other weights), not the prefill GEMM's layout (4 or 2
    bytes a weight)."""
    if activations not in ("bf16", "f32"):
        raise ValueError(f"pack_weights: activations={activations!r} (expected 'bf16' or 'f32')")
    if not isinstance(prefill_layout, bool):
        raise TypeError(f"pack_weights: prefill_layout={prefill_layout!r} (expected True or False)")
    weights = (weight, weight_scale, qweight, scales, qzeros, g_idx)
    fmt, params, views = _weights("pack_weights", view, activations, *weights, group_size, zero_format)
    params["prefill_layout"] = prefill_layout
    K = int(qweight.shape[0]) * 8 if fmt == "gptq" else int(weight.shape[1])
    views.append(("hidden_state", (0, activations, [0, K], [K, 1], False)))
    handle = _core.PackedWeightsHandle()
    raise_refusal(handle.pack(json.dumps(params), views))
    return PackedWeights(handle, weights)


@_operator
def fused_qkv_paged(hidden_state, input_row_offsets, kv_cache, *, q_dim, weight=None, weight_scale=None,
                    qweight=None, scales=None, qzeros=None, g_idx=None, group_size=128, zero_format="v2",
                    layer_idx=0, out=None, backend=None, packed_weights=None):
    """Op 5: Y = X·Wᵀ with Q columns returned and the K/V columns written INTO kv_cache (in place)
    at each token's position. The weight format follows the arguments: weight bf16/f32 [N, K]
    (dense), weight fp8 [N, K] with weight_scale f32 (128x128 block-scaled), or GPTQ int4
    (qweight, scales, optional qzeros and g_idx; zero_format "v1" for checkpoints that store each
    zero point minus one, as AutoGPTQ's do). packed_weights: this layer's pack_weights(...) of the
    same weights (optional; same bits). Returns out [T, q_dim] in hidden_state's dtype."""
    view = _VIEW.get()
    if packed_weights is not None and not isinstance(packed_weights, PackedWeights):
        raise TypeError("fused_qkv_paged: packed_weights must come from mlakit.pack_weights")
    writable("kv_cache.blocks", kv_cache.blocks)
    x_dtype = dtype_of(hidden_state)
    x_dtype = {"u16": "bf16"}.get(x_dtype, x_dtype)
    out = _out("out", out, hidden_state, (hidden_state.shape[0], q_dim), x_dtype)
    _, params, weight_views = _weights("fused_qkv_paged", view, x_dtype, weight, weight_scale, qweight, scales, qzeros,
                                       g_idx, group_size, zero_format)
    params.update(q_dim=int(q_dim), layer_idx=int(layer_idx), page_size=kv_cache.page_size,
                  num_kv_heads=int(kv_cache.blocks.shape[4]), head_dim=int(kv_cache.blocks.shape[5]))
    views = [view("hidden_state", hidden_state, x_dtype), view("input_row_offsets", input_row_offsets, "u32"),
             *kv_cache.views("kv_cache"), view("out.kv_cache.blocks", kv_cache.blocks, kv_cache._blocks_dtype()),
             view("out.output", out, x_dtype), *weight_views]
    return _Call("fused_qkv_paged", params, views, backend, hidden_state, out,
                 None if packed_weights is None else packed_weights._handle)
