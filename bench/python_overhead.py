#!/usr/bin/env python3
"""What a call through the Python package costs on top of the library: microseconds per call, the
median of several batches, for

  empty      fused_qkv_paged on an empty batch (T = 0): the library validates and returns, so the time
             is the binding's (argument views, params, the drivers' mapping) plus the validation;
  core       the same call through mlakit._core with the views built once: the C++ side alone;
  small      lightning_indexer on the smallest decode golden file, on the cpu back-end, through the
             package, beside `core` for the same call (the difference is the Python side's share).

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

    info = mlakit.info()
    print(f"mlakit {info['version']}, {info['cpu_model']}, isa {info['isa']}, {info['threads']} threads")
    for name, us in rows:
        print(f"{name:70s} {us:8.1f} us/call")
    print(json.dumps({name: round(us, 2) for name, us in rows}))


if __name__ == "__main__":
    main()
