"""The training benchmark's tables (no GPU): the issue's shapes, and DeepGEMM's draw of the groups' K."""
from benchmarks import wgrad


def test_tables_are_the_issue_shapes():
    pairs = [(7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)]
    assert sorted(wgrad.WGRAD_SHAPES) == sorted((m, n, k) for m, n in pairs for k in (4096, 8192))
    assert sorted(wgrad.K_GROUPED_SHAPES) == sorted((g, base, m, n) for g in (4, 8) for base in (4096, 8192)
                                                   for m, n in ((7168, 4096), (2048, 7168)))


def test_k_sizes_vary_by_128_around_the_base_and_keep_its_mean():
    for groups, base in ((4, 4096), (8, 8192)):
        for seed in range(20):
            sizes = wgrad.k_sizes_for(groups, base, seed)
            assert len(sizes) == groups and sum(sizes) == groups * base
            assert all(s % 128 == 0 and abs(s - base) <= 128 for s in sizes[:-1])
            assert sizes == wgrad.k_sizes_for(groups, base, seed)   # the same draw every run
