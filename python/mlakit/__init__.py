"""mlakit: DeepSeek / MiniMax attention operators over a paged KV cache, on the CPU (every x86-64
ISA level, picked at run time) and on NVIDIA GPUs.

    import mlakit
    print(mlakit.info())
    idx = mlakit.lightning_indexer(q, q_s, offsets, cache, top_k=2048)

Operators take NumPy arrays (bf16 / fp8 as ml_dtypes arrays or their raw uint16 / uint8 bits) or
torch tensors, read in place; outputs are allocated when `out` is None, else written into the
caller's arrays; operators that update an argument in place say so. Names and defaults follow the
operator descriptors and the golden-format params keys (docs/). A refusal raises InvalidArgument,
Unsupported or BackendUnavailable, naming the operator and the field, and writes nothing.
`mlakit.plan(op, ...)` plans a step's call once for runs layer by layer.
`mlakit.golden` reads, checks and writes golden files; `import mlakit.torch` registers the
operators as torch ops (torch.ops.mlakit.*).
"""
from . import _core, _threads
from ._errors import BackendUnavailable, InternalError, InvalidArgument, MlakitError, Unsupported
from .ops import (PackedWeights, PagedKVCache, fused_qkv_paged, lightning_indexer, mla_prefill_fp8,
                  msa_block_indexer, pack_weights, remap_indices_to_rows, sparse_mla_prefill)
from .engine_layouts import flashmla_sparse_cache, indexer_cache
from .plan import Plan, plan

__version__ = _core.info()["version"]


def info():
    """Version, back-ends (available, why not), CPU model and features, ISA levels, threads, kernels."""
    return _core.info()


def backends():
    """The back-ends usable here, e.g. ['reference', 'cpu']."""
    return [name for name, (ok, _) in _core.info()["backends"].items() if ok]


def set_max_isa(level):
    """Caps the cpu back-end's ISA level ('generic', 'avx2', 'avx512', 'avx512bf16', 'amx')."""
    _core.set_max_isa(level)


def set_num_threads(n):
    """Threads of the cpu back-end; n <= 0: every hardware thread (MLAKIT_NUM_THREADS sets the start).
    Once set, torch ops no longer follow torch.get_num_threads()."""
    _threads.choose(n)


def get_num_threads():
    return _core.threads()


def release_cpu_call_buffers():
    """Frees the buffers the cpu back-end keeps with the calling thread between calls."""
    _core.release_cpu_call_buffers()


__all__ = ["PagedKVCache", "indexer_cache", "flashmla_sparse_cache", "Plan", "plan",
           "lightning_indexer", "remap_indices_to_rows", "msa_block_indexer", "mla_prefill_fp8",
           "sparse_mla_prefill", "fused_qkv_paged", "pack_weights", "PackedWeights", "info", "backends",
           "set_max_isa", "set_num_threads", "get_num_threads", "release_cpu_call_buffers", "MlakitError",
           "InvalidArgument", "Unsupported", "BackendUnavailable", "InternalError"]
