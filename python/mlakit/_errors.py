"""The library's refusals as Python exceptions: each carries the operator and the field (argument,
key or element) the library named, and the library's whole message."""


class MlakitError(Exception):
    def __init__(self, message, op="", field=""):
        super().__init__(message)
        self.op = op
        self.field = field


class InvalidArgument(MlakitError, ValueError):
    """The call is malformed: shapes, dtypes, offsets, page tables, aliasing, params."""


class Unsupported(MlakitError, NotImplementedError):
    """Valid, but the back-end asked for does not implement it (the message says why)."""


class BackendUnavailable(MlakitError, RuntimeError):
    """The back-end is not present here (no GPU, not built)."""


class InternalError(MlakitError, RuntimeError):
    """A failure inside a back-end (a CUDA error, an allocation failure)."""


_BY_CODE = {"invalid_argument": InvalidArgument, "unsupported": Unsupported, "unavailable": BackendUnavailable,
            "internal": InternalError}


def raise_refusal(refusal):
    if refusal is None:
        return
    code, op, field, message = refusal
    raise _BY_CODE.get(code, MlakitError)(message, op, field)
