"""Optional peers timed beside cugemm8 on the same FP8 bytes: cuBLASLt through torch (blockwise
`F.scaled_mm`, per-tensor `torch._scaled_mm`) and DeepGEMM (the API of its public repository at 8dfa329).
Neither is a dependency: torch and deep_gemm are imported inside functions, and a missing one only
removes its columns (with the reason in the JSON)."""
from __future__ import annotations

import importlib
import os


def _scaling_type(F):
    for owner, name in ((F, "ScalingType"), (F, "_ScalingType")):
        if hasattr(owner, name):
            return getattr(owner, name)
    raise AttributeError("torch.nn.functional has no ScalingType (needs torch >= 2.10)")


def load_peers(stream_ptr: int):
    """(TorchPeers, note): None and the reason when torch or its CUDA is unavailable."""
    try:
        import torch
    except Exception as exc:
        return None, f"torch not importable: {type(exc).__name__}: {exc}"
    try:
        if not torch.cuda.is_available():
            return None, "torch sees no CUDA device"
        return TorchPeers(torch, stream_ptr), f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    except Exception as exc:
        return None, f"torch CUDA setup failed: {type(exc).__name__}: {exc}"


class TorchPeers:
    """cuBLASLt through torch on the benchmark's own stream, on cugemm8's FP8 bytes (zero-copy DLPack)."""

    def __init__(self, torch, stream_ptr: int):
        self.torch = torch
        self.ext = torch.cuda.ExternalStream(stream_ptr)
        with torch.cuda.stream(self.ext):
            self.one = torch.ones((), device="cuda", dtype=torch.float32)

    def _fp8(self, x):
        return self.torch.from_dlpack(x).view(self.torch.float8_e4m3fn)

    def _on_stream(self, fn):
        def run():
            with self.torch.cuda.stream(self.ext):
                return fn()
        return run

    def blockwise(self, a, a_scale, b, b_scale):
        """F.scaled_mm, BlockWise1x128 x BlockWise128x128: A scales M-major (M, kb), B scales (kb4, nb) with K
        padded to a multiple of 4 blocks."""
        torch = self.torch
        F = torch.nn.functional
        st = _scaling_type(F)
        with torch.cuda.stream(self.ext):
            ta, tb = self._fp8(a), self._fp8(b)
            sa = torch.from_dlpack(a_scale).t().contiguous().t()            # (M, kb), strides (1, M)
            sb = torch.from_dlpack(b_scale)                                  # (nb, kb) row-major
            sb = F.pad(sb, (0, -sb.shape[1] % 4)).t()                        # (round_up(kb, 4), nb), strides (1, kb4)
        return self._on_stream(lambda: F.scaled_mm(ta, tb.t(), sa, st.BlockWise1x128, sb, st.BlockWise128x128,
                                                   output_dtype=torch.bfloat16))

    def per_tensor(self, a, b):
        """torch._scaled_mm with unit scalar scales: FP8 without fine-grained scaling (the ceiling)."""
        torch = self.torch
        with torch.cuda.stream(self.ext):
            ta, tb = self._fp8(a), self._fp8(b)
        return self._on_stream(lambda: torch._scaled_mm(ta, tb.t(), scale_a=self.one, scale_b=self.one,
                                                        out_dtype=torch.bfloat16))

    def to_cupy_f32(self, cp, y):
        with self.torch.cuda.stream(self.ext):
            return cp.from_dlpack(y.float())


class DeepGemmPeer:
    """DeepGEMM's FP8 GEMMs (the 8dfa329 API) on the benchmark's stream, on cugemm8's FP8 bytes. Scales
    are brought to DeepGEMM's TMA-aligned layout once, outside the timed call (as cugemm8's are), so
    that its own layout check finds nothing to do when timed. Each method returns (call, output)."""

    FUNCTIONS = ("gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
                 "m_grouped_gemm_fp8_fp8_bf16_nt_masked", "get_col_major_tma_aligned_tensor")

    def __init__(self, dg, peers: TorchPeers):
        self.dg, self.peers, self.torch = dg, peers, peers.torch

    def _operands(self, a, a_scale, b, b_scale):
        torch, p = self.torch, self.peers
        with torch.cuda.stream(p.ext):
            sa = self.dg.get_col_major_tma_aligned_tensor(torch.from_dlpack(a_scale).contiguous())
            return (p._fp8(a), sa), (p._fp8(b), torch.from_dlpack(b_scale).contiguous())

    def _out(self, shape):
        with self.torch.cuda.stream(self.peers.ext):
            return self.torch.empty(shape, device="cuda", dtype=self.torch.bfloat16)

    def dense(self, a, a_scale, b, b_scale):
        lhs, rhs = self._operands(a, a_scale, b, b_scale)
        out = self._out((a.shape[0], b.shape[0]))
        return self.peers._on_stream(lambda: self.dg.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)), out

    def contiguous(self, a, a_scale, b, b_scale, m_indices):
        lhs, rhs = self._operands(a, a_scale, b, b_scale)
        idx = self.torch.from_dlpack(m_indices)
        out = self._out((a.shape[0], b.shape[1]))
        return self.peers._on_stream(
            lambda: self.dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, idx)), out

    def masked(self, a, a_scale, b, b_scale, masked_m, expected_m: int):
        lhs, rhs = self._operands(a, a_scale, b, b_scale)
        mm = self.torch.from_dlpack(masked_m)
        out = self._out((a.shape[0], a.shape[1], b.shape[1]))
        return self.peers._on_stream(
            lambda: self.dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, mm, expected_m)), out

    def wgrad(self, a, a_scale, b, b_scale, out):
        """wgrad_gemm_fp8_fp8_fp32_nt: out += A·Bᵀ, both scales 1x128 (given M-major TMA-aligned: taken as is)."""
        torch, p = self.torch, self.peers
        with torch.cuda.stream(p.ext):
            lhs = (p._fp8(a), torch.from_dlpack(a_scale))
            rhs = (p._fp8(b), torch.from_dlpack(b_scale))
            d = torch.from_dlpack(out)
        return p._on_stream(lambda: self.dg.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, d)), out

    def k_grouped_wgrad(self, a, a_scale, b, b_scale, sizes: list, out):
        """k_grouped_wgrad_gemm_fp8_fp8_fp32_nt on its own layout, built once from cugemm8's: each group's
        A_g [M, K_g] and B_g [N, K_g] flattened one after another, the scales [sum ceil(K_g/128), M or N] (the
        M-major storage of cugemm8's, as is). A Python loop of launches at 8dfa329."""
        torch, p = self.torch, self.peers
        with torch.cuda.stream(p.ext):
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            offsets = [sum(sizes[:g]) for g in range(len(sizes))]
            flat_a = torch.cat([ta[:, o:o + k].reshape(-1) for o, k in zip(offsets, sizes)]).view(torch.float8_e4m3fn)
            flat_b = torch.cat([tb[:, o:o + k].reshape(-1) for o, k in zip(offsets, sizes)]).view(torch.float8_e4m3fn)
            lhs = (flat_a, torch.from_dlpack(a_scale).t())
            rhs = (flat_b, torch.from_dlpack(b_scale).t())
            d = torch.from_dlpack(out)
        return p._on_stream(lambda: self.dg.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, d, list(sizes))), out


def load_deepgemm(peers):
    """(DeepGemmPeer, note); None and the reason when deep_gemm (or torch, which it needs) is unavailable."""
    if peers is None:
        return None, "needs torch"
    try:
        dg = importlib.import_module("deep_gemm")
    except Exception as exc:
        return None, f"deep_gemm not importable: {type(exc).__name__}: {str(exc)[:200]}"
    missing = [f for f in DeepGemmPeer.FUNCTIONS if not hasattr(dg, f)]
    if missing:
        return None, f"deep_gemm at {getattr(dg, '__file__', '?')} lacks the 8dfa329 API ({', '.join(missing)})"
    return DeepGemmPeer(dg, peers), f"deep_gemm from {os.path.dirname(getattr(dg, '__file__', '?'))}"



def loaded_cublaslt_version() -> int | None:
    """cublasLtGetVersion() of the libcublasLt this process has loaded (torch's), if any."""
    try:
        import ctypes

        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "libcublasLt" in line})
        if not paths:
            return None
        lib = ctypes.CDLL(paths[0])
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        return int(lib.cublasLtGetVersion())
    except Exception:
        return None
