"""Who sets the cpu back-end's thread count. Under torch, mlakit's TBB threads and torch's OpenMP
threads would each take every hardware thread and oversubscribe the cores, so torch ops follow
torch.get_num_threads(), unless MLAKIT_NUM_THREADS or mlakit.set_num_threads() chose a number."""
import os

from . import _core

_chosen = "MLAKIT_NUM_THREADS" in os.environ
_followed = None


def choose(n):
    global _chosen
    _chosen = True
    _core.set_threads(int(n))


def follow(n):
    global _followed
    if not _chosen and n != _followed:
        _core.set_threads(int(n))
        _followed = n
