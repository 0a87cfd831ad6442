"""Golden files read from Python: every committed file loads with safetensors + ml_dtypes, and ops 1,
4 and 5 are recomputed independently in NumPy and compared with the stored reference outputs. Files
written from Python run through `mlakit run`, and `mlakit check --candidate` judges outputs made
elsewhere."""
import json
import subprocess

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import numpy_ops as ops
from conftest import as_f64, golden_files, load, mlakit_bin

FILES = golden_files()
OPS = ("lightning_indexer", "msa_block_indexer", "mla_prefill_fp8", "sparse_mla_prefill", "fused_qkv_paged")
BY_OP = {op: [] for op in OPS}
for _f in FILES:
    BY_OP.setdefault(load(_f)[1].get("op", "?"), []).append(_f)


def ids(p):
    return p.stem


def test_data_set_covers_every_operator():
    assert FILES, "data/golden holds no .safetensors files"
    for op in OPS:
        assert BY_OP[op], f"no golden file for {op}"


@pytest.mark.parametrize("path", FILES, ids=ids)
def test_file_loads_with_metadata(path):
    tensors, meta = load(path)
    assert meta["format"] == "mlakit-golden/1"
    assert meta["op"] in OPS
    assert isinstance(meta["params"], dict) and meta["params"]
    outputs = [n for n in tensors if n.startswith("out.")]
    assert outputs, "no out.* tensors"
    assert set(meta["tolerance"]) == set(outputs)
    for name in ("case", "seed", "producer"):
        assert meta.get(name), f"metadata lacks {name}"
    for name, a in tensors.items():
        if a.dtype == ml_dtypes.float8_e4m3fn:
            assert a.size < 256 or len(np.unique(a.view(np.uint8))) == 256, f"{name}: not every FP8 code present"


# ---- op 1 ----------------------------------------------------------------------------------------
def check_lightning_indexer(t, p, tol):
    offsets = t["input_row_offsets"].astype(np.int64)
    lens = t["k_cache.cache_lengths"].astype(np.int64)
    out = t["out.output_indices"]
    exact = tol.get("exact", False)
    for b in range(len(offsets) - 1):
        seq_len = offsets[b + 1] - offsets[b]
        for i in range(seq_len):
            row = offsets[b] + i
            n = lens[b] + i + 1 if p["mask"] == "causal" else lens[b] + seq_len
            score, mag = ops.lightning_indexer_scores(t, p, b, row, n)
            m = min(p["top_k"], n)
            got = out[row]
            assert np.all(got[m:] == -1), f"row {row}: tail is not -1"
            sel = got[:m].astype(np.int64)
            assert np.all((sel >= 0) & (sel < n)) and len(set(sel.tolist())) == m, f"row {row}: bad indices"
            want = ops.spec_order(score)[:m]
            if exact:
                np.testing.assert_array_equal(sel, want, err_msg=f"row {row}")
                continue
            bound = 4 * p["num_heads"] * p["head_dim"] * 2.0**-24 * np.nan_to_num(mag, nan=0.0, posinf=0.0)
            nan = np.isnan(score)
            finite = np.flatnonzero(~nan)
            if finite.size >= m:
                assert not nan[sel].any(), f"row {row}: NaN selected while numbers remain"
                chosen = np.zeros(n, bool)
                chosen[sel] = True
                rest = finite[~chosen[finite]]
                if rest.size:
                    worst_kept = np.min(score[sel] + bound[sel])
                    best_left = np.max(score[rest] - bound[rest])
                    assert best_left <= worst_kept, f"row {row}: an unselected key beats a selected one"
            else:
                assert set(finite.tolist()) <= set(sel.tolist()), f"row {row}: a number was left out"


@pytest.mark.parametrize("path", BY_OP["lightning_indexer"], ids=ids)
def test_lightning_indexer_matches_numpy(path):
    t, meta = load(path)
    check_lightning_indexer(t, meta["params"], meta["tolerance"]["out.output_indices"])


# ---- op 4 ----------------------------------------------------------------------------------------
def assert_close(name, got, want, tol):
    got, want = as_f64(got), as_f64(want)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaN positions")
    ok = ~np.isnan(want)
    inf = np.isinf(want) & ok
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{name}: infinities")
    fin = ok & ~inf
    err = np.abs(got[fin] - want[fin])
    limit = tol.get("atol", 0.0) + tol.get("rtol", 0.0) * np.abs(want[fin])
    assert np.all(err <= limit), f"{name}: max excess {np.max(err - limit)}"


@pytest.mark.parametrize("path", BY_OP["sparse_mla_prefill"], ids=ids)
def test_sparse_mla_prefill_matches_numpy(path):
    t, meta = load(path)
    p, tol = meta["params"], meta["tolerance"]
    out, lse = ops.sparse_mla(t, p)
    # NumPy's f64 result is at least as exact as the reference; the file's tolerance covers both
    # the optimized back-ends and this comparison.
    assert_close("out.output", t["out.output"], out, tol["out.output"])
    if "out.lse" in t:
        assert_close("out.lse", t["out.lse"], lse, tol["out.lse"])


# ---- op 5 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", BY_OP["fused_qkv_paged"], ids=ids)
def test_fused_qkv_paged_matches_numpy(path):
    t, meta = load(path)
    p = meta["params"]
    x = as_f64(t["hidden_state"])
    K = x.shape[1]
    w = ops.fused_qkv_weight(t, p, K)
    with np.errstate(invalid="ignore", over="ignore"):
        y = x @ w.T
        mag = np.abs(x) @ np.abs(w).T
    u_out = 2.0**-8 if t["hidden_state"].dtype == ml_dtypes.bfloat16 else 2.0**-24
    bound = 4 * K * 2.0**-24 * mag + u_out * np.abs(y)
    q_dim = p["q_dim"]

    def check(name, got, want, lim):
        got, want = as_f64(got), np.asarray(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaN positions")
        ok = ~np.isnan(want)
        assert np.all(np.abs(got[ok] - want[ok]) <= lim[ok]), f"{name}: outside the derived bound"

    check("out.output", t["out.output"], y[:, :q_dim], bound[:, :q_dim])
    before, after = t["kv_cache.blocks"], t["out.kv_cache.blocks"]
    touched = np.zeros(before.shape[:5], bool)  # (blk, kv, layer, off, head)
    offsets = t["input_row_offsets"].astype(np.int64)
    lens = t["kv_cache.cache_lengths"].astype(np.int64)
    lut = t["kv_cache.lookup_table"]
    kv_dim, hkv, hd = before.shape[1], before.shape[4], before.shape[5]
    layer, ps = p["layer_idx"], p["page_size"]
    for b in range(len(offsets) - 1):
        for row in range(offsets[b], offsets[b + 1]):
            pos = lens[b] + row - offsets[b]
            blk, off = int(lut[b, pos // ps]), pos % ps
            for kv in range(kv_dim):
                cols = slice(q_dim + kv * hkv * hd, q_dim + (kv + 1) * hkv * hd)
                want = y[row, cols].reshape(hkv, hd)
                check(f"cache row {row} kv {kv}", after[blk, kv, layer, off], want, bound[row, cols].reshape(hkv, hd))
                touched[blk, kv, layer, off, :] = True
    same = before.view(np.uint8 if before.itemsize == 1 else np.uint16 if before.itemsize == 2 else np.uint32)
    new = after.view(same.dtype)
    assert np.array_equal(same[~touched], new[~touched]), "cache rows the op must not touch changed"


# ---- files made in Python, run and checked by mlakit ------------------------------------------------
def write(path, tensors, op, params):
    meta = {"format": "mlakit-golden/1", "op": op, "params": json.dumps(params)}
    safetensors.numpy.save_file(tensors, str(path), metadata=meta)


def lightning_inputs(rng):
    H, D, ps = 2, 16, 4
    lens, seqs = np.array([3, 0], np.uint32), [4, 2]
    T = sum(seqs)
    pages = [(l + s + ps - 1) // ps for l, s in zip(lens, seqs)]
    nb = sum(pages) + 3
    order = rng.permutation(nb)
    lut = np.full((2, max(pages) + 1), nb, np.uint32)
    lut[0, : pages[0]] = order[: pages[0]]
    lut[1, : pages[1]] = order[pages[0] : pages[0] + pages[1]]
    codes = rng.integers(0, 256, size=(nb, 1, 1, ps, 1, D), dtype=np.uint8)
    codes.reshape(-1)[rng.permutation(codes.size)[:256]] = np.arange(256, dtype=np.uint8)
    tensors = {
        "q": rng.integers(0, 256, size=(T, H, D), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "q_s": rng.standard_normal((T, H)).astype(np.float32),
        "input_row_offsets": np.array([0, seqs[0], T], np.uint32),
        "k_cache.blocks": codes.view(ml_dtypes.float8_e4m3fn),
        "k_cache.scales": rng.uniform(0.5, 2, size=(nb, 1, 1, ps, 1, 1)).astype(np.float32),
        "k_cache.lookup_table": lut,
        "k_cache.cache_lengths": lens,
    }
    params = {"num_heads": H, "head_dim": D, "top_k": 5, "mask": "causal", "quant_granularity": D,
              "layer_idx": 0, "page_size": ps}
    return tensors, params


def test_python_written_file_runs_through_mlakit(tmp_path):
    exe = mlakit_bin()
    tensors, params = lightning_inputs(np.random.default_rng(7))
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    write(src, tensors, "lightning_indexer", params)
    subprocess.run([exe, "run", str(src), "--out", str(dst), "--backend", "reference"], check=True)
    t, meta = load(dst)
    assert meta["op"] == "lightning_indexer"
    check_lightning_indexer(t, params, {"exact": False})


def test_check_judges_a_candidate_written_in_python(tmp_path):
    exe = mlakit_bin()
    path = BY_OP["sparse_mla_prefill"][0]
    t, _ = load(path)
    good = {k: v for k, v in t.items() if k.startswith("out.")}
    safetensors.numpy.save_file(good, str(tmp_path / "good.safetensors"))
    ok = subprocess.run([exe, "check", str(path), "--candidate", str(tmp_path / "good.safetensors")])
    assert ok.returncode == 0
    bad = dict(good)
    out = as_f64(bad["out.output"]).copy()
    out.reshape(-1)[0] += 1.0 + abs(out.reshape(-1)[0])
    bad["out.output"] = out.astype(ml_dtypes.bfloat16)
    safetensors.numpy.save_file(bad, str(tmp_path / "bad.safetensors"))
    fail = subprocess.run([exe, "check", str(path), "--candidate", str(tmp_path / "bad.safetensors")],
                          capture_output=True, text=True)
    assert fail.returncode == 1, fail.stdout
    assert "FAIL" in fail.stdout
