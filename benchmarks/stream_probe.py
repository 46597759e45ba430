"""The streaming kernels (the quantizers) against copies of the same bytes, timed interleaved by the protocol:

    python -m benchmarks.stream_probe [--sizes 4096x7168,...] [--token-variants 1x4,2x4] [--old-source PATH] [--clean-l2]

For each bf16 input [M, K]: a device-to-device copy moving as many bytes (read + written) as the per-token
quantizer, `per_token_cast_to_fp8` as the library builds it, the per-token kernel rebuilt as each variant BxC
names: B tiles a quad of lanes loads at once, C CTAs resident per SM (CG8_TOKEN_BATCHES, CG8_TOKEN_CTAS: probe-only
macros), optionally an older quantize.cu (its single
`per_token_cast_to_fp8_vec` kernel, launched as that version did), and `per_block_cast_to_fp8` on the same input.
Each line gives the median, TB/s, the fraction of the 1 GiB copy's rate and of the same-size copy's.
`--clean-l2` times everything again after a flush that also reads another 1 GiB (protocol.CleanFlushDevice), so that
the L2 holds clean lines rather than the memset's dirty ones: what the protocol's flush costs a streaming kernel of
that size (NOTES.md v29)."""
from __future__ import annotations

import argparse
import statistics

from .decode import calibrate, same_size_copy
from .env import Env
from .protocol import CleanFlushDevice, Timer

SIZES = ((4096, 7168), (2048, 7168), (4096, 24576), (16384, 7168), (128, 7168))


def _token_variants(env: Env, variants, old_source: str | None) -> dict:
    """name -> callable(x, q, scale, rows, cols, kblocks) launching a per-token kernel."""
    import numpy as np

    from cugemm8 import quantize

    cp = env.cp
    sms = env.num_sms
    out = {}

    def launcher(kernel, per_cta_tiles, ctas_per_sm=4):
        def launch(x, q, s, rows, cols, kb):
            tiles = rows * kb
            grid = min(-(-tiles // per_cta_tiles), ctas_per_sm * sms)
            with env.stream:
                kernel((grid,), (256,), (x, np.int32(2), q, s, np.uint32(rows), np.int32(cols), np.int32(kb),
                                         np.int32(0)))
        return launch

    source = quantize.kernel_source()
    for b, c in variants:
        kern = cp.RawKernel(source, "per_token_cast_to_fp8_vec2",
                            options=quantize.NVRTC_OPTIONS + (f"-DCG8_TOKEN_BATCHES={b}", f"-DCG8_TOKEN_CTAS={c}"))
        out[f"token-{b}x{c}"] = launcher(kern, 64, c)
    if old_source:
        with open(old_source) as f:
            text = quantize.inline_includes(f.read())
        if "per_token_cast_to_fp8_vec##kind" in text:   # v29 on: a kernel per input kind, launched as the library does
            out["token-old"] = launcher(cp.RawKernel(text, "per_token_cast_to_fp8_vec2",
                                                     options=quantize.NVRTC_OPTIONS), 64, 4)
        else:   # v20-v28: one kernel for every input kind
            out["token-old"] = launcher(cp.RawKernel(text, "per_token_cast_to_fp8_vec",
                                                     options=quantize.NVRTC_OPTIONS), 16 * 3)
    return out


def _time_size(env: Env, timer: Timer, m: int, k: int, variants: dict, reps: int) -> dict:
    cp, cg = env.cp, env.cg
    x = env.randn((m, k)).astype(cg.api.BF16)
    kb = -(-k // 128)
    q = cp.empty((m, k), dtype=cp.uint8)
    s = cp.empty((m, kb), dtype=cp.float32)
    nbytes = m * k * 3 + m * kb * 4
    fns = {"copy": same_size_copy(env, nbytes),
           "per_token": lambda: cg.per_token_cast_to_fp8(x),
           "per_block": lambda: cg.per_block_cast_to_fp8(x)}
    for name, launch in variants.items():
        fns[name] = (lambda launch=launch: launch(x, q, s, m, k, kb))
    with env.stream:
        samples = timer.interleaved(fns, reps)
    return {"m": m, "k": k, "bytes": nbytes, **{f"{n}_s": statistics.median(v) for n, v in samples.items()}}


def _report(row: dict, copy_bw: float) -> None:
    t_copy = row["copy_s"]
    for name in [n[:-2] for n in row if n.endswith("_s")]:
        t = row[f"{name}_s"]
        print(f"  [{row['m']}, {row['k']}] {name:>12}: {t * 1e6:8.1f} us  {row['bytes'] / t / 1e12:.2f} TB/s  "
              f"of the 1 GiB copy {row['bytes'] / t / copy_bw:.3f}  of the same-size copy {t_copy / t:.3f}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.stream_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(f"{m}x{k}" for m, k in SIZES))
    ap.add_argument("--token-variants", default="1x4,2x4")
    ap.add_argument("--old-source", default=None)
    ap.add_argument("--clean-l2", action="store_true")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    try:
        sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
        token = [tuple(int(v) for v in t.split("x")) for t in args.token_variants.split(",") if t]
        if any(len(t) != 2 for t in token + sizes):
            raise ValueError
    except ValueError:
        raise SystemExit(f"--sizes takes MxK,... and --token-variants BxC,...; got {args.sizes!r}, {args.token_variants!r}")
    env = Env(argparse.Namespace(no_peers=True))
    floor = calibrate(env, args.reps)
    copy_bw = floor["copy_bytes_per_s"]
    print(f"1 GiB copy {copy_bw / 1e12:.3f} TB/s (read + written); empty kernel {floor['empty_kernel_s'] * 1e6:.2f} us")
    variants = _token_variants(env, token, args.old_source)
    timers = [("protocol flush (1 GiB memset)", env.timer)]
    if args.clean_l2:
        timers.append(("memset, then a 1 GiB read (clean L2)", Timer(CleanFlushDevice(env.stream))))
    for label, timer in timers:
        print(f"\n== {label} ==")
        for m, k in sizes:
            _report(_time_size(env, timer, m, k, variants, args.reps), copy_bw)
            env.free()


if __name__ == "__main__":
    main()
