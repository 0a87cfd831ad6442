"""Shared helpers: load golden files with safetensors' NumPy API, decoding BF16 and F8_E4M3 through
ml_dtypes, and locate the data set and the mlakit binary."""
import json
import os
import pathlib

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy

# safetensors' NumPy loader asks NumPy for `bfloat16`, `float8_e4m3fn` and `float8_e8m0fnu`, which NumPy itself does
# not define; ml_dtypes provides both with exact IEEE-style semantics (NaN codes, subnormals).
np.bfloat16 = ml_dtypes.bfloat16
np.float8_e4m3fn = ml_dtypes.float8_e4m3fn
np.float8_e8m0fnu = ml_dtypes.float8_e8m0fnu  # e8m0 scale bytes (op 4 MODEL1 caches)

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "data" / "golden"


def golden_files():
    return sorted(GOLDEN.glob("*.safetensors"))


def load(path):
    """(tensors as float64/int arrays keyed by name, metadata with params/tolerance parsed)."""
    raw = safetensors.numpy.load_file(str(path))
    with safetensors.safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata() or {})
    for key in ("params", "tolerance"):
        if key in meta:
            meta[key] = json.loads(meta[key])
    return raw, meta


def as_f64(a):
    return np.asarray(a).astype(np.float64)


def mlakit_bin():
    path = os.environ.get("MLAKIT_BIN", str(ROOT / "build" / "mlakit"))
    if not os.path.exists(path):
        pytest.skip(f"mlakit binary not built at {path}")
    return path
