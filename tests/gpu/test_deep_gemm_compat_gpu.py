"""GPU tier: cugemm8.deep_gemm gives the same bits as cugemm8's own calls, with CuPy arrays and with torch
tensors (uint8 or float8 payloads, a torch bf16 out, on a torch side stream passed as stream=, as
docs/migration.md says)."""
import cupy
import pytest

from hopper import requires_hopper
from problems import make_contiguous, make_dense, make_masked, poisoned

import cugemm8
from cugemm8 import deep_gemm

pytestmark = [pytest.mark.gpu, requires_hopper]


def same(x, y) -> bool:
    return bool((x.view(cupy.uint16) == y.view(cupy.uint16)).all())


def test_three_gemms_match_the_native_calls():
    x, w, a, sa, b, sb = make_dense(130, 256, 512, seed=21)
    out = poisoned((130, 256))
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
    assert same(out, cugemm8.matmul(a, sa, b, sb))

    x, w, a, sa, b, sb, idx = make_contiguous([70, 0, 200], 256, 384, seed=22)
    out = poisoned((idx.size, 256))
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sa), (b, sb), out, idx)
    assert same(out, cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, idx))

    x, w, a, sa, b, sb = make_masked(3, 64, 256, 384, seed=23)
    masked_m = cupy.asarray([64, 5, 0], cupy.int32)
    out, ref = poisoned((3, 64, 256)), poisoned((3, 64, 256))
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sa), (b, sb), out, masked_m, 16)
    cugemm8.m_grouped_matmul_masked(a, sa, b, sb, masked_m, 16, out=ref)
    assert same(out, ref)


@pytest.mark.parametrize("payload", ["uint8", "float8_e4m3fn"])
def test_torch_tensors_on_a_non_blocking_side_stream(payload):
    torch = pytest.importorskip("torch")
    x, w, a, sa, b, sb = make_dense(64, 512, 1024, seed=24)
    ref = cugemm8.matmul(a, sa, b, sb)
    cupy.cuda.Device().synchronize()
    ta, tb = (torch.from_dlpack(v).view(getattr(torch, payload)) for v in (a, b))
    tsa, tsb = torch.from_dlpack(sa), torch.from_dlpack(sb)
    owner = cupy.cuda.Stream(non_blocking=True)    # no implicit ordering with the legacy default stream
    side = torch.cuda.ExternalStream(owner.ptr)
    with torch.cuda.stream(side):
        out = torch.empty((64, 512), dtype=torch.bfloat16, device="cuda")
        torch.cuda._sleep(50_000_000)              # keeps the side stream busy: only its order makes this right
        deep_gemm.gemm_fp8_fp8_bf16_nt((ta, tsa), (tb, tsb), out, stream=torch.cuda.current_stream())
        got = out.float() * 1                      # consumed on the side stream, as DeepGEMM's users do
    side.synchronize()
    assert torch.equal(got, torch.from_dlpack(ref).float())
