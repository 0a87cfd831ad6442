"""Golden files from Python: the same reader, runner, tolerances and comparison as `mlakit run` and
`mlakit check` (docs/golden-format.md).

    import mlakit.golden as golden
    g = golden.load("data/golden/lightning_indexer.default.s1.safetensors")
    for r in golden.check(g.path, backend="cpu"):
        print(r.output, r.passed, r.description)
    outs = golden.run(g.path, backend="reference")     # {"out.output_indices": array}
    golden.write("my_case.safetensors", "sparse_mla_prefill", params, inputs)  # the reference's outputs
"""
import json
from dataclasses import dataclass, field

import numpy as np

from . import _core
from ._views import view
from .ops import _NP


@dataclass
class Golden:
    path: str
    op: str
    params: dict
    tolerance: dict
    metadata: dict
    tensors: dict = field(default_factory=dict)  # name -> NumPy array (bf16 / fp8 as ml_dtypes)

    @property
    def inputs(self):
        return {k: v for k, v in self.tensors.items() if not k.startswith("out.")}

    @property
    def outputs(self):
        return {k: v for k, v in self.tensors.items() if k.startswith("out.")}


@dataclass
class Result:
    output: str
    kind: str
    passed: bool
    mismatches: int
    max_abs_err: float
    max_rel_err: float
    description: str


def _arrays(owned):
    return {name: np.frombuffer(data, dtype=_NP[dt]).reshape(shape).copy() for name, dt, shape, data in owned}


def load(path):
    """A golden file's operator, params, tolerance, metadata and tensors (validated as `mlakit check` does)."""
    op, params, tolerance, metadata, tensors = _core.golden_load(str(path))
    return Golden(str(path), op, json.loads(params), json.loads(tolerance), dict(metadata), _arrays(tensors))


def check(path, backend="cpu", candidate=None):
    """Re-runs the file's inputs on `backend` (or reads the out.* of the file `candidate`, e.g. what a
    GPU kernel under test wrote) and compares with the file's outputs by its tolerance."""
    rows = _core.golden_check(str(path), backend, None if candidate is None else str(candidate))
    return [Result(*r) for r in rows]


def run(path, backend="cpu"):
    """The outputs of the file's inputs on `backend`: {"out.<name>": array}."""
    return _arrays(_core.golden_run(str(path), backend))


def write(path, op, params, inputs):
    """Writes a golden file of the caller's own inputs (name -> contiguous host array, golden-format
    names) with `params` (golden-format keys): the reference computes the outputs, the operator's
    tolerance is written beside them. A kernel author's exact expected output for a tensor in hand."""
    arrays = {name: np.ascontiguousarray(a) for name, a in inputs.items()}  # alive through the call
    views = [view(name, a) for name, a in arrays.items()]
    _core.golden_write(op, json.dumps(params), views, str(path))
