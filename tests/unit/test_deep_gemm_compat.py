"""CPU tier: cugemm8.deep_gemm, DeepGEMM's early names over cugemm8: each GEMM unpacks its (payload, scales)
pairs and forwards to the matching cugemm8 function with out= and stream=; bad pairs and a missing out are
refused by name."""
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


def test_forwarding(calls):
    assert dg.gemm_fp8_fp8_bf16_nt(("a", "sa"), ["b", "sb"], "out") is None
    dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(("a", "sa"), ("b", "sb"), "out", "idx", stream=5)
    dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(("a", "sa"), ("b", "sb"), "out", "mm", 32)
    assert calls == [
        ("matmul", ("a", "sa", "b", "sb"), {"out": "out", "stream": None}),
        ("m_grouped_matmul_contiguous", ("a", "sa", "b", "sb", "idx"), {"out": "out", "stream": 5}),
        ("m_grouped_matmul_masked", ("a", "sa", "b", "sb", "mm", 32), {"out": "out", "stream": None}),
    ]


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


def test_error_names_the_expectation(calls):
    with pytest.raises(TypeError) as caught:
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous("a", ("b", "sb"), "out", "idx")
    assert str(caught.value) == "lhs must be a pair (a [sum M, K], a_scale [sum M, ceil(K/128)]); got str"
    with pytest.raises(TypeError) as caught:
        dg.gemm_fp8_fp8_bf16_nt(["a", "sa"], ("b", "sb", "x"), "out")
    assert str(caught.value) == ("rhs must be a pair (b [N, K], b_scale [ceil(N/128), ceil(K/128)]); "
                                 "got a tuple of length 3")
    assert not calls


def test_list_pairs_and_keyword_arguments(calls):
    """DeepGEMM unpacks any 2-sequence; its arguments may also be given by name."""
    dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs=["a", "sa"], rhs=["b", "sb"], out="out", masked_m="mm", expected_m=4)
    assert calls == [("m_grouped_matmul_masked", ("a", "sa", "b", "sb", "mm", 4), {"out": "out", "stream": None})]


def test_helpers():
    assert dg.ceil_div(7168, 128) == 56 and dg.ceil_div(1, 128) == 1 and dg.ceil_div(0, 128) == 0
    assert dg.get_m_alignment_for_contiguous_layout() == cugemm8.get_m_alignment_for_contiguous_layout() == 64
    assert dg.get_col_major_tma_aligned_tensor is cugemm8.get_col_major_tma_aligned_tensor
    assert dg.set_num_sms is cugemm8.set_num_sms and dg.get_num_sms is cugemm8.get_num_sms
    assert dg.get_tma_aligned_size(5, 4) == 8


def test_names_and_docs():
    """Every exported name exists and docs/migration.md mentions it; the names left out are documented."""
    import pathlib

    doc = (pathlib.Path(__file__).parents[2] / "docs" / "migration.md").read_text()
    for name in dg.__all__:
        assert callable(getattr(dg, name)) and f"`{name}" in doc, name
    for name in ("wgrad_gemm_fp8_fp8_fp32_nt", "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt", "calc_diff", "bench",
                 "bench_kineto"):
        assert not hasattr(dg, name) and name in dg.__doc__ and name in doc, name
