"""The benchmark's GPU environment: CuPy, cugemm8, one stream, the protocol's timer, the inputs
(random normal, quantized by cugemm8's own quantizers) and the answer check (calc_diff on the GPU)."""
from __future__ import annotations

import dataclasses

from . import library
from .peers import load_deepgemm, load_peers
from .protocol import CudaDevice, Timer
from .shapes import ANCHOR_GPU, SEED

DIFF_LIMIT = 1e-3               # calc_diff against the unquantized product
DIFF_CHUNK = 1 << 24            # elements per float64 chunk in the GPU calc_diff


class Env:
    """CuPy, cugemm8, the benchmark stream, the protocol's timer and (optionally) the peers."""

    def __init__(self, args):
        import cupy as cp

        import cugemm8

        self.cp, self.cg, self.lib = cp, cugemm8, library.current()
        self.stream = cp.cuda.Stream(non_blocking=False)
        self.timer = Timer(CudaDevice(self.stream))
        self.num_sms = cugemm8.get_num_sms()
        name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
        self.is_anchor_gpu = (name.decode() if isinstance(name, bytes) else str(name)) == ANCHOR_GPU
        self.rng = cp.random.default_rng(SEED)
        self.peers, self.peers_note = (None, "disabled (--no-peers)") if args.no_peers else load_peers(self.stream.ptr)
        self.deepgemm, self.deepgemm_note = load_deepgemm(self.peers)

    def flush(self) -> None:
        self.timer.flush()

    def randn(self, shape):
        return self.rng.standard_normal(shape, dtype=self.cp.float32)

    def sync(self) -> None:
        self.stream.synchronize()

    def free(self) -> None:
        self.sync()
        self.cp.get_default_memory_pool().free_all_blocks()
        if self.peers is not None:
            self.peers.torch.cuda.empty_cache()

    def plan(self, layout: str, m: int, n: int, k: int, groups: int) -> dict:
        """The configuration cugemm8's heuristic picks (recorded per row)."""
        try:
            small = self.lib.small_m_choice(layout, m, n, k, self.num_sms)
            if small is not None:
                return {"config": {"kernel": "small_m", **dataclasses.asdict(small)}, "grid": small.grid,
                        "num_tiles": -(-n // small.rows)}
            plan = self.lib.choose(layout, m, n, k, groups, self.num_sms)
            return {"config": dataclasses.asdict(plan.config), "grid": plan.grid, "num_tiles": plan.num_tiles}
        except Exception as exc:  # record, don't die: the heuristic changes under the tools
            return {"config": None, "config_error": f"{type(exc).__name__}: {exc}"}


def bf16_to_f32(cp, x):
    """Exact bfloat16 -> float32 by bit shifting (independent of CuPy's bfloat16 support)."""
    return (x.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32)


def poison_bf16(cp, x) -> None:
    x.view(cp.uint16).fill(0xFFFF)  # NaN: any element the kernel leaves unwritten fails the check


def calc_diff_gpu(cp, pairs) -> float:
    """1 - 2*sum(x*y)/sum(x^2+y^2) in float64 over all (x, y) pairs (cugemm8.reference.calc_diff, on GPU)."""
    xy = sq = 0.0
    for x, y in pairs:
        x, y = x.reshape(-1), y.reshape(-1)
        for i in range(0, x.size, DIFF_CHUNK):
            xs, ys = x[i:i + DIFF_CHUNK].astype(cp.float64), y[i:i + DIFF_CHUNK].astype(cp.float64)
            xy += float((xs * ys).sum())
            sq += float((xs * xs + ys * ys).sum())
    return 1.0 - 2.0 * xy / sq if sq else float("nan")


def quantize_a(cg, x):
    """(q, row-major scale, pre-aligned scale, layout name) for activations [..., K]."""
    lead, k = x.shape[:-1], x.shape[-1]
    q, s = cg.per_token_cast_to_fp8(x.reshape(-1, k))
    q, s = q.reshape(*lead, k), s.reshape(*lead, s.shape[-1])
    try:
        return q, s, cg.get_col_major_tma_aligned_tensor(s), "tma-aligned"
    except Exception:
        return q, s, s, "row-major (get_col_major_tma_aligned_tensor refused this shape)"


def quantize_b(cg, w):
    """(q, scale) for weights [N, K] or [G, N, K], one group at a time."""
    if w.ndim == 2:
        return cg.per_block_cast_to_fp8(w)
    import cupy as cp

    parts = [cg.per_block_cast_to_fp8(w[g]) for g in range(w.shape[0])]
    return cp.stack([p[0] for p in parts]), cp.stack([p[1] for p in parts])
