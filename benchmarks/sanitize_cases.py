"""The sanitizer's edge cases (benchmarks/sanitize.py runs them beside one case per benchmark configuration): shapes
through the normal heuristic or a forced tile, each with what makes it an edge (M = 1, partial blocks, N = 8, K = 16,
masked groups empty or full, contiguous padding, splits over every cluster size, e4m3 output, the weight gradients).
Data only: a case is a dict of the public call's shape and layout, with optional "force" (BLOCK_M, BLOCK_N),
"split_k", "group_ctas", "num_sms", "out_dtype", "scale_format", "a_scale" and layout arrays."""


def contiguous_ids(segments: list[tuple[int, int]]) -> list[int]:
    """[(expert or -1, rows)] -> per-row ids."""
    return [e for e, r in segments for _ in range(r)]


EDGE_CASES = [
    {"name": "edge dense M=1", "layout": "normal", "m": 1, "n": 2112, "k": 7168, "a_scale": "aligned"},
    {"name": "edge dense M=200 K=400 row-major a_scale", "layout": "normal", "m": 200, "n": 264, "k": 400,
     "a_scale": "rowmajor"},
    {"name": "edge dense M=64 N=8 K=16", "layout": "normal", "m": 64, "n": 8, "k": 16, "a_scale": "aligned"},
    {"name": "edge dense M=5 N=8 K=16", "layout": "normal", "m": 5, "n": 8, "k": 16, "a_scale": "aligned"},
    {"name": "edge masked empty/full groups", "layout": "masked", "groups": 4, "max_m": 100, "n": 264, "k": 256,
     "masked_m": [0, 100, 37, 0], "expected_m": 64, "a_scale": "aligned"},
    {"name": "edge masked all empty", "layout": "masked", "groups": 2, "max_m": 64, "n": 128, "k": 128,
     "masked_m": [0, 0], "expected_m": 1, "a_scale": "aligned"},
    {"name": "edge masked split last wave (K=4096: every tile split over a CTA pair)", "layout": "masked",
     "groups": 2, "max_m": 129, "n": 256, "k": 4096, "masked_m": [129, 1], "expected_m": 129, "a_scale": "aligned"},
    {"name": "edge masked out-of-range masked_m", "layout": "masked", "groups": 3, "max_m": 70, "n": 136, "k": 256,
     "masked_m": [-5, 1000, 70], "expected_m": 32, "a_scale": "aligned"},
    {"name": "edge contiguous whole padding blocks", "layout": "contiguous", "groups": 3, "n": 256, "k": 256,
     "m_indices": contiguous_ids([(0, 100), (-1, 28), (-1, 128), (2, 128), (-1, 128)]), "a_scale": "aligned"},
    {"name": "edge contiguous out-of-range ids", "layout": "contiguous", "groups": 2, "n": 128, "k": 128,
     "m_indices": contiguous_ids([(5, 128), (1, 60), (-9, 68)]), "a_scale": "aligned"},
    # 256x128 tiles on two CTAs, 16 k-blocks in 3 stages: tiles start at every stage of the ring (ring rounds)
    {"name": "edge contiguous ring rounds from every stage (256x128, K=2048, 2 CTAs)", "layout": "contiguous",
     "groups": 3, "n": 256, "k": 2048, "force": (256, 128), "num_sms": 2, "a_scale": "aligned",
     "m_indices": contiguous_ids([(0, 64), (2, 100), (-1, 28), (1, 768), (-1, 64), (2, 256)])},
    # 128x256 tiles in column halves: dense with partial m-, n- and k-blocks on 2 CTAs; contiguous through the ring
    # from every stage (16 k-blocks in 3 stages) over segments spanning tiles, padding and a last n-tile of 88 columns
    {"name": "edge dense column halves (128x256, M=300, N=600, K=1040, 2 CTAs)", "layout": "normal", "m": 300,
     "n": 600, "k": 1040, "force": (128, 256), "num_sms": 2, "a_scale": "aligned"},
    {"name": "edge contiguous column halves from every stage (128x256, K=2048, 2 CTAs)", "layout": "contiguous",
     "groups": 3, "n": 600, "k": 2048, "force": (128, 256), "num_sms": 2, "a_scale": "aligned",
     "m_indices": contiguous_ids([(0, 64), (2, 100), (-1, 28), (1, 768), (-1, 64), (2, 256)])},
    # 128x128 tiles on 8 CTAs, 5 n-blocks: the last group's 20-row block goes last and its tiles are split
    {"name": "edge masked light last blocks go last, split (128x128, K=1024, 8 CTAs)", "layout": "masked",
     "groups": 3, "max_m": 300, "n": 640, "k": 1024, "masked_m": [300, 0, 20], "expected_m": 256,
     "force": (128, 128), "num_sms": 8, "a_scale": "aligned"},
    # Split K: over 8 CTAs with uneven shares; over 4 with several tiles per cluster; over 2 at N=8, M=1
    {"name": "edge dense split K over 8 (64x64, M=3, K=1040)", "layout": "normal", "m": 3, "n": 200, "k": 1040,
     "force": (64, 64), "split_k": 8, "a_scale": "aligned"},
    {"name": "edge dense split K over 4, several tiles a cluster (64x128, M=300, 8 CTAs)", "layout": "normal",
     "m": 300, "n": 520, "k": 1808, "force": (64, 128), "split_k": 4, "num_sms": 8, "a_scale": "aligned"},
    {"name": "edge dense split K over 2 (64x16, M=1, N=8)", "layout": "normal", "m": 1, "n": 8, "k": 256,
     "force": (64, 16), "split_k": 2, "a_scale": "aligned"},
    # The small-M kernel (narrow N, K >= 4096, M <= 8 or M <= 16 at N <= 256), through the heuristic: K over a
    # cluster of 8; a partial row block, a partial k-block and uneven shares; two token tiles, the second partial
    {"name": "edge small-M M=1 N=256 K=4096 (K split over 8)", "layout": "normal", "m": 1, "n": 256, "k": 4096,
     "a_scale": "aligned"},
    {"name": "edge small-M M=5 N=264 K=4112 (partial row and k-blocks)", "layout": "normal", "m": 5, "n": 264,
     "k": 4112, "a_scale": "rowmajor"},
    {"name": "edge small-M M=13 N=200 K=4240 (two token tiles, partial rows and k-blocks)", "layout": "normal",
     "m": 13, "n": 200, "k": 4240, "a_scale": "aligned"},
    {"name": "edge small-M M=16 N=256 K=7168 (two token tiles, K split over 8)", "layout": "normal", "m": 16,
     "n": 256, "k": 7168, "a_scale": "rowmajor"},
    # e4m3 output: split K over 2, 4 and 8 (the row amax exchange; 3 and 7 below), uneven shares, partial tiles;
    # UE8M0; the grouped layouts' untouched rows and padding rows
    {"name": "edge e4m3 out split K over 8 (64x128, M=3, K=1040)", "layout": "normal", "m": 3, "n": 208, "k": 1040,
     "force": (64, 128), "split_k": 8, "out_dtype": "float8_e4m3", "a_scale": "aligned"},
    {"name": "edge e4m3 out split K over 4, several tiles a cluster (128x128, M=300, 8 CTAs)", "layout": "normal",
     "m": 300, "n": 512, "k": 1808, "force": (128, 128), "split_k": 4, "num_sms": 8, "out_dtype": "float8_e4m3",
     "a_scale": "aligned"},
    {"name": "edge e4m3 out split K over 2, UE8M0 (64x128, M=1)", "layout": "normal", "m": 1, "n": 128, "k": 256,
     "force": (64, 128), "split_k": 2, "out_dtype": "float8_e4m3", "scale_format": "ue8m0", "a_scale": "aligned"},
    # uneven column chunks (16-byte units dealt over 3, 5, 6 or 7 CTAs)
    {"name": "edge e4m3 out split K over 3, uneven chunks, several tiles a cluster (64x128, M=77, 6 CTAs)",
     "layout": "normal", "m": 77, "n": 400, "k": 1040, "force": (64, 128), "split_k": 3, "num_sms": 6,
     "out_dtype": "float8_e4m3", "a_scale": "aligned"},
    {"name": "edge e4m3 out split K over 7, uneven chunks, UE8M0 (128x128, M=129, K=1808)", "layout": "normal",
     "m": 129, "n": 256, "k": 1808, "force": (128, 128), "split_k": 7, "out_dtype": "float8_e4m3",
     "scale_format": "ue8m0", "a_scale": "aligned"},
    {"name": "edge dense split K over 5, uneven chunks (64x48, M=3, N=200)", "layout": "normal", "m": 3, "n": 200,
     "k": 1040, "force": (64, 48), "split_k": 5, "a_scale": "aligned"},
    {"name": "edge e4m3 out groups shared by CTA pairs (64x64, M=3, N=2112: a tile past N)", "layout": "normal",
     "m": 3, "n": 2112, "k": 1040, "force": (64, 64), "group_ctas": 2, "out_dtype": "float8_e4m3", "a_scale": "aligned"},
    {"name": "edge e4m3 out groups shared by 4 CTAs, UE8M0 (128x32, M=129, N=96)", "layout": "normal", "m": 129,
     "n": 96, "k": 1808, "force": (128, 32), "group_ctas": 4, "out_dtype": "float8_e4m3", "scale_format": "ue8m0",
     "a_scale": "aligned"},
    {"name": "edge e4m3 out 256x128 tiles, several a CTA (B scales staged by a producer warp)", "layout": "normal",
     "m": 600, "n": 640, "k": 1040, "force": (256, 128), "num_sms": 4, "out_dtype": "float8_e4m3", "a_scale": "aligned"},
    {"name": "edge e4m3 out dense M=200 (heuristic)", "layout": "normal", "m": 200, "n": 992, "k": 1040,
     "out_dtype": "float8_e4m3", "a_scale": "rowmajor"},
    {"name": "edge e4m3 out masked empty/full groups", "layout": "masked", "groups": 4, "max_m": 100, "n": 256,
     "k": 256, "masked_m": [0, 100, 37, 0], "expected_m": 64, "out_dtype": "float8_e4m3", "a_scale": "aligned"},
    {"name": "edge e4m3 out contiguous whole padding blocks", "layout": "contiguous", "groups": 3, "n": 256, "k": 256,
     "m_indices": contiguous_ids([(0, 100), (-1, 28), (-1, 128), (2, 128), (-1, 128)]), "out_dtype": "float8_e4m3",
     "a_scale": "aligned"},
    # The weight gradient (FP32 added into out; 1x128 B scales; K at run time): M = 1, N = 8, K = 16; partial
    # tiles at both heights and both output swizzles; D transposed; k-grouped with empty groups and sizes past A's
    # columns
    {"name": "edge wgrad M=1 N=8 K=16", "layout": "wgrad", "m": 1, "n": 8, "k": 16},
    {"name": "edge wgrad partial tiles (64x48, 64-byte swizzle, M=70, K=1040)", "layout": "wgrad", "m": 70,
     "n": 152, "k": 1040, "force": (64, 48)},
    {"name": "edge wgrad partial tiles (128x160, M=333, N=488, K=1040, row-major scales)", "layout": "wgrad",
     "m": 333, "n": 488, "k": 1040, "force": (128, 160), "a_scale": "rowmajor"},
    {"name": "edge wgrad D transposed (128x160, 3 of 4 atoms held, M=300, N=328, K=1040)", "layout": "wgrad",
     "m": 300, "n": 328, "k": 1040, "force": (128, 160), "transposed": True},
    {"name": "edge k-grouped wgrad D transposed (128x160, empty groups)", "layout": "k_grouped_wgrad", "m": 200,
     "n": 136, "k": 640, "k_sizes": [0, 256, 128, 0, 128], "force": (128, 160), "transposed": True},
    {"name": "edge k-grouped wgrad empty groups, sizes past the columns", "layout": "k_grouped_wgrad", "m": 200,
     "n": 136, "k": 640, "k_sizes": [0, 256, 128, 0, 1 << 20, 128]},
    {"name": "edge k-grouped wgrad all groups empty", "layout": "k_grouped_wgrad", "m": 64, "n": 64, "k": 256,
     "k_sizes": [0, 0]},
    # D loaded into shared memory, added to and stored (load_d): the heuristic's pick at M <= 512, forced tiles with
    # partial tiles both ways, D transposed, and k-grouped with empty groups
    {"name": "edge wgrad D loaded, the heuristic's (M=256, N=16392, K=640)", "layout": "wgrad", "m": 256, "n": 16392,
     "k": 640},
    {"name": "edge wgrad D loaded (128x144, M=333, N=440, K=1040)", "layout": "wgrad", "m": 333, "n": 440, "k": 1040,
     "force": (128, 144), "loaded": True},
    {"name": "edge wgrad D loaded and transposed (128x160, M=300, N=328, K=1040)", "layout": "wgrad", "m": 300,
     "n": 328, "k": 1040, "force": (128, 160), "transposed": True, "loaded": True},
    {"name": "edge k-grouped wgrad D loaded (128x144, empty groups)", "layout": "k_grouped_wgrad", "m": 300,
     "n": 440, "k": 1920, "k_sizes": [256, 0, 384, 128, 0, 1152], "force": (128, 144), "loaded": True},
]
