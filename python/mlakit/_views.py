"""Arrays as the views mlakit._core takes: (data pointer, dtype name, shape, strides in elements,
on the device). NumPy arrays and torch tensors are read in place, nothing is copied.

NumPy has no bf16 or fp8 dtype of its own: ml_dtypes' bfloat16 and float8_e4m3fn arrays are read
as such, and an argument that expects bf16 or fp8 also takes the raw bits as uint16 / uint8 (the
way engines store an fp8 cache); one that expects u32 also takes int32 (engines' offsets and page
tables), whose negative values the library then refuses.
"""
import numpy as np

try:
    import ml_dtypes

    _ML = {np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(ml_dtypes.float8_e4m3fn): "f8e4m3"}
    if hasattr(ml_dtypes, "float8_e8m0fnu"):  # power-of-two scale bytes (FlashMLA's MODEL1 cache)
        _ML[np.dtype(ml_dtypes.float8_e8m0fnu)] = "e8m0"
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    ml_dtypes = None
    _ML = {}

_NUMPY = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
          np.dtype(np.int32): "i32", np.dtype(np.uint32): "u32", np.dtype(np.uint8): "u8",
          np.dtype(np.uint16): "u16"}
_NUMPY.update(_ML)

# What a declared dtype accepts besides itself.
_BITS = {"bf16": ("u16",), "f8e4m3": ("u8",), "u32": ("i32",), "f16": ("u16",), "e8m0": ("u8",)}


def _torch_dtypes():
    import torch

    names = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.int32: "i32", torch.uint8: "u8"}
    for attr, name in (("float8_e4m3fn", "f8e4m3"), ("float8_e8m0fnu", "e8m0"), ("uint32", "u32"), ("uint16", "u16")):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = name
    return names


_TORCH = None


def dtype_of(x):
    """mlakit's dtype name of a NumPy array or torch tensor ('u16' for raw 16-bit words)."""
    global _TORCH
    if isinstance(x, np.ndarray):
        name = _NUMPY.get(x.dtype)
        if name is None:
            raise TypeError(f"mlakit does not read {x.dtype} arrays")
        return name
    if type(x).__module__.startswith("torch"):
        if _TORCH is None:
            _TORCH = _torch_dtypes()
        name = _TORCH.get(x.dtype)
        if name is None:
            raise TypeError(f"mlakit does not read {x.dtype} tensors")
        return name
    raise TypeError(f"expected a NumPy array or a torch tensor, got {type(x).__name__}")


def view(name, x, want=None):
    """The view of array `x` for argument `name`; `want` is the dtype the argument expects, when
    the array's own dtype may be raw bits of it."""
    dt = dtype_of(x)
    if want is not None and dt != want:
        if dt in _BITS.get(want, ()):
            dt = want
        else:
            raise TypeError(f"{name}: expected {want}" +
                            (f" (or {' / '.join(_BITS[want])} holding its bits)" if want in _BITS else "") +
                            f", got {dt}")
    if dt == "u16":
        raise TypeError(f"{name}: uint16 arrays are read only as the bits of a bf16 or f16 argument")
    shape = list(x.shape)
    if isinstance(x, np.ndarray):
        if x.flags.c_contiguous:  # the strides NumPy reports for empty or size-1 dimensions vary
            strides = _row_major(shape)
        else:
            item = x.itemsize
            strides = []
            for s in x.strides:
                if s % item:
                    raise ValueError(f"{name}: strides {x.strides} are not whole elements")
                strides.append(s // item)
        return (name, (x.__array_interface__["data"][0], dt, shape, strides, False))
    strides = _row_major(shape) if x.is_contiguous() else list(x.stride())
    ptr = x.data_ptr()
    if ptr == 0 and x.numel() == 0:
        # torch gives empty tensors no storage; mlakit reads a null pointer as an absent optional
        # argument. Nothing is read or written through an empty tensor's pointer.
        ptr = _EMPTY.__array_interface__["data"][0]
    return (name, (ptr, dt, shape, strides, x.device.type == "cuda"))


_EMPTY = np.zeros(64, dtype=np.uint8)


def _row_major(shape):
    strides, s = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = s
        s *= shape[i]  # as the library counts: dimensions outside an empty one get stride 0
    return strides


def writable(name, x):
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise ValueError(f"{name}: the array is read-only, and mlakit writes it")
