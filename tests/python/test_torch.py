"""mlakit.torch: the torch ops over every golden file (bit-identical to the NumPy API on the same
back-end, outputs poisoned first), torch.library.opcheck of every op, torch.compile(fullgraph=True)
of a DeepSeek-V3.2-style step that writes the cache in place with no copy of it, refusals through
the dispatcher, op 5 naming a layer's pack by its key, threads following torch's, and CUDA tensors
where a GPU is present.

Skipped, with the reason, where torch is not installed (scripts/test.sh installs it in a venv of its
own when the disk has room)."""
import os

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
if not hasattr(torch.library, "register_fake") or not hasattr(torch, "float8_e4m3fn"):
    pytest.skip(f"torch {torch.__version__} is older than 2.4 (no register_fake / float8)", allow_module_level=True)

import mlakit  # noqa: E402
import mlakit.golden as golden  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from conftest import golden_files  # noqa: E402
from test_api import call_api  # noqa: E402

POISON = -0x5A5A5A5B  # 0xA5A5A5A5 as int32 bytes


def to_torch(a, device="cpu"):
    """A torch tensor holding a copy of NumPy array `a`, bf16 / fp8 as torch's own dtypes, u32 as
    int32 (as engines hold offsets and page tables)."""
    a = np.ascontiguousarray(a).copy()
    if a.dtype == ml_dtypes.bfloat16:
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    elif a.dtype == ml_dtypes.float8_e4m3fn:
        t = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
    elif a.dtype == np.uint32:
        t = torch.from_numpy(a.view(np.int32))
    elif a.dtype.itemsize == 1 and a.dtype != np.uint8:  # e8m0 scale bytes: their bits
        t = torch.from_numpy(a.view(np.uint8))
    else:
        t = torch.from_numpy(a)
    return t.to(device)


def bits(x):
    """The bytes of a NumPy array or torch tensor, for bit-exact comparison."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    return x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def poison(t):
    t.view(torch.uint8).fill_(0xA5) if t.numel() else None
    return t


def torch_cache(t, prefix, device="cpu", granularity=None):
    scales, tail = t.get(prefix + ".scales"), t.get(prefix + ".tail")
    return mlakit.PagedKVCache(to_torch(t[prefix + ".blocks"], device), to_torch(t[prefix + ".lookup_table"], device),
                               to_torch(t[prefix + ".cache_lengths"], device),
                               None if scales is None else to_torch(scales, device), granularity,
                               tail=None if tail is None else to_torch(tail, device))


def op_args(g, device="cpu"):
    """(op overload, positional arguments, {output name: tensor}) of golden file g's call as a
    torch.ops.mlakit out-variant, outputs poisoned."""
    t, p = {k: v for k, v in g.inputs.items()}, g.params
    tt = lambda name: to_torch(t[name], device)  # noqa: E731
    opt = lambda name: None if name not in t else tt(name)  # noqa: E731
    empty = lambda shape, dtype: poison(torch.empty(shape, dtype=dtype, device=device))  # noqa: E731
    ops = torch.ops.mlakit
    if g.op == "lightning_indexer":
        c = torch_cache(t, "k_cache", device)
        out = empty((t["q"].shape[0], p["top_k"]), torch.int32)
        args = (tt("q"), tt("q_s"), tt("input_row_offsets"), c.blocks, c.lookup_table, c.cache_lengths, c.scales,
                c.quant_granularity, p["top_k"], p["mask"], p["layer_idx"], out)
        return ops.lightning_indexer.default, args, {"out.output_indices": out}
    if g.op == "msa_block_indexer":
        c = torch_cache(t, "k_cache", device)
        q = tt("q")
        reduce = p.get("reduce_heads", False)
        out = empty((1 if reduce else q.shape[1], q.shape[0], p["topk"]), torch.int32)
        args = (q, tt("input_row_offsets"), tt("prefix_lens"), c.blocks, c.lookup_table, c.cache_lengths,
                p["block_size"], p["topk"], p["init_blocks"], p["local_blocks"], p["scale"], reduce, p["layer_idx"],
                out)
        return ops.msa_block_indexer.default, args, {"out.out_idxs": out}
    if g.op == "mla_prefill_fp8":
        c = torch_cache(t, "kv_cache", device)
        q = tt("q")
        out = empty((q.shape[0], q.shape[1], p["v"]), torch.bfloat16)
        args = (q, tt("input_row_offsets"), tt("freqs_cis"), tt("kv_norm_gamma"), c.blocks, c.lookup_table,
                c.cache_lengths, tt("buffer_row_offsets"), tt("cache_offsets"), tt("kv_b_proj"), tt("kv_b_proj_scale"),
                p["buffer_length"], p["nope"], p["rope"], p["v"], p["bn"], p["bk"], p["scale"], p["epsilon"],
                p.get("numerics", "max"), tt("topk_indices") if "topk_indices" in t else None, p["layer_idx"], out)
        return ops.mla_prefill_fp8.default, args, {"out.output": out, "out.q": q, "out.kv_cache.blocks": c.blocks}
    if g.op == "sparse_mla_prefill":
        c = torch_cache(t, "kv_cache", device, p.get("quant_granularity"))
        q = tt("q")
        out = empty((q.shape[0], q.shape[1], p["v_depth"]), torch.bfloat16)
        lse = empty((q.shape[0], q.shape[1]), torch.float32) if "out.lse" in g.outputs else None
        ml = empty((q.shape[0], q.shape[1]), torch.float32) if "out.max_logits" in g.outputs else None
        args = (q, c.blocks, c.lookup_table, c.cache_lengths, c.scales, c.quant_granularity, c.tail, tt("indices"),
                opt("topk_lengths"), opt("attn_sink"), p["scale"], p["v_depth"], p["layer_idx"], out, lse, ml)
        return ops.sparse_mla_prefill.default, args, {"out.output": out, **({"out.lse": lse} if lse is not None else {}),
                                                      **({"out.max_logits": ml} if ml is not None else {})}
    if g.op == "fused_qkv_paged":
        c = torch_cache(t, "kv_cache", device)
        x = tt("hidden_state")
        out = empty((x.shape[0], p["q_dim"]), x.dtype)
        args = (x, tt("input_row_offsets"), c.blocks, c.lookup_table, c.cache_lengths, opt("weight"),
                opt("weight_scale"), opt("qweight"), opt("scales"), opt("qzeros"), opt("g_idx"), p["q_dim"],
                p.get("group_size", 128), p.get("zero_format", "v2"), p["layer_idx"], out)
        return ops.fused_qkv_paged.default, args, {"out.output": out, "out.kv_cache.blocks": c.blocks}
    raise AssertionError(g.op)


def first_file(op):
    return next(p for p in golden_files() if p.name.startswith(op + "."))


OPS = ["lightning_indexer", "msa_block_indexer", "mla_prefill_fp8", "sparse_mla_prefill", "fused_qkv_paged"]


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.name[: -len(".safetensors")])
def test_golden_file_through_the_torch_op(path):
    g = golden.load(path)
    expected = call_api(g, None)  # the NumPy API on the automatic back-end (cpu here)
    op, args, outs = op_args(g)
    assert op(*args) is None
    assert set(outs) == set(expected)
    for name, tensor in outs.items():
        assert np.array_equal(bits(tensor), bits(expected[name])), f"{name}: the torch op differs from the NumPy API"


@pytest.mark.parametrize("op_name", OPS)
def test_opcheck(op_name):
    g = golden.load(first_file(op_name))
    op, args, _ = op_args(g)
    # opcheck compares tensors with arithmetic torch lacks for float8: fp8 goes as its uint8 bits,
    # as engines store fp8 caches.
    args = tuple(a.view(torch.uint8) if isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn else a
                 for a in args)
    torch.library.opcheck(op, args)


def test_opcheck_remap():
    g = golden.load(first_file("lightning_indexer"))
    t = g.inputs
    idx = to_torch(g.outputs["out.output_indices"])
    out = poison(torch.empty_like(idx))
    c = torch_cache(t, "k_cache")
    args = (idx, to_torch(t["input_row_offsets"]), c.lookup_table, int(c.blocks.shape[3]), int(c.blocks.shape[0]), out)
    torch.library.opcheck(torch.ops.mlakit.remap_indices_to_rows.default, args)


def test_functional_wrappers_match_the_out_variants():
    # The file with every optional output of op 4 (lse and max_logits).
    g = golden.load(next(p for p in golden_files() if p.name.startswith("sparse_mla_prefill.max_logits.")))
    t, p = g.inputs, g.params
    op, args, outs = op_args(g)
    op(*args)
    assert {"out.lse", "out.max_logits"} <= set(outs)
    got, lse, max_logits = mt.sparse_mla_prefill(
        to_torch(t["q"]), torch_cache(t, "kv_cache"), to_torch(t["indices"]),
        topk_lengths=None if "topk_lengths" not in t else to_torch(t["topk_lengths"]),
        attn_sink=None if "attn_sink" not in t else to_torch(t["attn_sink"]), scale=p["scale"],
        v_depth=p["v_depth"], layer_idx=p["layer_idx"], return_lse=True, return_max_logits=True)
    assert np.array_equal(bits(got), bits(outs["out.output"]))
    assert np.array_equal(bits(lse), bits(outs["out.lse"]))
    assert np.array_equal(bits(max_logits), bits(outs["out.max_logits"]))


def test_a_refusal_propagates_through_the_dispatcher_and_writes_nothing():
    g = golden.load(first_file("lightning_indexer"))
    op, args, outs = op_args(g)
    args = list(args)
    offsets = args[2].clone()
    offsets[-1] += 1  # past q's rows
    args[2] = offsets
    before = bits(outs["out.output_indices"]).copy()
    with pytest.raises(mlakit.InvalidArgument) as e:
        op(*args)
    assert e.value.op == "lightning_indexer" and e.value.field.startswith("input_row_offsets")
    assert np.array_equal(bits(outs["out.output_indices"]), before)


def test_fused_qkv_paged_takes_the_layers_pack_by_key():
    """The op named with pack_key(pack) of the layer's own weight tensors gives the bits of the call
    without it (every golden file of op 5: dense, fp8, GPTQ, act-order), the functional wrapper too;
    a key whose pack was dropped, one never given out, and one of a pack of other tensors are refused
    with the field named and write nothing."""
    import gc
    files = [p for p in golden_files() if p.name.startswith("fused_qkv_paged.")]
    assert any("gidx" in p.name for p in files)
    for path in files:
        g = golden.load(path)
        op, args, outs = op_args(g)
        op(*args)
        plain = {name: bits(t).copy() for name, t in outs.items()}
        op, args, outs = op_args(g)
        names = ("weight", "weight_scale", "qweight", "scales", "qzeros", "g_idx")
        weights = {n: a for n, a in zip(names, args[5:11]) if a is not None}
        pack = mlakit.pack_weights(**weights, group_size=args[12], zero_format=args[13],
                                   activations="f32" if args[0].dtype == torch.float32 else "bf16")
        key = mt.pack_key(pack)
        assert key > 0 and mt.pack_key(pack) == key and mt.pack_key(None) == 0
        assert op(*args, key) is None
        for name, t in outs.items():
            assert np.array_equal(bits(t), plain[name]), f"{path.name}: {name} with the pack"
        x, offsets, blocks, lut, lens = args[:5]
        cache = mlakit.PagedKVCache(blocks.clone(), lut, lens)
        got = mt.fused_qkv_paged(x, offsets, cache, q_dim=args[11], **weights, group_size=args[12],
                                 zero_format=args[13], layer_idx=args[14], packed_weights=pack)
        assert np.array_equal(bits(got), plain["out.output"]), f"{path.name}: the functional wrapper with the pack"

        # The key reaches the library: a pack of copies of the weights is another layer's.
        other = mlakit.pack_weights(**{n: a.clone() for n, a in weights.items()}, group_size=args[12],
                                    zero_format=args[13], activations="f32" if args[0].dtype == torch.float32 else "bf16")
        del pack
        gc.collect()
        for dead in (key, 10**9, mt.pack_key(other)):
            op, args, outs = op_args(g)
            before = {name: bits(t).copy() for name, t in outs.items()}
            with pytest.raises(mlakit.InvalidArgument) as e:
                op(*args, dead)
            assert e.value.op == "fused_qkv_paged" and e.value.field == "packed_weights", str(e.value)
            for name, t in outs.items():
                assert np.array_equal(bits(t), before[name]), f"{path.name}: {name} written by a refused call"
    with pytest.raises(TypeError, match="pack_weights"):
        mt.pack_key("not a pack")


@pytest.mark.skipif("MLAKIT_NUM_THREADS" in os.environ, reason="MLAKIT_NUM_THREADS fixes the thread count")
def test_threads_follow_torch_unless_chosen():
    g = golden.load(first_file("lightning_indexer"))
    saved = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            op, args, _ = op_args(g)
            op(*args)
            assert mlakit.get_num_threads() == n
        mlakit.set_num_threads(1)
        torch.set_num_threads(2)
        op(*args)
        assert mlakit.get_num_threads() == 1, "a thread count set through mlakit was overridden"
    finally:
        mlakit._threads._chosen = False
        torch.set_num_threads(saved)


# A DeepSeek-V3.2-style attention step, small: op 5 writes the new tokens' latent rows into the
# MLA cache and returns Q, op 1 picks the top-k positions from the FP8 indexer cache, the remap
# turns them into cache rows, op 4 attends over those rows.
PAGE, BLOCKS, LAYERS, HQ, LATENT, V, HIDDEN, HI, DI, TOPK = 16, 8, 2, 4, 576, 512, 64, 4, 128, 16


def deepseek_step_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    cache_lengths = torch.tensor([5, 20], dtype=torch.int32)
    new = [3, 4]
    offsets = torch.tensor([0, 3, 7], dtype=torch.int32)
    T = sum(new)
    lut = torch.randperm(BLOCKS, generator=g)[:8].to(torch.int32).reshape(2, 4)
    mla = torch.randn((BLOCKS, 1, LAYERS, PAGE, 1, LATENT), generator=g).to(torch.bfloat16)
    codes = torch.randint(0, 256, (BLOCKS, 1, LAYERS, PAGE, 1, DI), dtype=torch.uint8, generator=g)
    codes[codes.eq(0x7F) | codes.eq(0xFF)] = 0x3C  # keep the indexer's scores finite
    codes.view(-1)[:256] = torch.arange(256, dtype=torch.int32).to(torch.uint8)  # every code present
    codes[codes.eq(0x7F) | codes.eq(0xFF)] = 0x3C
    # Both caches take the lengths before the step (the new tokens' index keys are written first).
    idx_cache = mlakit.PagedKVCache(codes.view(torch.float8_e4m3fn), lut, cache_lengths,
                                    torch.rand((BLOCKS, 1, LAYERS, PAGE, 1, 1), generator=g))
    mla_cache = mlakit.PagedKVCache(mla, lut, cache_lengths)
    x = torch.randn((T, HIDDEN), generator=g).to(torch.bfloat16)
    w = (torch.randn((HQ * LATENT + LATENT, HIDDEN), generator=g) / 8).to(torch.bfloat16)
    iq = torch.randn((T, HI, DI), generator=g).to(torch.float8_e4m3fn)
    iqs = torch.rand((T, HI), generator=g)
    return x, w, offsets, mla_cache, iq, iqs, idx_cache


def deepseek_step(x, w, offsets, mla_cache, iq, iqs, idx_cache):
    q = mt.fused_qkv_paged(x, offsets, mla_cache, q_dim=HQ * LATENT, weight=w, layer_idx=1)
    positions = mt.lightning_indexer(iq, iqs, offsets, idx_cache, top_k=TOPK, layer_idx=1)
    # The indexer's positions count the sequence's tokens; the remap makes them rows of the cache.
    rows = mt.remap_indices_to_rows(positions, offsets, mla_cache.lookup_table, page_size=PAGE, num_blocks=BLOCKS)
    return mt.sparse_mla_prefill(q.view(x.shape[0], HQ, LATENT), mla_cache, rows, v_depth=V, layer_idx=1)


def test_compiled_deepseek_step_writes_the_cache_in_place_without_a_copy():
    from torch._inductor.utils import run_and_get_code

    eager_in = deepseek_step_inputs(7)
    eager = deepseek_step(*eager_in)
    compiled_in = deepseek_step_inputs(7)
    blocks = compiled_in[3].blocks
    ptr, before = blocks.data_ptr(), blocks.clone()
    torch._dynamo.reset()
    step = torch.compile(deepseek_step, fullgraph=True)
    out, code = run_and_get_code(step, *compiled_in)
    assert np.array_equal(bits(out), bits(eager)), "compiled output differs from eager"
    assert blocks.data_ptr() == ptr
    assert not torch.equal(blocks.view(torch.int16), before.view(torch.int16)), "the cache was not written"
    assert np.array_equal(bits(blocks), bits(eager_in[3].blocks)), "compiled cache differs from eager"
    text = "\n".join(code)
    assert "mlakit.fused_qkv_paged" in text
    for copy in ("copy_(", "clone(", ".clone"):
        assert copy not in text, f"the compiled step copies a tensor ({copy}):\n{text}"


cuda = pytest.mark.skipif(not torch.cuda.is_available() or "cuda" not in mlakit.backends(),
                          reason="no CUDA GPU here, or mlakit built without the cuda back-end")


@cuda
@pytest.mark.parametrize("op_name", OPS)
def test_cuda_tensors_on_the_current_stream(op_name):
    path = first_file(op_name)
    g = golden.load(path)
    expected = golden.run(path, backend="cuda")
    op, args, outs = op_args(g, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were written on the default stream
    with torch.cuda.stream(stream):
        op(*args)
    stream.synchronize()
    for name, tensor in outs.items():
        assert np.array_equal(bits(tensor), bits(expected[name])), f"{name}: cuda torch op differs from the C++ run"


def test_flashmla_cache_in_a_torch_buffer():
    """op 4 through torch.ops on a FlashMLA V32 / MODEL1 buffer held in a torch uint8 tensor (read in
    place) gives the bits of the same cache as separate NumPy arrays."""
    import test_engine_layouts as layouts

    files = layouts.flashmla_files()
    assert len(files) >= 2, "the flashmla_v32 and flashmla_model1 golden files"
    for path in files:
        g = golden.load(path)
        t, p = g.inputs, g.params
        fmt = "v32" if t["kv_cache.blocks"].shape[5] == 512 else "model1"
        nb, _, layers, ps, _, _ = t["kv_cache.blocks"].shape
        buf, token, block = layouts.pack_flashmla(t, fmt, 0, 576)
        engine = mlakit.flashmla_sparse_cache(torch.from_numpy(buf), to_torch(t["kv_cache.lookup_table"]),
                                              to_torch(t["kv_cache.cache_lengths"]), format=fmt, num_blocks=nb,
                                              page_size=ps, block_stride_bytes=block, num_layers=layers)
        opt = lambda k: to_torch(t[k]) if k in t else None  # noqa: E731
        got, got_lse = mt.sparse_mla_prefill(to_torch(t["q"]), engine, to_torch(t["indices"]),
                                             topk_lengths=opt("topk_lengths"), attn_sink=opt("attn_sink"),
                                             scale=p["scale"], v_depth=p["v_depth"], layer_idx=p["layer_idx"],
                                             return_lse=True)
        want = call_api(g, "cpu")
        assert np.array_equal(bits(got), bits(want["out.output"])), path.name
        assert np.array_equal(bits(got_lse), bits(want["out.lse"])), path.name
