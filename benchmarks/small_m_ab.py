"""A/B of the small-M kernel: this checkout's against another checkout's, with the WGMMA kernel's pick as a third
column, interleaved call by call in one process (cross-process ratios moved by up to 13% on an H200, NOTES.md v31):

    git archive <commit> cugemm8 cuda_src | tar -x -C /tmp/base
    python -m benchmarks.small_m_ab --base /tmp/base [--shapes 1x256x4096,...] [--rounds 40]

Each checkout runs its own heuristic's small-M pick (Library.small_m_choice: heuristics_small_m.for_call); "cur@base" runs this
checkout's kernel at the base pick's split, warps and depth, to separate the kernel from the rule. Prints the median
µs and the ratios; the two small-M outputs are compared bitwise."""
from __future__ import annotations

import argparse
import statistics

from . import library
from .protocol import CudaDevice, Timer
from .tune import dense_inputs, provenance_line

DEFAULT_SHAPES = "1x256x4096,1x256x7168,1x512x4096,1x512x7168,4x256x7168,8x512x7168"


def main(argv=None) -> int:
    import dataclasses

    import cupy as cp

    import cugemm8
    from cugemm8 import heuristics_small_m

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    library.add_base_argument(ap)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK, comma-separated (shapes the small-M kernel takes)")
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args(argv)
    libs = {"base": library.load(args.base, "cugemm8_base"), "cur": library.current()}
    sms = cugemm8.get_num_sms()
    print(f"{provenance_line()}; base {args.base}", flush=True)
    stream = cp.cuda.Stream(non_blocking=False)
    timer = Timer(CudaDevice(stream))
    for text in args.shapes.split(","):
        m, n, k = map(int, text.split("x"))
        with stream:
            a, sa, b, sb = dense_inputs(m, n, k)
            old, cur = (libs[v].small_m_choice("normal", m, n, k, sms) for v in ("base", "cur"))
            if cur is None or old is None:
                print(f"{text}: not a small-M shape in both checkouts")
                continue
            outs = {v: cp.empty((m, n), dtype=cugemm8.api.BF16) for v in ("wgmma", "base", "cur", "cur@base")}

            def wgmma():
                with heuristics_small_m.disabled():
                    cugemm8.matmul(a, sa, b, sb, out=outs["wgmma"], stream=stream)

            configs = {"base": (libs["base"], old), "cur": (libs["cur"], cur),
                       "cur@base": (libs["cur"], libs["cur"].small_m_config(dataclasses.asdict(old)))}
            runs = {v: lib.small_m_bind(cfg, a, sa, b, sb, outs[v]) for v, (lib, cfg) in configs.items()}
            fns = {"wgmma": wgmma, **{v: (lambda r=r: r(stream_ptr=stream.ptr)) for v, r in runs.items()}}
            for fn in fns.values():
                fn()
            stream.synchronize()
            equal = bool((outs["base"].view(cp.uint16) == outs["cur"].view(cp.uint16)).all())
            med = {v: statistics.median(s) * 1e6 for v, s in timer.interleaved(fns, args.rounds, rotate=True).items()}
        print(f"{text}: wgmma {med['wgmma']:.2f} base {med['base']:.2f} cur {med['cur']:.2f} cur@base "
              f"{med['cur@base']:.2f} us; cur/base {med['cur'] / med['base']:.3f}, cur@base/base "
              f"{med['cur@base'] / med['base']:.3f}, cur/wgmma {med['cur'] / med['wgmma']:.3f}, base/wgmma "
              f"{med['base'] / med['wgmma']:.3f}; bitwise {'equal' if equal else 'DIFFERENT'}; base [{old}]; cur [{cur}]",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
