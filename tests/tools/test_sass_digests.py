"""CPU tier: the SASS-identity tool's pure parts (benchmarks/sass_digests.py)."""
from benchmarks import sass_digests
from kernel_configs import CONFIGS

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT ;
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0030*/               @P0 BRA 0x10 ;
        /*0040*/                   FFMA R3, R4, R5, R3 ;
        /*0050*/               @!P1 BRA 0x40 ;
        /*0060*/                   EXIT ;
"""


def test_main_loops_counts_only_innermost_wgmma_loops():
    # 0x10..0x30 issues a wgmma (3 instructions); 0x40..0x50 is a loop without one; nothing encloses both.
    assert sass_digests.main_loops(LISTING) == [3]


def test_catalog_is_the_cpu_tiers_and_ids_are_unique():
    assert sass_digests.catalog() == list(CONFIGS)
    ids = [sass_digests.config_id(c) for c in CONFIGS]
    assert len(set(ids)) == len(ids)
