"""The catalog of kernel configurations the CPU tier compiles (and a SASS-digest tool reads): every
configuration the heuristic picks for the shapes below on each SM count, and the explicit ones the
GPU tier runs. Also the fixed configurations and FFMA settings of the patch's tests."""
import dataclasses

from cugemm8 import heuristics, heuristics_wgrad

DENSE = [(m, n, k) for m in (64, 128, 4096)
         for n, k in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]
# Prefill-sized M, where tiles are ranked by their measured rates (heuristics.TILE_RATES).
PREFILL = [(m, n, k) for m in (2048, 8192, 16384)
           for n, k in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]
SPREAD = [(1, 8, 16), (7, 24, 112), (65, 136, 144), (200, 1000, 1040), (1000, 4104, 2000), (3000, 256, 7168),
          (129, 2048, 128), (257, 512, 4096), (17, 576, 7168), (2048, 7168, 576)]
CONTIGUOUS = [(4, 8192, 4096, 7168), (4, 8192, 7168, 2048), (8, 4096, 4096, 7168), (8, 4096, 7168, 2048),
              (3, 300, 136, 400), (8, 24, 4096, 7168), (8, 64, 7168, 2048),   # the last two: small experts
              # Uneven experts of a few hundred to ~1500 rows (heuristics.CONTIGUOUS_TILE_RATES): issue 22's (N, K).
              *((16, 1024, n, k) for n, k in ((4096, 7168), (7168, 2048), (16384, 5120), (5120, 8192)))]
MASKED = [(g, e, n, k) for g, e in ((1, 1024), (2, 512), (4, 256)) for n, k in ((4096, 7168), (7168, 2048))] + [
    (32, 40, 24, 128)]
# Decode-sized M (the split-K regime), on DeepGEMM's (N, K) pairs and narrow N.
DECODE = [(m, n, k) for m in (1, 2, 4, 8, 16, 32, 128)
          for n, k in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
                       (256, 4096), (512, 7168), (1024, 7168), (1536, 7168))]
SMS = (132, 114, 78)
CONTIGUOUS_EXPLICIT = [heuristics.make_config("contiguous", n, k, 5, bm, bn)
                       for bm, bn, n, k in ((256, 128, 256, 384), (128, 128, 256, 384), (64, 64, 256, 384),
                                            (128, 160, 688, 384), (128, 144, 1200, 384), (128, 256, 600, 384),
                                            (128, 256, 600, 640), (128, 256, 600, 2048))]
# 128x256 tiles in column halves (tests/gpu/test_dense.py::test_column_halves).
HALVES_EXPLICIT = [heuristics.make_config("normal", n, k, 1, 128, bn) for bn, n, k in ((256, 600, 640), (256, 1024, 1040),
                                                                                       (256, 256, 128), (128, 600, 640),
                                                                                       (128, 1024, 1040), (128, 256, 128))]
# 256-row contiguous tiles over segments padded to 128 rows (tests/gpu/test_contiguous.py::
# test_contiguous_tiles_split_at_the_middle, test_fp8_out.py::test_contiguous_fp8_out_256_rows).
SPLIT_AT_MIDDLE_EXPLICIT = [heuristics.make_config("contiguous", 2 * bn + 40, 640, 12, 256, bn) for bn in (128, 96)] + [
    heuristics.make_config("contiguous", 384, 512, 9, 256, 128, out_format=fmt)
    for fmt in ("float8_e4m3", "float8_e4m3_ue8m0")]
# CTA pairs sharing B (tests/gpu/test_contiguous.py::test_contiguous_pairs_sharing_b).
SHARE_B_EXPLICIT = [heuristics.make_config("contiguous", n, k, 5, 128, bn, cluster=2, share_b=True)
                    for bn, n, k in ((192, 400, 384), (160, 688, 640), (128, 256, 2048), (144, 1200, 384),
                                     (256, 600, 640))]

SPLIT_EXPLICIT = [heuristics.make_config("masked", bn, k, 3, bm, bn, tail_split=True)
                  for bm, bn, k in ((128, 128, 1024), (256, 128, 384), (64, 64, 256), (128, 144, 640))]
# Split K at every cluster size and both tile heights, with uneven k-block shares, uneven column chunks (over 3, 5
# and 7 CTAs) and partial tiles (tests/gpu/test_dense.py::test_split_k).
SPLIT_K_EXPLICIT = [heuristics.make_config("normal", n, k, 1, bm, bn, split_k=split)
                    for bm, bn, n, k, split in ((64, 64, 200, 1040, 2), (64, 128, 520, 1808, 4), (64, 64, 1000, 7168, 8),
                                                (128, 32, 96, 528, 4), (64, 16, 8, 256, 2), (128, 192, 304, 3008, 8),
                                                (64, 64, 200, 1040, 3), (128, 48, 304, 3008, 5), (64, 96, 1000, 7168, 7))]

# The heuristic's 16384-row configurations (bands of WIDE_RASTER_GROUP n-blocks) and theirs at RASTER_GROUP, run on
# fewer rows (tests/gpu/test_dense.py::test_wide_bands): (M, N, K).
WIDE_BANDS = ((1000, 7168, 2048), (333, 2112, 7168), (520, 40 * 128 + 72, 640))


def wide_band_configs(n: int, k: int) -> tuple:
    wide = heuristics.choose("normal", 16384, n, k, 1, 132).config
    return wide, dataclasses.replace(wide, raster_group=heuristics.RASTER_GROUP)


def picked_configs():
    configs = set()
    for sms in SMS:
        for m, n, k in DENSE + PREFILL + SPREAD + DECODE:
            configs.add(heuristics.choose("normal", m, n, k, 1, sms).config)
        for g, m, n, k in CONTIGUOUS:
            configs.add(heuristics.choose("contiguous", g * m, n, k, g, sms).config)
        for g, m, n, k in MASKED:
            configs.add(heuristics.choose("masked", m, n, k, g, sms).config)
    # Multicast (clusters of 2) is not picked by the heuristic at present; compile the configurations
    # the GPU tier runs explicitly (tests/gpu/test_dense.py, test_masked.py: test_multicast_*).
    for bm, bn in ((256, 128), (128, 96), (64, 64)):
        configs.add(heuristics.make_config("normal", 8 * bn, 1040, 1, bm, bn, cluster=2))
    configs.add(heuristics.make_config("masked", 512, 1024, 3, 256, 128, cluster=2))
    # Contiguous tiles of every height over 64-row expert segments (tests/gpu/test_contiguous.py).
    for cfg in CONTIGUOUS_EXPLICIT + SHARE_B_EXPLICIT + SPLIT_AT_MIDDLE_EXPLICIT + HALVES_EXPLICIT:
        configs.add(cfg)
    # The masked split last wave at every tile height (tests/gpu/test_masked.py::test_masked_split_last_wave).
    for cfg in SPLIT_EXPLICIT + SPLIT_K_EXPLICIT:
        configs.add(cfg)
    for _, n, k in WIDE_BANDS:
        configs.update(wide_band_configs(n, k))
    configs.update(fp8_out_configs())
    return sorted(configs, key=repr)


def fp8_out_configs():
    """e4m3 output (both scale formats): the picks for the shapes above whose N it takes (a multiple of 16),
    on the full H100/H200 SM count, and the GPU tier's shapes (tests/gpu/test_fp8_out.py)."""
    configs = set()
    for fmt in ("float8_e4m3", "float8_e4m3_ue8m0"):
        for m, n, k in DENSE + PREFILL + SPREAD + DECODE + [(200, 992, 1040), (7, 16, 112), (70, 256, 256), (256, 1024, 2048),
                                                  (256, 512, 1024), (512, 2048, 4096),
                                                  (130, 320, 1024), (64, 192, 640)]:
            if n % 16 == 0:
                configs.add(heuristics.choose("normal", m, n, k, 1, SMS[0], fmt).config)
        for g, m, n, k in CONTIGUOUS + [(5, 128, 384, 768)]:
            if n % 16 == 0:
                configs.add(heuristics.choose("contiguous", g * m, n, k, g, SMS[0], fmt).config)
        for g, m, n, k in MASKED + [(6, 64, 640, 1024)]:
            if n % 16 == 0:
                configs.add(heuristics.choose("masked", m, n, k, g, SMS[0], fmt).config)
        # The masked split tail (tests/gpu/test_fp8_out.py::test_masked_fp8_out_split_tail).
        configs.add(heuristics.make_config("masked", 640, 1024, 3, 128, 128, tail_split=True, out_format=fmt))
        # Split K at every cluster size and both tile heights (tests/gpu/test_fp8_out.py::test_split_k_fp8_out).
        for bm, split, n, k in ((64, 2, 208, 1040), (64, 4, 512, 1808), (64, 8, 1008, 7168), (128, 2, 384, 3008),
                                (128, 4, 256, 1040), (64, 3, 400, 1040), (64, 5, 2112, 2048), (128, 6, 272, 1808),
                                (64, 7, 512, 7168)):
            configs.add(heuristics.make_config("normal", n, k, 1, bm, 128, split_k=split, stream_b=True, out_format=fmt))
        # CTAs sharing a scale group (tests/gpu/test_fp8_out.py::test_group_shared_fp8_out).
        for bm, bn, n, k in GROUP_SHARED:
            configs.add(heuristics.make_config("normal", n, k, 1, bm, bn, stream_b=True, out_format=fmt,
                                               group_ctas=128 // bn))
    return configs


GROUP_SHARED = ((64, 64, 2112, 1040), (64, 64, 1008, 2048), (128, 64, 384, 256), (64, 32, 208, 512), (128, 32, 96, 1808))


CONFIGS = picked_configs()


# ----------------------------------------------------------------------------- the weight gradient
# Its own list: the SASS-digest tool compares CONFIGS with older checkouts, which have no weight gradient.
WGRAD_SHAPES = [(7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168), (1, 8), (70, 152),
                (333, 488), (200, 136), (3000, 1000)]

# Transposed weight-gradient tiles the GPU tier runs: (BLOCK_M, BLOCK_N, FP32 atoms held; 0: the heuristic's).
TRANSPOSED_TILES = [(128, 160, 0), (128, 160, 2), (128, 160, 4), (64, 160, 0), (128, 96, 0), (64, 16, 0)]
# Tiles the GPU tier runs with D loaded and stored (load_d): (BLOCK_M, BLOCK_N, computing D^T); each output swizzle.
LOAD_D_TILES = [(128, 96, False), (128, 112, False), (128, 128, False), (128, 144, False), (128, 152, False),
                (128, 160, False), (64, 48, False), (128, 160, True), (128, 96, True)]


def wgrad_configs():
    """Every weight-gradient configuration the heuristic picks for the shapes above (dense, and k-grouped with
    the benchmark's and the tests' group counts) on each SM count, and the explicit ones the GPU tier and
    compute-sanitizer run."""
    configs = set()
    for sms in SMS:
        for m, n in WGRAD_SHAPES:
            configs.add(heuristics_wgrad.choose("normal", m, n, 1, sms).config)
            for groups in (4, 8):
                configs.add(heuristics_wgrad.choose("k_grouped", m, n, groups, sms).config)
    for bm, bn in ((64, 16), (64, 48), (64, 160), (128, 48), (128, 144), (128, 160)):
        configs.add(heuristics_wgrad.make_config("normal", 3 * bn + 8, 1, bm, bn))
    configs.add(heuristics_wgrad.make_config("normal", 152, 1, 64, 48))
    configs.add(heuristics_wgrad.make_config("normal", 488, 1, 128, 160))
    for bm, bn, d_atoms in ((128, 160, 5), (128, 160, 4), (128, 160, 2), (128, 144, 3), (64, 160, 3), (128, 152, 0),
                            (128, 152, 9)):
        configs.add(heuristics_wgrad.make_config("normal", 3 * bn + 8, 1, bm, bn, d_atoms=d_atoms))
    for bm, bn, d_atoms in TRANSPOSED_TILES:   # D transposed (the kernel's N is D's rows)
        configs.add(heuristics_wgrad.make_config("normal", 2 * bn + 24, 1, bm, bn, d_atoms=d_atoms, transpose_d=True))
    configs.add(heuristics_wgrad.make_config("k_grouped", 200, 5, 128, 160, transpose_d=True))
    for bm, bn, transpose_d in LOAD_D_TILES:   # D loaded and stored (the GPU tier's sizes)
        n = 2 * bm + 40 if transpose_d else 3 * bn + 8
        configs.add(heuristics_wgrad.make_config("normal", n, 1, bm, bn, transpose_d=transpose_d, load_d=True))
    configs.add(heuristics_wgrad.make_config("k_grouped", 440, 6, 128, 144, load_d=True))
    return sorted(configs, key=repr)



WGRAD_CONFIGS = wgrad_configs()


# ----------------------------------------------------------------------------- the FFMA patch's configurations
def config(block_m: int, block_n: int = 128, n: int = 2112, k: int = 7168) -> heuristics.KernelConfig:
    """An explicit configuration (independent of the heuristic's current choices)."""
    return heuristics.make_config("normal", n, k, 1, block_m, block_n)


ONE_WG = config(64)      # one math warpgroup: ptxas leaves the promotion FFMAs without yields
TWO_WG = config(256)     # two math warpgroups: ptxas interleaves yields itself
OFF = {"enabled": False}
VARIANTS = {"on": {"enabled": True}, "fraction_1": {"enabled": True, "fraction": 1.0},
            "no_keep": {"enabled": True, "keep_compiler_yields": False}}
