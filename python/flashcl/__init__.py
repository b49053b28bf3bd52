"""flashcl: exact attention (FlashAttention and a naive baseline) on any
OpenCL device, over the C library built into this package.

>>> import numpy as np, flashcl
>>> q, k, v = (np.random.randn(1, 128, 4, 64).astype(np.float32) for _ in range(3))
>>> o = flashcl.attention(q, k, v, causal=True)

numpy inputs are copied to the device and back; pyopencl arrays are used in
place, on their own queue. docs/python.md has the whole interface;
flashcl._attention's documentation the semantics (masks, LSE, GQA).
"""
from ._lib import lib as _c
from ._errors import (BufferTooSmallError, BuildFailedError, CLBlastError, DeviceNotFoundError,
                      Error, InvalidArgumentError, InvalidShapeError, OpenCLError,
                      OutOfMemoryError, UnsupportedError)
from ._context import Context, Device, devices, peaks
from ._attention import (attention, attention_backward, attention_varlen,
                         attention_with_kvcache)
from ._merge import merge_states
from ._model import io_model, plan
from ._bench import Records, bench

__version__: str = _c.fcl_version_string().decode()

__all__ = [
    "attention", "attention_backward", "attention_varlen", "attention_with_kvcache",
    "merge_states", "Context", "Device", "devices", "peaks", "plan", "io_model", "bench",
    "Records", "Error", "InvalidArgumentError", "InvalidShapeError", "BufferTooSmallError",
    "UnsupportedError", "OutOfMemoryError", "DeviceNotFoundError", "BuildFailedError",
    "OpenCLError", "CLBlastError", "__version__",
]
