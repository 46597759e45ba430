"""CPU tier: cugemm8.deep_gemm, DeepGEMM's early names over cugemm8: each GEMM unpacks its (payload, scales)
pairs and forwards to the matching cugemm8 function with out= and the stream; bad pairs and a missing out
are refused by name."""
import pytest

import cugemm8
from cugemm8 import api
from cugemm8 import deep_gemm as dg


@pytest.fixture
def calls(monkeypatch):
    seen = []
    for fn in ("matmul", "m_grouped_matmul_contiguous", "m_grouped_matmul_masked"):
        monkeypatch.setattr(api, fn, lambda *args, _fn=fn, **kwargs: seen.append((_fn, args, kwargs)))
    return seen


class Out:
    """An `out` that names its stream through the CUDA array interface, as a torch tensor does."""
    def __init__(self, stream):
        self.__cuda_array_interface__ = {"shape": (1, 8), "typestr": "<V2", "data": (0, False), "version": 3,
                                         "stream": stream}


def test_stream_from_a_scale(calls):
    """torch's bf16 `out` has no array interface; its float32 scales name torch's current stream."""
    sa = Out(0x55)
    dg.gemm_fp8_fp8_bf16_nt(("a", sa), ("b", "sb"), "bf16 out")
    assert calls == [("matmul", ("a", sa, "b", "sb"), {"out": "bf16 out", "stream": 0x55})]


def test_forwarding(calls):
    out = Out(0x77)
    assert dg.gemm_fp8_fp8_bf16_nt(("a", "sa"), ["b", "sb"], out) is None
    dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(("a", "sa"), ("b", "sb"), out, "idx", stream=5)
    dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(("a", "sa"), ("b", "sb"), "plain", "mm", 32)
    assert calls == [
        ("matmul", ("a", "sa", "b", "sb"), {"out": out, "stream": 0x77}),       # out's stream, as torch's
        ("m_grouped_matmul_contiguous", ("a", "sa", "b", "sb", "idx"), {"out": out, "stream": 5}),
        ("m_grouped_matmul_masked", ("a", "sa", "b", "sb", "mm", 32), {"out": "plain", "stream": None}),
    ]


@pytest.mark.parametrize("stream, used", [(1, 1), (2, 2), (None, None), (True, None)])
def test_out_stream(calls, stream, used):
    """The interface's 1 and 2 are the legacy and per-thread default streams' handles; None names none."""
    dg.gemm_fp8_fp8_bf16_nt(("a", "sa"), ("b", "sb"), Out(stream))
    assert calls[0][2]["stream"] == used


@pytest.mark.parametrize("lhs, shown", [("a", "str"), (("a",), "a tuple of length 1"),
                                        (("a", "b", "c"), "a tuple of length 3"), (None, "NoneType")])
def test_bad_pairs(calls, lhs, shown):
    with pytest.raises(TypeError) as caught:
        dg.gemm_fp8_fp8_bf16_nt(lhs, ("b", "sb"), "out")
    assert str(caught.value).startswith("lhs must be a pair") and shown in str(caught.value)
    with pytest.raises(TypeError, match="^rhs must be a pair"):
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(("a", "sa"), lhs, "out", "mm", 8)
    assert not calls


def test_out_required(calls):
    with pytest.raises(TypeError, match="^out must be"):
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(("a", "sa"), ("b", "sb"), None, "idx")


def test_helpers():
    assert dg.ceil_div(7168, 128) == 56 and dg.ceil_div(1, 128) == 1 and dg.ceil_div(0, 128) == 0
    assert dg.get_m_alignment_for_contiguous_layout() == cugemm8.get_m_alignment_for_contiguous_layout()
    assert dg.get_col_major_tma_aligned_tensor is cugemm8.get_col_major_tma_aligned_tensor
    assert dg.get_tma_aligned_size(5, 4) == 8
    assert {"set_num_sms", "get_num_sms"} <= set(dg.__all__)
