"""The exceptions cugemm8 raises besides TypeError and ValueError (bad arguments), in one place."""
from __future__ import annotations


class CaptureError(RuntimeError):
    """A call would allocate (its result, or a converted a_scale) while its stream captures a CUDA graph."""


class CompileError(RuntimeError):
    """NVRTC rejected a source; the message holds NVRTC's log."""


class CudaError(RuntimeError):
    """A CUDA driver call failed, or no usable GPU is present (the message says why)."""
