"""CPU tier: benchmarks.trace's summary of a kernel timeline, on a hand-made event log."""
import numpy as np
import pytest

from benchmarks import trace as tt


def test_summarize_phases_of_a_split_pair():
    ev = np.zeros((3, tt.TRACE_CTAS, tt.TRACE_SLOTS, 4), dtype=np.uint64)

    def log(role, cta, events):   # (tag, info, ns, clock)
        for i, e in enumerate(events):
            ev[role, cta, i] = e

    def half(h):
        return h << 28
    # CTA 0: one normal tile (1.0-4.5 us), then the first half of a split tile; CTA 1 likewise, second half.
    log(0, 0, [(tt.START, 0, 0, 0), (tt.SET_UP, 0, 500, 1000), (tt.TILE, 0, 1000, 2000), (tt.STAGED, 0, 1200, 0),
               (tt.LOOP, 0, 1300, 0), (tt.MAIN_DONE, 0, 4000, 0), (tt.STORED, 0, 4500, 0),
               (tt.TILE, half(1), 4700, 0), (tt.LOOP, 0, 4900, 0), (tt.MAIN_DONE, 0, 6000, 0),
               (tt.EXCHANGED, 0, 6800, 0), (tt.STORED, 0, 7000, 0), (tt.END, 0, 7100, 14200)])
    log(0, 1, [(tt.START, 0, 100, 0), (tt.TILE, 0, 1100, 0), (tt.MAIN_DONE, 0, 4100, 0), (tt.STORED, 0, 4600, 0),
               (tt.TILE, half(2), 4800, 0), (tt.MAIN_DONE, 0, 6100, 0), (tt.EXCHANGED, 0, 6900, 0),
               (tt.STORED, 0, 7300, 0), (tt.END, 0, 7400, 14600)])
    log(1, 0, [(tt.START, 0, 0, 0), (tt.LOADS, 0, 900, 0), (tt.LOADS, 0, 4200, 0)])
    log(2, 0, [(tt.TILE, 0, 1100, 0), (tt.MAIN_DONE, 0, 3900, 0)])
    s = tt.summarize(ev, 2)
    assert s["span_us"] == pytest.approx(7.4)
    assert s["tile_us"]["median"] == pytest.approx(3.5)            # tile start to its store
    assert s["tile_prologue_us"]["min"] == pytest.approx(0.3)      # CTA 0: tile start to k-loop start
    assert s["tile_staging_us"]["n"] == 1 and s["tile_staging_us"]["median"] == pytest.approx(0.2)
    assert s["split_exchange_us"]["min"] == pytest.approx(0.8)
    assert s["split_end_us"]["median"] == pytest.approx(7.3)       # the second half stores
    assert s["tile_lead_us"]["median"] == pytest.approx(0.1)       # loads began 0.1 us before the tile
    assert s["split_lead_us"]["median"] == pytest.approx(0.5)
    assert s["tile_gap_us"]["min"] == pytest.approx(0.2)           # store to the next tile's start
    assert s["wg1_minus_wg0_tile_start_us"]["median"] == pytest.approx(0.1)
    assert s["wg1_minus_wg0_main_done_us"]["median"] == pytest.approx(-0.1)
    assert s["sm_ghz"]["min"] == pytest.approx(2.0)                # 14200 cycles in 7.1 us


def test_config_for_forces_tile_and_split():
    case = tt.Case("x", "masked", (276,), 7168, 2048, (128, 128), False)
    cfg = tt.config_for(case, 132)
    assert (cfg.block_m, cfg.block_n, cfg.tail_split) == (128, 128, False)
    assert tt.config_for(tt.Case("y", "masked", (276,), 7168, 2048, (128, 128), True), 132).tail_split
    names = [c.name for c in tt.CASES]
    assert len(names) == len(set(names))


def test_event_tags_match_the_kernel():
    """The tracer's tags and buffer sizes are the kernel's (cuda_src/gemm/trace.cuh): one contract, checked."""
    import re

    from cugemm8 import jit

    text = (jit.source_dir() / "gemm" / "trace.cuh").read_text()
    cuda = {name: int(value) for name, value in re.findall(r"\bkTrace(\w+)\s*=\s*(\d+)", text)}
    python = {"Start": tt.START, "SetUp": tt.SET_UP, "Tile": tt.TILE, "MainDone": tt.MAIN_DONE,
              "Exchanged": tt.EXCHANGED, "Stored": tt.STORED, "Loop": tt.LOOP, "Staged": tt.STAGED,
              "Loads": tt.LOADS, "LoadsDone": tt.LOADS_DONE, "End": tt.END, "Ctas": tt.TRACE_CTAS,
              "Slots": tt.TRACE_SLOTS, "KBlocks": tt.TRACE_KBLOCKS, "KbIssued": tt.KB_ISSUED, "KbWait": tt.KB_WAIT,
              "KbReady": tt.KB_READY}
    assert cuda == python
