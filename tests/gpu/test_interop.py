"""GPU tier: arrays and streams from torch and JAX (float8_e4m3fn taken directly, DLPack's stream handshake,
torch/CUDA-protocol streams), cugemm8.jax under jax.jit, CUDA-graph capture, and the empty sizes N = 0 and
K = 0. Every result is compared bitwise with the same call on CuPy arrays."""
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # share the GPU with torch and CuPy

import cupy  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from hopper import requires_hopper  # noqa: E402
from problems import check_against_reference, make_contiguous, make_dense, make_masked, poisoned  # noqa: E402

import cugemm8  # noqa: E402

pytestmark = [pytest.mark.gpu, requires_hopper]


def bits(x) -> np.ndarray:
    """Raw bits of a bf16/e4m3 result from CuPy, torch or JAX, on the host."""
    if hasattr(x, "__dlpack__") and not isinstance(x, cupy.ndarray):
        mod = type(x).__module__
        if mod.startswith("torch"):
            import torch

            x = x.view(torch.uint8 if x.element_size() == 1 else torch.int16).cpu().numpy()
        else:  # JAX
            x = np.asarray(x)
    else:
        x = cupy.asnumpy(x)
    return x.view(np.uint8 if x.itemsize == 1 else np.uint16)


# ----------------------------------------------------------------------------- torch
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_float8_operands_and_out(torch):
    m, n, k = 200, 384, 1024
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=3)
    ref = cugemm8.matmul(a, sa, b, sb)
    ta = torch.from_dlpack(a).view(torch.float8_e4m3fn)
    tb = torch.from_dlpack(b).view(torch.float8_e4m3fn)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.current_stream()
    got = cugemm8.matmul(ta, torch.from_dlpack(sa), tb, torch.from_dlpack(sb), out=out, stream=stream)
    assert got is out                      # the caller's torch tensor comes back, written in place
    stream.synchronize()
    assert (bits(out) == bits(ref)).all()
    fresh = cugemm8.matmul(ta, torch.from_dlpack(sa), tb, torch.from_dlpack(sb), stream=stream)
    stream.synchronize()
    assert (bits(torch.from_dlpack(fresh)) == bits(ref)).all()   # a cupy result goes back through DLPack


def test_torch_e4m3_output_chain(torch):
    m, n, k, n2 = 128, 512, 512, 256
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=4)
    _, _, _, _, b2, sb2 = make_dense(8, n2, n, seed=5)
    d, ds = cugemm8.matmul(a, sa, b, sb, out_dtype="float8_e4m3")
    ref = cugemm8.matmul(d, ds, b2, sb2)
    out = torch.empty((m, n), dtype=torch.float8_e4m3fn, device="cuda")
    out_scale = torch.from_dlpack(cugemm8.empty_scale((m, n // 128)))
    td, tds = cugemm8.matmul(torch.from_dlpack(a).view(torch.float8_e4m3fn), torch.from_dlpack(sa),
                             torch.from_dlpack(b), torch.from_dlpack(sb), out=out, out_scale=out_scale,
                             out_dtype="float8_e4m3")
    assert td is out and tds is out_scale
    got = cugemm8.matmul(td, tds, torch.from_dlpack(b2), torch.from_dlpack(sb2))
    cupy.cuda.Device().synchronize()
    assert (bits(got) == bits(ref)).all()


def test_torch_producer_stream_is_honoured(torch):
    """The producer writes A on its own stream after a long spin; the GEMM runs on another stream with no
    host synchronization between them. Only DLPack's handshake orders the two: without it the GEMM reads the
    zeros A held before."""
    m, n, k = 256, 256, 2048
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=6)
    ref = cugemm8.matmul(a, sa, b, sb)
    cupy.cuda.Device().synchronize()
    source = torch.from_dlpack(a).clone()
    ta = torch.zeros((m, k), dtype=torch.uint8, device="cuda")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(200_000_000)     # ~0.1 s of GPU time on the producer's stream
        ta.copy_(source)
        got = cugemm8.matmul(ta, torch.from_dlpack(sa), torch.from_dlpack(b), torch.from_dlpack(sb),
                             stream=consumer)
    consumer.synchronize()
    assert (bits(got) == bits(ref)).all()


def test_stream_kinds(torch):
    m, n, k = 64, 256, 512
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=8)
    ref = cugemm8.matmul(a, sa, b, sb)
    cupy.cuda.Device().synchronize()   # inputs and ref come from the legacy stream; `cs` is not ordered after it
    ts = torch.cuda.Stream()
    cs = cupy.cuda.Stream(non_blocking=True)

    class Protocol:
        def __cuda_stream__(self):
            return (0, cs.ptr)

    for stream in (ts, cs, cs.ptr, Protocol(), ts.cuda_stream):
        got = cugemm8.matmul(a, sa, b, sb, stream=stream)
        cupy.cuda.Device().synchronize()
        assert (bits(got) == bits(ref)).all(), type(stream)


# ----------------------------------------------------------------------------- JAX
@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    import cugemm8.jax  # noqa: F401
    return jax


def _jnp(x, jax, dtype=None):
    y = jax.dlpack.from_dlpack(x)
    return y if dtype is None else jax.lax.bitcast_convert_type(y, dtype)


def test_jax_float8_eager(jax):
    m, n, k = 96, 256, 768
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=9)
    ref = cugemm8.matmul(a, sa, b, sb)
    cupy.cuda.Device().synchronize()
    e4m3 = jax.numpy.float8_e4m3fn
    got = cugemm8.matmul(_jnp(a, jax, e4m3), _jnp(sa, jax), _jnp(b, jax, e4m3), _jnp(sb, jax))
    cupy.cuda.Device().synchronize()
    assert (bits(got) == bits(ref)).all()


def test_jax_jit_dense_with_jnp_ops(jax):
    import cugemm8.jax as cgj

    jnp = jax.numpy
    m, n, k = 300, 512, 1024
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=10)
    ref = cugemm8.matmul(a, sa, b, sb)
    expect = (bits(ref).astype(np.uint32) << 16).view(np.float32) * 2 + 1

    @jax.jit
    def f(a, sa, b, sb):
        return cgj.matmul(a, sa, b, sb).astype(jnp.float32) * 2 + 1

    args = (_jnp(a, jax, jnp.float8_e4m3fn), _jnp(sa, jax), _jnp(b, jax), _jnp(sb, jax))
    for _ in range(3):   # XLA places the buffers anew: the tensor maps must follow them
        got = np.asarray(f(*args))
        assert (got == expect).all()
        args = tuple(jnp.array(v, copy=True) for v in args)


def test_jax_jit_grouped_and_e4m3(jax):
    import cugemm8.jax as cgj

    jnp = jax.numpy
    x, w, a, sa, b, sb, idx = make_contiguous([100, 0, 250], 256, 512, seed=11)
    ref = cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, idx)
    got = jax.jit(cgj.m_grouped_matmul_contiguous)(*(_jnp(v, jax) for v in (a, sa, b, sb, idx)))
    assert (bits(got) == bits(ref)).all()

    x, w, a, sa, b, sb = make_masked(4, 64, 256, 512, seed=12)
    masked_m = cupy.asarray([64, 0, 17, 1], cupy.int32)
    d_ref, s_ref = cugemm8.m_grouped_matmul_masked(a, sa, b, sb, masked_m, 32, out_dtype="float8_e4m3")
    fn = jax.jit(lambda *v: cgj.m_grouped_matmul_masked(*v, 32, out_dtype="float8_e4m3"))
    d, s = fn(*(_jnp(v, jax) for v in (a, sa, b, sb, masked_m)))
    assert d.dtype == jnp.float8_e4m3fn and s.shape == (4, 64, 2)
    for g, rows in enumerate([64, 0, 17, 1]):   # rows past masked_m are unspecified
        assert (bits(d)[g, :rows] == bits(d_ref)[g, :rows]).all()
        assert (np.asarray(s)[g, :rows] == cupy.asnumpy(s_ref)[g, :rows]).all()


def test_jax_bad_input_at_trace_time(jax):
    import cugemm8.jax as cgj

    jnp = jax.numpy
    a = jnp.zeros((64, 100), jnp.uint8)       # K not a multiple of 16
    with pytest.raises(ValueError, match="K must be a multiple of 16"):
        jax.jit(cgj.matmul)(a, jnp.zeros((64, 1), jnp.float32), jnp.zeros((64, 100), jnp.uint8),
                            jnp.zeros((1, 1), jnp.float32))
    with pytest.raises(TypeError, match="a must have dtype"):
        cgj.matmul(jnp.zeros((64, 128), jnp.float8_e5m2), jnp.zeros((64, 1), jnp.float32),
                   jnp.zeros((64, 128), jnp.uint8), jnp.zeros((1, 1), jnp.float32))


# ----------------------------------------------------------------------------- CUDA graphs
def test_cuda_graph_capture_and_replay():
    m, n, k = 64, 2112, 7168
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=13)
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)    # once, before the capture
    out = poisoned((m, n))
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()   # the inputs and the poison come from the legacy stream: no order with `stream`
    cugemm8.matmul(a, sa, b, sb, out=out, stream=stream)  # warm-up: compile and load outside the capture
    stream.synchronize()
    ref = out.copy()
    out[...] = 0
    cupy.cuda.Device().synchronize()
    stream.begin_capture()
    try:
        cugemm8.matmul(a, sa, b, sb, out=out, stream=stream)
    finally:
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    assert (out.view(cupy.uint16) == ref.view(cupy.uint16)).all()
    check_against_reference(out, a, sa, b, sb, x, w)


def test_torch_cuda_graph(torch):
    """The README's torch recipe: warm up, aligned a_scale, out=, capture with torch.cuda.graph."""
    m, n, k = 64, 512, 1024
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=15)
    ref = cugemm8.matmul(a, sa, b, sb)
    cupy.cuda.Device().synchronize()
    ta, tb = (torch.from_dlpack(v).view(torch.float8_e4m3fn) for v in (a, b))
    tsa = torch.from_dlpack(cugemm8.get_col_major_tma_aligned_tensor(sa))
    tsb = torch.from_dlpack(sb)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        cugemm8.matmul(ta, tsa, tb, tsb, out=out, stream=side)     # warm-up outside the capture
    torch.cuda.synchronize()
    out.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cugemm8.matmul(ta, tsa, tb, tsb, out=out, stream=torch.cuda.current_stream())
    graph.replay()
    torch.cuda.synchronize()
    assert (bits(out) == bits(ref)).all()


@pytest.mark.parametrize("what", ["out", "a_scale"])
def test_cuda_graph_refuses_allocation(what):
    m, n, k = 64, 256, 512
    x, w, a, sa, b, sb = make_dense(m, n, k, seed=14)
    aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = cupy.empty((m, n), ml_dtypes.bfloat16)
    cupy.cuda.Device().synchronize()
    kwargs = {"out": None, "a_scale": aligned} if what == "out" else {"out": out, "a_scale": sa}
    cugemm8.matmul(a, kwargs["a_scale"], b, sb, out=kwargs["out"], stream=stream)   # warm-up
    stream.synchronize()
    stream.begin_capture()
    try:
        with pytest.raises(cugemm8.CaptureError, match="captures a CUDA graph"):
            cugemm8.matmul(a, kwargs["a_scale"], b, sb, out=kwargs["out"], stream=stream)
    finally:
        stream.end_capture()


# ----------------------------------------------------------------------------- empty sizes
def test_n_zero_and_k_zero():
    a = cupy.zeros((64, 256), cupy.uint8)
    d = cugemm8.matmul(a, cupy.zeros((64, 2), cupy.float32), cupy.zeros((0, 256), cupy.uint8),
                       cupy.zeros((0, 2), cupy.float32))
    assert d.shape == (64, 0) and d.dtype == ml_dtypes.bfloat16
    out = poisoned((64, 48))
    d = cugemm8.matmul(cupy.zeros((64, 0), cupy.uint8), cupy.zeros((64, 0), cupy.float32),
                       cupy.zeros((48, 0), cupy.uint8), cupy.zeros((1, 0), cupy.float32), out=out)
    assert d is out and not out.view(cupy.uint16).any()
    d, s = cugemm8.matmul(cupy.zeros((5, 0), cupy.uint8), cupy.zeros((5, 0), cupy.float32),
                          cupy.zeros((144, 0), cupy.uint8), cupy.zeros((2, 0), cupy.float32),
                          out_dtype="float8_e4m3", scale_format="ue8m0")
    floor = cugemm8.quantize.quantize_scale(np.float32(cugemm8.quantize.AMAX_FLOOR), "ue8m0")[0]
    assert not d.any() and (cupy.asnumpy(s) == floor).all() and s.shape == (5, 2)


def test_k_zero_masked_leaves_rows_past_masked_m():
    groups, max_m, n = 3, 40, 64
    out = poisoned((groups, max_m, n))
    masked_m = cupy.asarray([40, 0, 7], cupy.int32)
    cugemm8.m_grouped_matmul_masked(cupy.zeros((groups, max_m, 0), cupy.uint8),
                                    cupy.zeros((groups, max_m, 0), cupy.float32),
                                    cupy.zeros((groups, n, 0), cupy.uint8), cupy.zeros((groups, 1, 0), cupy.float32),
                                    masked_m, 8, out=out)
    host = cupy.asnumpy(out.view(cupy.uint16))
    for g, rows in enumerate([40, 0, 7]):
        assert not host[g, :rows].any() and (host[g, rows:] == poisoned((1,)).view(cupy.uint16).get()[0]).all()
