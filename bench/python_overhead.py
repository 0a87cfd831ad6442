#!/usr/bin/env python3
"""What a call through the Python package costs on top of the library: microseconds per call, the
median of several batches, for

  empty      fused_qkv_paged on an empty batch (T = 0): the library validates and returns, so the time
             is the binding's (argument views, params, the drivers' mapping) plus the validation;
  core       the same call through mlakit._core with the views built once: the C++ side alone;
  small      lightning_indexer on the smallest decode golden file, on the cpu back-end, through the
             package, beside `core` for the same call (the difference is the Python side's share), and
             through a plan (mlakit.plan) made once, run with the layer and with a new q;
  torch      where torch is installed, both calls again on torch CPU tensors: through the package's
             functions, through the torch op torch.ops.mlakit.* (the dispatcher's share on top), and
             through mlakit.torch's functional wrapper (which also allocates the output).

    PYTHONPATH=build/python python3 bench/python_overhead.py [--calls 2000]
"""
import argparse
import json
import pathlib
import statistics
import time

import numpy as np

import mlakit
import mlakit.golden as golden
from mlakit import _core

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "data" / "golden"


def per_call_us(fn, calls, batches=7):
    fn()
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def cache(t, prefix, blocks=None):
    return mlakit.PagedKVCache(t[prefix + ".blocks"] if blocks is None else blocks, t[prefix + ".lookup_table"],
                               t[prefix + ".cache_lengths"], t.get(prefix + ".scales"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    rows = []

    g = golden.load(GOLDEN / "fused_qkv_paged.empty_batch.s1.safetensors")
    t, p = g.inputs, g.params
    blocks = t["kv_cache.blocks"].copy()
    c = cache(t, "kv_cache", blocks)
    out = np.empty((0, p["q_dim"]), dtype=t["hidden_state"].dtype)

    def api():
        mlakit.fused_qkv_paged(t["hidden_state"], t["input_row_offsets"], c, q_dim=p["q_dim"], weight=t.get("weight"),
                               weight_scale=t.get("weight_scale"), qweight=t.get("qweight"), scales=t.get("scales"),
                               qzeros=t.get("qzeros"), g_idx=t.get("g_idx"), group_size=p.get("group_size", 128),
                               layer_idx=p["layer_idx"], out=out, backend="cpu")

    captured = {}
    real = _core.call

    def capture(*a):
        captured["args"] = a
        return real(*a)

    _core.call = capture
    api()
    _core.call = real
    op, params, views, backend, stream = captured["args"]
    rows.append(("empty batch, package", per_call_us(api, args.calls)))
    rows.append(("empty batch, _core only", per_call_us(lambda: real(op, params, views, backend, stream), args.calls)))

    g = golden.load(GOLDEN / "lightning_indexer.decode.s1.safetensors")
    t, p = g.inputs, g.params
    c = cache(t, "k_cache")
    out = np.empty((t["q"].shape[0], p["top_k"]), dtype=np.int32)

    def small():
        mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], c, top_k=p["top_k"], mask=p["mask"],
                                 layer_idx=p["layer_idx"], out=out, backend="cpu")

    _core.call = capture
    small()
    _core.call = real
    op, params, views, backend, stream = captured["args"]
    rows.append((f"lightning_indexer decode golden file ({t['q'].shape[0]} rows), package", per_call_us(small, args.calls)))
    rows.append(("the same, _core only", per_call_us(lambda: real(op, params, views, backend, stream), args.calls)))
    step = mlakit.plan(mlakit.lightning_indexer, t["q"], t["q_s"], t["input_row_offsets"], c, top_k=p["top_k"],
                       mask=p["mask"], layer_idx=p["layer_idx"], out=out, backend="cpu")
    rows.append(("the same, planned once: plan.run(layer_idx=...)",
                 per_call_us(lambda: step.run(layer_idx=p["layer_idx"]), args.calls)))
    rows.append(("the same, planned once: plan.run(q=..., layer_idx=...)",
                 per_call_us(lambda: step.run(q=t["q"], layer_idx=p["layer_idx"]), args.calls)))

    rows += torch_rows(args.calls)

    info = mlakit.info()
    print(f"mlakit {info['version']}, {info['cpu_model']}, isa {info['isa']}, {info['threads']} threads")
    for name, us in rows:
        print(f"{name:70s} {us:8.1f} us/call")
    print(json.dumps({name: round(us, 2) for name, us in rows}))


def torch_rows(calls):
    try:
        import torch
        import mlakit.torch as mt
    except ImportError as e:
        print(f"torch rows skipped: {e}")
        return []
    torch.set_num_threads(mlakit.get_num_threads())

    def tt(a):
        a = np.ascontiguousarray(a)
        if a.dtype.itemsize == 1 and a.dtype != np.uint8:
            return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn)
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
        if a.dtype == np.uint32:
            return torch.from_numpy(a.view(np.int32).copy())
        return torch.from_numpy(a.copy())

    rows = []
    g = golden.load(GOLDEN / "fused_qkv_paged.empty_batch.s1.safetensors")
    t, p = {k: tt(v) for k, v in g.inputs.items()}, g.params
    c = mlakit.PagedKVCache(t["kv_cache.blocks"], t["kv_cache.lookup_table"], t["kv_cache.cache_lengths"])
    out = torch.empty((0, p["q_dim"]), dtype=t["hidden_state"].dtype)
    op_args = (t["hidden_state"], t["input_row_offsets"], c.blocks, c.lookup_table, c.cache_lengths, t.get("weight"),
               None, None, None, None, None, p["q_dim"], 128, "v2", p["layer_idx"], out)
    rows.append(("empty batch, torch tensors, package",
                 per_call_us(lambda: mlakit.fused_qkv_paged(t["hidden_state"], t["input_row_offsets"], c,
                                                            q_dim=p["q_dim"], weight=t["weight"],
                                                            layer_idx=p["layer_idx"], out=out), calls)))
    rows.append(("empty batch, torch.ops.mlakit (out-variant)",
                 per_call_us(lambda: torch.ops.mlakit.fused_qkv_paged(*op_args), calls)))
    rows.append(("empty batch, mlakit.torch functional",
                 per_call_us(lambda: mt.fused_qkv_paged(t["hidden_state"], t["input_row_offsets"], c,
                                                        q_dim=p["q_dim"], weight=t["weight"],
                                                        layer_idx=p["layer_idx"]), calls)))

    g = golden.load(GOLDEN / "lightning_indexer.decode.s1.safetensors")
    t, p = {k: tt(v) for k, v in g.inputs.items()}, g.params
    c = mlakit.PagedKVCache(t["k_cache.blocks"], t["k_cache.lookup_table"], t["k_cache.cache_lengths"],
                            t["k_cache.scales"])
    out = torch.empty((t["q"].shape[0], p["top_k"]), dtype=torch.int32)
    op_args = (t["q"], t["q_s"], t["input_row_offsets"], c.blocks, c.lookup_table, c.cache_lengths, c.scales,
               c.quant_granularity, p["top_k"], p["mask"], p["layer_idx"], out)
    rows.append(("lightning_indexer decode, torch tensors, package",
                 per_call_us(lambda: mlakit.lightning_indexer(t["q"], t["q_s"], t["input_row_offsets"], c,
                                                              top_k=p["top_k"], mask=p["mask"],
                                                              layer_idx=p["layer_idx"], out=out), calls)))
    rows.append(("lightning_indexer decode, torch.ops.mlakit (out-variant)",
                 per_call_us(lambda: torch.ops.mlakit.lightning_indexer(*op_args), calls)))
    return rows


if __name__ == "__main__":
    main()
