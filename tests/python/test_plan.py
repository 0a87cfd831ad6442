"""mlakit.plan: a step planned once and run layer by layer gives the one-shot call's bits (every
golden file, outputs poisoned before each run); a layer loop over a multi-layer cache; what a run
may change and what needs a new plan; refusals at plan and at run leave outputs untouched."""
import ml_dtypes
import numpy as np
import pytest

import mlakit
import mlakit.golden as golden
from conftest import golden_files
from test_api import cache, poisoned, same_bits


def planned_call(g):
    """(operator, positional args, keyword args, {out name: array}) of golden file g's call, on
    copies of its inputs, outputs poisoned."""
    t, p = g.inputs, g.params
    if g.op == "lightning_indexer":
        out = poisoned((t["q"].shape[0], p["top_k"]), np.int32)
        return (mlakit.lightning_indexer, (t["q"], t["q_s"], t["input_row_offsets"], cache(t, "k_cache")),
                dict(top_k=p["top_k"], mask=p["mask"], layer_idx=p["layer_idx"], out=out),
                {"out.output_indices": out})
    if g.op == "msa_block_indexer":
        q = t["q"]
        reduce = p.get("reduce_heads", False)
        out = poisoned((1 if reduce else q.shape[1], q.shape[0], p["topk"]), np.int32)
        return (mlakit.msa_block_indexer, (q, t["input_row_offsets"], t["prefix_lens"], cache(t, "k_cache")),
                dict(block_size=p["block_size"], topk=p["topk"], init_blocks=p["init_blocks"],
                     local_blocks=p["local_blocks"], scale=p["scale"], reduce_heads=reduce, layer_idx=p["layer_idx"],
                     out=out),
                {"out.out_idxs": out})
    if g.op == "mla_prefill_fp8":
        q, blocks = t["q"].copy(), t["kv_cache.blocks"].copy()
        out = poisoned((q.shape[0], q.shape[1], p["v"]), ml_dtypes.bfloat16)
        return (mlakit.mla_prefill_fp8,
                (q, t["input_row_offsets"], t["freqs_cis"], t["kv_norm_gamma"], cache(t, "kv_cache", blocks),
                 t["buffer_row_offsets"], t["cache_offsets"], t["kv_b_proj"], t["kv_b_proj_scale"]),
                dict(buffer_length=p["buffer_length"], nope=p["nope"], rope=p["rope"], v=p["v"], bn=p["bn"],
                     bk=p["bk"], scale=p["scale"], epsilon=p["epsilon"], numerics=p.get("numerics", "max"),
                     topk_indices=t.get("topk_indices"), layer_idx=p["layer_idx"], out=out),
                {"out.output": out, "out.q": q, "out.kv_cache.blocks": blocks})
    if g.op == "sparse_mla_prefill":
        q = t["q"]
        out = poisoned((q.shape[0], q.shape[1], p["v_depth"]), ml_dtypes.bfloat16)
        lse = poisoned((q.shape[0], q.shape[1]), np.float32) if "out.lse" in g.outputs else None
        ml = poisoned((q.shape[0], q.shape[1]), np.float32) if "out.max_logits" in g.outputs else None
        return (mlakit.sparse_mla_prefill, (q, cache(t, "kv_cache", None, p.get("quant_granularity")), t["indices"]),
                dict(topk_lengths=t.get("topk_lengths"), attn_sink=t.get("attn_sink"), scale=p["scale"],
                     v_depth=p["v_depth"], layer_idx=p["layer_idx"], out=out, lse=lse, max_logits=ml),
                {"out.output": out, **({"out.lse": lse} if lse is not None else {}),
                 **({"out.max_logits": ml} if ml is not None else {})})
    if g.op == "fused_qkv_paged":
        x, blocks = t["hidden_state"], t["kv_cache.blocks"].copy()
        out = poisoned((x.shape[0], p["q_dim"]), x.dtype)
        return (mlakit.fused_qkv_paged, (x, t["input_row_offsets"], cache(t, "kv_cache", blocks)),
                dict(q_dim=p["q_dim"], weight=t.get("weight"), weight_scale=t.get("weight_scale"),
                     qweight=t.get("qweight"), scales=t.get("scales"), qzeros=t.get("qzeros"), g_idx=t.get("g_idx"),
                     group_size=p.get("group_size", 128), zero_format=p.get("zero_format", "v2"),
                     layer_idx=p["layer_idx"], out=out),
                {"out.output": out, "out.kv_cache.blocks": blocks})
    raise AssertionError(g.op)


IN_PLACE = {"mla_prefill_fp8", "fused_qkv_paged"}  # a second run would start from the first one's result


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.name[: -len(".safetensors")])
def test_a_planned_run_gives_the_one_shot_bits(path):
    g = golden.load(path)
    fn, args, kwargs, _ = planned_call(g)
    expected = {}
    efn, eargs, ekwargs, eouts = planned_call(g)
    efn(*eargs, **ekwargs)
    expected = {k: v.copy() for k, v in eouts.items()}

    step = mlakit.plan(fn, *args, **kwargs)
    assert step.backend == "cpu" and step.implementation.startswith("cpu"), step.implementation
    for _ in range(1 if g.op in IN_PLACE else 2):
        _, _, _, outs = planned_call(g)  # fresh poisoned outputs for this run
        changes = {"out": outs["out.output_indices" if g.op == "lightning_indexer" else
                               "out.out_idxs" if g.op == "msa_block_indexer" else "out.output"]}
        if "out.lse" in outs:
            changes["lse"] = outs["out.lse"]
        if "out.max_logits" in outs:
            changes["max_logits"] = outs["out.max_logits"]
        if g.op in IN_PLACE:  # the in-place arguments the plan holds are still the file's inputs
            outs = {k: v for k, v in outs.items() if k == "out.output"}
            outs.update({k: v for k, v in planned_outputs(g, args).items()})
        step.run(**changes)
        for name, a in outs.items():
            assert same_bits(a, expected[name]), f"{name}: the planned run differs from the one-shot call"


def planned_outputs(g, args):
    """The in-place arguments of the planned call (the arrays the plan holds)."""
    if g.op == "mla_prefill_fp8":
        return {"out.q": args[0], "out.kv_cache.blocks": args[4].blocks}
    return {"out.kv_cache.blocks": args[2].blocks}


def test_a_layer_loop_over_one_cache():
    g = golden.load(next(p for p in golden_files() if p.name.startswith("lightning_indexer.multi_layer")))
    fn, args, kwargs, outs = planned_call(g)
    layers = args[3].blocks.shape[2]
    assert layers > 1
    step = mlakit.plan(fn, *args, **{**kwargs, "layer_idx": 0})
    for layer in range(layers):
        out = poisoned(outs["out.output_indices"].shape, np.int32)
        step.run(layer_idx=layer, out=out)
        once = fn(*args, **{**kwargs, "layer_idx": layer, "out": None})
        assert same_bits(out, once), f"layer {layer}"


def test_outputs_not_given_to_plan_are_allocated_per_run():
    g = golden.load(next(p for p in golden_files() if p.name.startswith("sparse_mla_prefill.")))
    fn, args, kwargs, _ = planned_call(g)
    step = mlakit.plan(fn, *args, **{**kwargs, "out": None, "lse": None})
    a, b = step.run(), step.run()
    assert a is not b and same_bits(a, b)


def test_what_a_run_may_not_change():
    g = golden.load(next(p for p in golden_files() if p.name.startswith("lightning_indexer.default")))
    fn, args, kwargs, outs = planned_call(g)
    step = mlakit.plan(fn, *args, **kwargs)
    with pytest.raises(TypeError, match="top_k"):
        step.run(top_k=kwargs["top_k"] + 1)
    with pytest.raises(TypeError, match="no argument"):
        step.run(topk=3)
    # The step's metadata is checked once, at plan time: a run on other offsets is refused.
    out = outs["out.output_indices"]
    before = out.copy()
    with pytest.raises(mlakit.InvalidArgument) as e:
        step.run(input_row_offsets=args[2].copy(), out=out)
    assert e.value.op == "lightning_indexer" and "input_row_offsets" in str(e.value), str(e.value)
    assert same_bits(out, before), "a refused run wrote its output"
    with pytest.raises(TypeError, match="remap"):
        mlakit.plan(mlakit.remap_indices_to_rows, out, args[2], args[3].lookup_table, page_size=1, num_blocks=1)


def test_a_refused_plan_names_the_field():
    g = golden.load(next(p for p in golden_files() if p.name.startswith("lightning_indexer.default")))
    fn, args, kwargs, outs = planned_call(g)
    offsets = args[2].copy()
    offsets[-1] += 1
    before = outs["out.output_indices"].copy()
    with pytest.raises(mlakit.InvalidArgument) as e:
        mlakit.plan(fn, args[0], args[1], offsets, args[3], **kwargs)
    assert e.value.field.startswith("input_row_offsets"), e.value.field
    assert same_bits(outs["out.output_indices"], before)


def test_plan_on_the_reference_back_end():
    g = golden.load(next(p for p in golden_files() if p.name.startswith("msa_block_indexer.")))
    fn, args, kwargs, outs = planned_call(g)
    step = mlakit.plan(fn, *args, **kwargs, backend="reference")
    assert step.backend == "reference"
    step.run()
    assert same_bits(outs["out.out_idxs"], g.outputs["out.out_idxs"])
