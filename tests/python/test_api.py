"""The Python API (mlakit, mlakit.golden) over the golden files: every file through the operator
functions on every back-end present and every ISA level this CPU has (bit-identical to the file on
reference, bit-identical to the C++ run of the same back-end and level on cpu, whose tolerance
check `mlakit check` and test_golden_interop cover); refusals as typed exceptions that leave the
outputs untouched; dtype adapters; two threads at once; golden files written from Python."""
import threading

import ml_dtypes
import numpy as np
import pytest

import mlakit
import mlakit.golden as golden
from conftest import golden_files

POISON = 0xA5
LEVELS = ["generic", "avx2", "avx512", "avx512bf16", "amx"]


def poisoned(shape, dtype):
    a = np.empty(shape, dtype=dtype)
    a.view(np.uint8)[...] = POISON
    return a


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def cache(t, prefix, blocks=None, granularity=None):
    return mlakit.PagedKVCache(t[prefix + ".blocks"] if blocks is None else blocks, t[prefix + ".lookup_table"],
                               t[prefix + ".cache_lengths"], t.get(prefix + ".scales"), granularity,
                               tail=t.get(prefix + ".tail"))


def call_api(g, backend):
    """Runs the file's operator through the Python API on copies of its inputs, outputs poisoned
    first; returns {"out.<name>": array} as the file names them."""
    t, p = g.inputs, g.params
    if g.op == "lightning_indexer":
        out = poisoned((t["q"].shape[0], p["top_k"]), np.int32)
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"), top_k=p["top_k"],
                                 mask=p["mask"], layer_idx=p["layer_idx"], out=out, backend=backend)
        return {"out.output_indices": out}
    if g.op == "msa_block_indexer":
        q = t["q"]
        reduce = p.get("reduce_heads", False)
        out = poisoned((1 if reduce else q.shape[1], q.shape[0], p["topk"]), np.int32)
        mlakit.msa_block_indexer(q, t["input_row_offsets"], t["prefix_lens"], cache(t, "k_cache"),
                                 block_size=p["block_size"], topk=p["topk"], init_blocks=p["init_blocks"],
                                 local_blocks=p["local_blocks"], scale=p["scale"], reduce_heads=reduce,
                                 layer_idx=p["layer_idx"], out=out, backend=backend)
        return {"out.out_idxs": out}
    if g.op == "mla_prefill_fp8":
        q, blocks = t["q"].copy(), t["kv_cache.blocks"].copy()
        out = poisoned((q.shape[0], q.shape[1], p["v"]), ml_dtypes.bfloat16)
        mlakit.mla_prefill_fp8(q, t["input_row_offsets"], t["freqs_cis"], t["kv_norm_gamma"],
                               cache(t, "kv_cache", blocks), t["buffer_row_offsets"], t["cache_offsets"], t["kv_b_proj"],
                               t["kv_b_proj_scale"], buffer_length=p["buffer_length"], nope=p["nope"], rope=p["rope"],
                               v=p["v"], bn=p["bn"], bk=p["bk"], scale=p["scale"], epsilon=p["epsilon"],
                               numerics=p.get("numerics", "max"), topk_indices=t.get("topk_indices"),
                               layer_idx=p["layer_idx"], out=out, backend=backend)
        return {"out.output": out, "out.q": q, "out.kv_cache.blocks": blocks}
    if g.op == "sparse_mla_prefill":
        q = t["q"]
        out = poisoned((q.shape[0], q.shape[1], p["v_depth"]), ml_dtypes.bfloat16)
        lse = poisoned((q.shape[0], q.shape[1]), np.float32) if "out.lse" in g.outputs else None
        ml = poisoned((q.shape[0], q.shape[1]), np.float32) if "out.max_logits" in g.outputs else None
        mlakit.sparse_mla_prefill(q, cache(t, "kv_cache", None, p.get("quant_granularity")), t["indices"],
                                  topk_lengths=t.get("topk_lengths"),
                                  attn_sink=t.get("attn_sink"), scale=p["scale"], v_depth=p["v_depth"],
                                  layer_idx=p["layer_idx"], out=out, lse=lse, max_logits=ml, backend=backend)
        return {"out.output": out, **({"out.lse": lse} if lse is not None else {}),
                **({"out.max_logits": ml} if ml is not None else {})}
    if g.op == "fused_qkv_paged":
        x, blocks = t["hidden_state"], t["kv_cache.blocks"].copy()
        out = poisoned((x.shape[0], p["q_dim"]), x.dtype)
        mlakit.fused_qkv_paged(x, t["input_row_offsets"], cache(t, "kv_cache", blocks), q_dim=p["q_dim"],
                               weight=t.get("weight"), weight_scale=t.get("weight_scale"), qweight=t.get("qweight"),
                               scales=t.get("scales"), qzeros=t.get("qzeros"), g_idx=t.get("g_idx"),
                               group_size=p.get("group_size", 128), zero_format=p.get("zero_format", "v2"),
                               layer_idx=p["layer_idx"], out=out, backend=backend)
        return {"out.output": out, "out.kv_cache.blocks": blocks}
    raise AssertionError(g.op)


def cpu_levels():
    top = mlakit.info()["cpu_supported_isa"]
    return LEVELS[: LEVELS.index(top) + 1]


@pytest.fixture
def isa_cap():
    saved = mlakit.info()["max_isa"]
    yield
    mlakit.set_max_isa(saved)


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.name[: -len(".safetensors")])
def test_golden_file_through_the_api(path, isa_cap):
    g = golden.load(path)
    got = call_api(g, "reference")
    assert set(got) == set(g.outputs)
    for name, a in got.items():
        assert same_bits(a, g.outputs[name]), f"reference {name} differs from the file"
    if "cpu" not in mlakit.backends():
        return
    for level in cpu_levels():
        mlakit.set_max_isa(level)
        expected = golden.run(path, backend="cpu")
        for name, a in call_api(g, "cpu").items():
            assert same_bits(a, expected[name]), f"cpu at {level}: {name} differs from the C++ run"


def indexer_case():
    g = golden.load(next(p for p in golden_files() if p.name.startswith("lightning_indexer.default")))
    return g, g.inputs


def test_a_refusal_names_operator_and_field_and_writes_nothing():
    g, t = indexer_case()
    offsets = t["input_row_offsets"].copy()
    offsets[-1] += 1  # past the rows of q
    out = poisoned((t["q"].shape[0], g.params["top_k"]), np.int32)
    before = out.copy()
    with pytest.raises(mlakit.InvalidArgument) as e:
        mlakit.lightning_indexer(t["q"], t["q_s"], offsets, cache(t, "k_cache"), top_k=g.params["top_k"], out=out,
                                 backend="cpu")
    assert e.value.op == "lightning_indexer"
    assert e.value.field.startswith("input_row_offsets"), e.value.field
    assert str(e.value).startswith("lightning_indexer: "), str(e.value)
    assert isinstance(e.value, ValueError)
    assert same_bits(out, before), "a refused call wrote its output"


def test_params_and_backends_are_checked():
    g, t = indexer_case()
    with pytest.raises(mlakit.InvalidArgument) as e:
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"), top_k=0)
    assert "top_k" in str(e.value)
    with pytest.raises(mlakit.InvalidArgument, match="mask"):
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"), mask="sideways")
    with pytest.raises(ValueError, match="back-end"):
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"), backend="tpu")
    with pytest.raises(mlakit.MlakitError) as e:  # host arrays: not for cuda, present or not
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"),
                                 top_k=g.params["top_k"], backend="cuda")
    assert e.value.field == "backend"


def test_real_model_options_are_checked_and_write_nothing():
    # mla_prefill_fp8: an unknown numerics profile, a topk_indices of the wrong rows; nothing written.
    g = golden.load(next(p for p in golden_files() if p.name.startswith("mla_prefill_fp8.numerics_deepseek")))
    t, p = g.inputs, g.params
    for numerics, topk, field in (("bogus", None, "params.numerics"),
                                  ("deepseek", np.zeros((t["q"].shape[0] + 1, 3), np.int32), "topk_indices.shape")):
        q, blocks = t["q"].copy(), t["kv_cache.blocks"].copy()
        out = poisoned((q.shape[0], q.shape[1], p["v"]), ml_dtypes.bfloat16)
        before = (q.copy(), blocks.copy(), out.copy())
        with pytest.raises(mlakit.InvalidArgument, match=field.replace(".", r"\.")):
            mlakit.mla_prefill_fp8(q, t["input_row_offsets"], t["freqs_cis"], t["kv_norm_gamma"],
                                   cache(t, "kv_cache", blocks), t["buffer_row_offsets"], t["cache_offsets"],
                                   t["kv_b_proj"], t["kv_b_proj_scale"], buffer_length=p["buffer_length"],
                                   nope=p["nope"], rope=p["rope"], v=p["v"], bn=p["bn"], bk=p["bk"],
                                   scale=p["scale"], epsilon=p["epsilon"], numerics=numerics, topk_indices=topk,
                                   out=out)
        assert all(same_bits(a, b) for a, b in zip((q, blocks, out), before)), "a refused call wrote"
    # msa_block_indexer: reduce_heads gives one selection row; index heads that Hk does not divide
    # are refused.
    g = golden.load(next(p for p in golden_files() if p.name.startswith("msa_block_indexer.grouped_k_heads_exact")))
    t, p = g.inputs, g.params
    out = mlakit.msa_block_indexer(t["q"], t["input_row_offsets"], t["prefix_lens"], cache(t, "k_cache"),
                                   block_size=p["block_size"], topk=p["topk"], scale=p["scale"], reduce_heads=True)
    assert out.shape == (1, t["q"].shape[0], p["topk"])
    with pytest.raises(mlakit.InvalidArgument, match="num_k_heads=2 \\(must divide num_index_heads=3\\)"):
        mlakit.msa_block_indexer(t["q"][:, :3].copy(), t["input_row_offsets"], t["prefix_lens"], cache(t, "k_cache"),
                                 block_size=p["block_size"], topk=p["topk"], scale=p["scale"])


def test_split_row_refusals_name_the_field_and_write_nothing():
    """FlashMLA-style split rows: e8m0 scales as ml_dtypes or raw bytes; a tail of the wrong shape,
    a granularity that does not divide the codes, a tail on another operator, and a scale count
    that leaves the granularity ambiguous are refused, nothing written."""
    g = golden.load(next(p for p in golden_files() if p.name.startswith("sparse_mla_prefill.split_rows_general")))
    t, p = g.inputs, g.params
    T, Hq = t["q"].shape[:2]

    def run(c, **kw):
        out = poisoned((T, Hq, p["v_depth"]), ml_dtypes.bfloat16)
        before = out.copy()
        try:
            mlakit.sparse_mla_prefill(t["q"], c, t["indices"], topk_lengths=t.get("topk_lengths"), scale=p["scale"],
                                      v_depth=p["v_depth"], layer_idx=p["layer_idx"], out=out, **kw)
        except mlakit.MlakitError:
            assert same_bits(out, before), "a refused call wrote"
            raise
        return out

    def split(**changes):
        args = dict(blocks=t["kv_cache.blocks"], lookup_table=t["kv_cache.lookup_table"],
                    cache_lengths=t["kv_cache.cache_lengths"], scales=t["kv_cache.scales"],
                    quant_granularity=p["quant_granularity"], tail=t["kv_cache.tail"])
        args.update(changes)
        return mlakit.PagedKVCache(**args)

    want = run(split())
    assert same_bits(run(split(scales=t["kv_cache.scales"].view(np.uint8))), want), "raw e8m0 bytes"
    with pytest.raises(mlakit.InvalidArgument) as e:
        run(split(tail=np.ascontiguousarray(t["kv_cache.tail"][..., :7])))
    assert e.value.field == "kv_cache.blocks.shape[5] + kv_cache.tail.shape[5]"
    with pytest.raises(mlakit.InvalidArgument) as e:
        run(split(quant_granularity=12))
    assert e.value.field == "kv_cache.quant_granularity" and "must divide the quantized part" in str(e.value)
    with pytest.raises(TypeError, match="kv_cache.tail: expected bf16"):
        run(split(tail=t["kv_cache.tail"].astype(np.float32)))
    with pytest.raises(ValueError, match="quant_granularity is needed"):
        split(blocks=np.ascontiguousarray(t["kv_cache.blocks"][..., :31]), quant_granularity=None)
    gi, ti = indexer_case()  # a tail is op 4's alone: the indexer's argument list has none
    with pytest.raises(mlakit.InvalidArgument, match='"k_cache.tail" is not one of lightning_indexer'):
        c = mlakit.PagedKVCache(ti["k_cache.blocks"], ti["k_cache.lookup_table"], ti["k_cache.cache_lengths"],
                                ti["k_cache.scales"], tail=np.zeros(ti["k_cache.blocks"].shape[:5] + (8,), np.uint16))
        mlakit.lightning_indexer(ti["q"], ti["q_s"], ti["input_row_offsets"], c, top_k=gi.params["top_k"])


def test_raw_bits_and_int32_metadata_are_accepted_and_wrong_dtypes_are_not():
    g, t = indexer_case()
    want = g.outputs["out.output_indices"]
    c = mlakit.PagedKVCache(t["k_cache.blocks"].view(np.uint8), t["k_cache.lookup_table"].astype(np.int32),
                            t["k_cache.cache_lengths"].astype(np.int32), t["k_cache.scales"])
    got = mlakit.lightning_indexer(t["q"].view(np.uint8), t["q_s"], t["input_row_offsets"].astype(np.int32), c,
                                   top_k=g.params["top_k"], backend="reference")
    assert same_bits(got, want)
    with pytest.raises(TypeError, match="q: expected f8e4m3"):
        mlakit.lightning_indexer(t["q"].astype(np.float32), t["q_s"], t["input_row_offsets"], cache(t, "k_cache"))
    with pytest.raises(mlakit.InvalidArgument) as e:  # a negative int32 offset is a huge u32
        bad = t["input_row_offsets"].astype(np.int32)
        bad[1] = -1
        mlakit.lightning_indexer(t["q"], t["q_s"], bad, cache(t, "k_cache"), top_k=g.params["top_k"])
    assert e.value.field.startswith("input_row_offsets")
    with pytest.raises(ValueError, match="read-only"):
        ro = poisoned(want.shape, np.int32)
        ro.flags.writeable = False
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"),
                                 top_k=g.params["top_k"], out=ro)


def test_a_strided_cache_is_read_in_place_and_a_strided_output_refused():
    g, t = indexer_case()
    want = g.outputs["out.output_indices"]
    blocks = t["k_cache.blocks"]
    padded = np.zeros(blocks.shape[:-1] + (blocks.shape[-1] + 16,), dtype=blocks.dtype)  # an engine's padded rows
    padded[..., : blocks.shape[-1]] = blocks
    c = mlakit.PagedKVCache(padded[..., : blocks.shape[-1]], t["k_cache.lookup_table"], t["k_cache.cache_lengths"],
                            t["k_cache.scales"])
    got = mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], c, top_k=g.params["top_k"],
                                   backend="cpu")
    assert same_bits(got, want)
    wide = poisoned((want.shape[0], 2 * want.shape[1]), np.int32)
    with pytest.raises(mlakit.InvalidArgument) as e:
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"),
                                 top_k=g.params["top_k"], out=wide[:, ::2], backend="cpu")
    assert e.value.field == "output_indices.strides"
    assert np.all(wide.view(np.uint32) == 0xA5A5A5A5), "a refused call wrote its output"


def test_two_threads_at_once_give_the_single_thread_results():
    g, t = indexer_case()
    want = mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"),
                                    top_k=g.params["top_k"], backend="cpu")
    errors = []

    def worker():
        try:
            for _ in range(20):
                got = mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache"),
                                               top_k=g.params["top_k"], backend="cpu")
                if not same_bits(got, want):
                    errors.append("different result")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_remap_indices_to_rows_maps_positions_through_the_page_table():
    g, t = indexer_case()
    idx = g.outputs["out.output_indices"]
    lut, page = t["k_cache.lookup_table"], g.params["page_size"]
    rows = mlakit.remap_indices_to_rows(idx, t["input_row_offsets"], lut, page_size=page,
                                        num_blocks=t["k_cache.blocks"].shape[0], backend="reference")
    offsets = t["input_row_offsets"]
    for b in range(len(offsets) - 1):
        for r in range(offsets[b], offsets[b + 1]):
            for j, pos in enumerate(idx[r]):
                expect = -1 if pos < 0 else int(lut[b, pos // page]) * page + pos % page
                assert rows[r, j] == expect


def test_golden_write_round_trips(tmp_path):
    src = next(p for p in golden_files() if p.name.startswith("sparse_mla_prefill.deepseek_bf16"))
    g = golden.load(src)
    path = tmp_path / "mine.safetensors"
    golden.write(path, g.op, g.params, g.inputs)
    mine = golden.load(path)
    assert mine.op == g.op and mine.params == g.params and mine.tolerance == g.tolerance
    for name, a in g.tensors.items():
        assert same_bits(mine.tensors[name], a), name
    assert all(r.passed for r in golden.check(path, backend="cpu"))


def test_golden_check_judges_a_candidate_file(tmp_path):
    src = next(p for p in golden_files() if p.name.startswith("lightning_indexer.default"))
    g = golden.load(src)
    same = tmp_path / "same.safetensors"
    golden.write(same, g.op, g.params, g.inputs)
    assert all(r.passed for r in golden.check(src, candidate=same))
    flipped = dict(g.inputs)
    flipped["q_s"] = -g.inputs["q_s"]  # other scores: other top-k positions
    wrong = tmp_path / "wrong.safetensors"
    golden.write(wrong, g.op, g.params, flipped)
    results = golden.check(src, candidate=wrong)
    assert results and not all(r.passed for r in results)
    with pytest.raises(ValueError):
        golden.check(tmp_path / "missing.safetensors")


def test_info_and_controls():
    info = mlakit.info()
    assert info["version"] == mlakit.__version__
    assert "reference" in mlakit.backends()
    assert set(info["operators"]) == {"lightning_indexer", "msa_block_indexer", "mla_prefill_fp8",
                                      "sparse_mla_prefill", "fused_qkv_paged"}
    saved = mlakit.get_num_threads()
    mlakit.set_num_threads(1)
    assert mlakit.get_num_threads() == 1
    mlakit.set_num_threads(saved)
    with pytest.raises(ValueError):
        mlakit.set_max_isa("sse9")
    mlakit.release_cpu_call_buffers()


def fused_files():
    return [p for p in golden_files() if p.name.startswith("fused_qkv_paged.")]


def weights_of(t):
    return {k: t.get(k) for k in ("weight", "weight_scale", "qweight", "scales", "qzeros", "g_idx")}


def pack_of(g, prefill_layout=True):
    t, p = g.inputs, g.params
    x = t["hidden_state"]
    return mlakit.pack_weights(**weights_of(t), group_size=p.get("group_size", 128),
                               zero_format=p.get("zero_format", "v2"),
                               activations="f32" if x.dtype == np.float32 else "bf16", prefill_layout=prefill_layout)


def call_fused(g, packed=None, weights=None):
    t, p = g.inputs, g.params
    x, blocks = t["hidden_state"], t["kv_cache.blocks"].copy()
    out = poisoned((x.shape[0], p["q_dim"]), x.dtype)
    w = weights_of(t) if weights is None else weights
    mlakit.fused_qkv_paged(x, t["input_row_offsets"], cache(t, "kv_cache", blocks), q_dim=p["q_dim"], **w,
                           group_size=p.get("group_size", 128), zero_format=p.get("zero_format", "v2"),
                           layer_idx=p["layer_idx"], out=out, backend="cpu", packed_weights=packed)
    return out, blocks


@pytest.mark.skipif("cpu" not in mlakit.backends(), reason="no cpu back-end")
@pytest.mark.parametrize("path", fused_files(), ids=lambda p: p.name[: -len(".safetensors")])
def test_packed_weights_give_the_same_bits(path):
    g = golden.load(path)
    plain = call_fused(g)
    for prefill_layout in (True, False):
        pack = pack_of(g, prefill_layout)
        assert pack.layout and pack.nbytes >= 0
        if not prefill_layout:  # GPTQ's codes alone, rows 16 words past a multiple of 128, or nothing
            codes = 0
            if "qweight" in g.inputs:
                rows, n = g.inputs["qweight"].shape
                codes = rows * ((n + 111) // 128 * 128 + 16) * 4
                if "decode rows' group tables" in pack.layout:  # avx2: 256 bytes per 8 columns and group
                    codes += n // 8 * g.inputs["scales"].shape[0] * 256
                if "codes laid out for" in pack.layout:  # avx2: 64 bytes per 8 columns and two word rows
                    codes += n // 8 * ((rows + 1) // 2) * 64
            assert pack.nbytes == codes, pack
        packed = call_fused(g, pack)
        for a, b in zip(plain, packed):
            assert same_bits(a, b)


@pytest.mark.skipif("cpu" not in mlakit.backends(), reason="no cpu back-end")
def test_packed_weights_of_other_tensors_are_refused_and_nothing_is_written():
    g = golden.load(next(p for p in fused_files() if ".dense" in p.name or "dense" in p.name))
    pack = pack_of(g)
    other = {k: (None if v is None else v.copy()) for k, v in weights_of(g.inputs).items()}
    t, p = g.inputs, g.params
    x, blocks = t["hidden_state"], t["kv_cache.blocks"].copy()
    out = poisoned((x.shape[0], p["q_dim"]), x.dtype)
    before_out, before_blocks = out.copy(), blocks.copy()
    with pytest.raises(mlakit.InvalidArgument) as e:
        mlakit.fused_qkv_paged(x, t["input_row_offsets"], cache(t, "kv_cache", blocks), q_dim=p["q_dim"], **other,
                               layer_idx=p["layer_idx"], out=out, backend="cpu", packed_weights=pack)
    assert e.value.field == "packed_weights", str(e.value)
    assert "weight.data differs" in str(e.value)
    assert same_bits(out, before_out) and same_bits(blocks, before_blocks), "a refused call wrote"


def test_pack_weights_checks_its_arguments():
    g = golden.load(next(p for p in fused_files() if "fp8" in p.name))
    w = weights_of(g.inputs)
    with pytest.raises(ValueError, match="activations"):
        mlakit.pack_weights(**w, activations="f16")
    with pytest.raises(TypeError, match="weight"):
        mlakit.pack_weights()
    bad = dict(w, weight_scale=w["weight_scale"][:1])
    with pytest.raises(mlakit.InvalidArgument) as e:
        mlakit.pack_weights(**bad)
    assert e.value.op == "fused_qkv_paged.pack_weights" and e.value.field == "weight_scale.shape", str(e.value)
    with pytest.raises(TypeError, match="pack_weights"):
        call_fused(g, packed="not a pack")
    with pytest.raises(TypeError, match="prefill_layout"):
        mlakit.pack_weights(**w, prefill_layout="no")


@pytest.mark.skipif("cpu" not in mlakit.backends(), reason="no cpu back-end")
def test_planned_runs_take_packed_weights():
    """A plan made without a pack; runs naming the layer's pack give the unpacked bits; a run whose
    weights are not the pack's is refused and writes nothing."""
    for path in fused_files():
        g = golden.load(path)
        t, p = g.inputs, g.params
        x = t["hidden_state"]
        blocks = t["kv_cache.blocks"].copy()
        step = mlakit.plan(mlakit.fused_qkv_paged, x, t["input_row_offsets"], cache(t, "kv_cache", blocks),
                           q_dim=p["q_dim"], **weights_of(t), group_size=p.get("group_size", 128),
                           zero_format=p.get("zero_format", "v2"), layer_idx=p["layer_idx"], backend="cpu")
        pack = pack_of(g)
        plain_out, plain_blocks = call_fused(g)
        out = step.run(packed_weights=pack)
        assert same_bits(out, plain_out) and same_bits(blocks, plain_blocks), path.name
        w = weights_of(t)
        name = "qweight" if w["qweight"] is not None else "weight"
        if x.shape[0] == 0:
            continue
        before = blocks.copy()
        with pytest.raises(mlakit.InvalidArgument) as e:
            step.run(packed_weights=pack, **{name: w[name].copy()})
        assert e.value.field == "packed_weights", str(e.value)
        assert same_bits(blocks, before), "a refused run wrote the cache"
