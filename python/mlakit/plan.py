"""Plan once per step, run once per layer: the engine's loop, from Python.

    step = mlakit.plan(mlakit.sparse_mla_prefill, q0, cache, rows, scale=s, v_depth=512)
    for layer in range(num_layers):
        out = step.run(q=q[layer], layer_idx=layer)

plan() takes an operator function and the arguments of one call of the step; the library checks the
step's metadata (row offsets, page tables, cache lengths, indices) and picks the back-end and its
kernels once. run() takes the arguments that change from layer to layer by name (queries, outputs,
layer_idx, another cache or weight of the same shapes); every other argument is the planned one, and
its view is not built again. The metadata must not change between plan() and the last run() (the
library reads the same buffers again; mlakit/plan.hpp); an output not given to plan() is allocated
anew by every run. A tensor resized in place after plan() needs a new plan.
"""
import inspect
import json

from . import _core, ops
from ._errors import raise_refusal
from ._views import view

# Keyword arguments a run may change without a new plan: the layer, the outputs, op 5's packed
# weights (those of the layer's weights).
_PER_RUN = {"layer_idx", "out", "lse", "max_logits", "packed_weights"}


def _is_array(x):
    return hasattr(x, "shape") and hasattr(x, "dtype")


class Plan:
    def __init__(self, operator, *args, **kwargs):
        prepare = getattr(operator, "prepare", None)
        if prepare is None:
            raise TypeError(f"{getattr(operator, '__name__', operator)!r} is not an operator mlakit plans "
                            "(remap_indices_to_rows runs as it is)")
        self._prepare = prepare
        self.op = operator.__name__
        bound = inspect.signature(prepare).bind(*args, **kwargs)
        bound.apply_defaults()
        self._args = dict(bound.arguments)
        self._allocate = {k for k in ("out", "lse", "max_logits") if k in self._args and self._args[k] is None}
        self._memo = {}
        call = self._prepared(self._args, record=True)
        self._handle = _core.PlanHandle()
        raise_refusal(self._handle.plan(call.op, json.dumps(call.params), call.views, call.backend or "automatic",
                                        ops._stream(call.like)))

    def _prepared(self, args, record=False):
        memo = self._memo

        def kept_view(name, x, want=None):
            key = (name, id(x), want)
            hit = memo.get(key)
            if hit is not None and hit[0] is x:
                return hit[1]
            v = view(name, x, want)
            if record:  # only the planned arrays: per-layer arrays come and go
                memo[key] = (x, v)
            return v

        token = ops._VIEW.set(kept_view)
        try:
            return self._prepare(**args)
        finally:
            ops._VIEW.reset(token)

    def run(self, **changes):
        """Runs the plan with `changes` (argument name -> value) over the planned call; returns what
        the operator function returns."""
        args = dict(self._args)
        for k in self._allocate:
            args[k] = None
        for k, v in changes.items():
            if k not in args:
                raise TypeError(f"{self.op}: no argument named {k!r}")
            old = args[k]
            if k not in _PER_RUN and not (_is_array(v) or isinstance(v, ops.PagedKVCache)) and v != old:
                raise TypeError(f"{self.op}: {k} was planned as {old!r}; a different {k} needs a new plan")
            args[k] = v
        call = self._prepared(args)
        raise_refusal(self._handle.run(json.dumps(call.params), call.views, ops._stream(call.like), call.packed))
        return call.result

    @property
    def backend(self):
        return self._handle.backend

    @property
    def implementation(self):
        """e.g. 'cpu avx2 (2 threads)'."""
        return self._handle.implementation

    @property
    def decisions(self):
        """One line per candidate back-end: chosen, or declined and why."""
        return self._handle.decisions

    @property
    def workspace_bytes(self):
        return self._handle.workspace_bytes


def plan(operator, *args, **kwargs):
    """A Plan of `operator` (mlakit.lightning_indexer, ...) for the step of this call's arguments."""
    return Plan(operator, *args, **kwargs)
