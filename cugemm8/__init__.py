"""cugemm8: FP8 (e4m3) GEMMs with DeepSeek-V3 fine-grained scaling for NVIDIA Hopper, for CuPy.

    d = cugemm8.matmul(a, a_scale, b, b_scale)      # D[M, N] = (A*sa) @ (B*sb)^T in bfloat16
    d, d_scale = cugemm8.matmul(a, a_scale, b, b_scale, out_dtype="float8_e4m3")  # e4m3, 1x128 scales
    cugemm8.wgrad_matmul(a, a_scale, b, b_scale, out)  # out += A·Bᵀ in FP32, 1x128 scales on both (training)

FP8 payloads are e4m3 bits: uint8 arrays, or float8_e4m3fn arrays from torch or JAX (taken through DLPack).
See README.md for layouts and rules; ``cugemm8.jax`` has the GEMMs for JAX under ``jax.jit``.
"""
import logging

from ._version import __version__

logging.getLogger(__name__).addHandler(logging.NullHandler())   # the application decides what is shown

try:
    import cupy  # noqa: F401
    import cuda.bindings  # noqa: F401
except ImportError as exc:  # installed without a CUDA extra
    raise ImportError(f"cugemm8 needs CuPy and cuda-python for your CUDA version ({exc}); install "
                      "'cugemm8[cu13]' (driver for CUDA 13) or 'cugemm8[cu12]' (driver for CUDA 12.8+)") from exc

from .api import (empty_scale, get_m_alignment_for_contiguous_layout, m_grouped_matmul_contiguous,
                  m_grouped_matmul_masked, matmul)
from .errors import CaptureError, CompileError, CudaError
from .layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size
from .precompile import precompile
from .quantize import per_block_cast_to_fp8, per_token_cast_to_fp8
from .reference import calc_diff
from .transpose import transpose_fp8
from .wgrad import get_k_alignment_for_k_grouped_layout, k_grouped_wgrad_matmul, wgrad_matmul
from .runtime import get_num_sms, get_pdl, set_num_sms, set_pdl

__all__ = [
    "matmul", "m_grouped_matmul_contiguous", "m_grouped_matmul_masked", "wgrad_matmul", "k_grouped_wgrad_matmul",
    "get_k_alignment_for_k_grouped_layout",
    "get_m_alignment_for_contiguous_layout", "get_col_major_tma_aligned_tensor", "get_tma_aligned_size", "empty_scale",
    "per_token_cast_to_fp8", "per_block_cast_to_fp8", "transpose_fp8", "calc_diff", "get_num_sms", "set_num_sms", "set_pdl",
    "get_pdl", "precompile", "CaptureError", "CompileError", "CudaError",
]
