"""CPU tier for benchmarks.round_robin and library.load: another checkout's package loaded under an alias
uses its own cuda_src/; the case list, the per-case summary and the report lines."""
import shutil
import sys
from pathlib import Path

import pytest

from benchmarks import library, round_robin, shapes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def base_copy(tmp_path):
    shutil.copytree(ROOT / "cugemm8", tmp_path / "cugemm8", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "cuda_src", tmp_path / "cuda_src", ignore=shutil.ignore_patterns("__pycache__"))
    alias = f"cugemm8_base_test_{abs(hash(str(tmp_path)))}"
    yield tmp_path, alias
    for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
        del sys.modules[name]


def test_load_uses_the_copys_own_sources(base_copy):
    root, alias = base_copy
    lib = library.load(root, alias)
    assert lib.name == alias and Path(lib.pkg.__file__).resolve() == (root / "cugemm8" / "__init__.py").resolve()
    assert lib.source_dir() == (root / "cuda_src").resolve()
    assert library.current().source_dir() == (ROOT / "cuda_src").resolve()
    assert sys.modules[f"{alias}.jit"] is not sys.modules["cugemm8.jit"]
    # the same sources give the same configuration in both (as fields: the classes differ)
    import dataclasses

    for layout, m, n, k, g in (("normal", 64, 2112, 7168, 1), ("masked", 256, 7168, 2048, 4)):
        mine = library.current().choose(layout, m, n, k, g, 132)
        theirs = lib.choose(layout, m, n, k, g, 132)
        assert dataclasses.asdict(mine.config) == dataclasses.asdict(theirs.config) and mine.grid == theirs.grid
    # loading again returns the loaded module; another folder under the same alias is refused
    assert library.load(root, alias).pkg is lib.pkg
    with pytest.raises(ValueError):
        library.load(ROOT, alias)


def test_load_sees_a_changed_source_tree(base_copy):
    root, alias = base_copy
    (root / "cuda_src" / "extra.cuh").write_text("// changed\n")
    lib = library.load(root, alias)
    jit = sys.modules[f"{alias}.jit"]
    assert jit._sources_digest() != sys.modules["cugemm8.jit"]._sources_digest()
    assert lib.source_dir() == (root / "cuda_src").resolve()


def test_load_refuses_a_folder_without_the_package(tmp_path):
    with pytest.raises(FileNotFoundError):
        library.load(tmp_path, "cugemm8_nothing_here")
    assert "cugemm8_nothing_here" not in sys.modules


def test_cases_and_problems():
    every = round_robin.cases()
    assert every == list(shapes.DENSE_SHAPES + shapes.CONTIGUOUS_SHAPES + shapes.MASKED_SHAPES)
    quick = round_robin.cases(("dense", "masked"), quick=True)
    assert quick == list(shapes.QUICK_SHAPES["dense"] + shapes.QUICK_SHAPES["masked"])
    assert round_robin.problem(shapes.Shape("normal", 1, 64, 2112, 7168), 64) == ("normal", 64, 1, 64)
    assert round_robin.problem(shapes.Shape("contiguous", 4, 100, 256, 256), 64) == ("contiguous", 512, 4, 512)
    assert round_robin.problem(shapes.Shape("masked", 2, 512, 4096, 7168), 64) == ("masked", 512, 2, 4096)
    # the decode section's masked rows: its max_m
    assert round_robin.cases(("decode-masked",)) == list(shapes.DECODE_MASKED_SHAPES)
    assert round_robin.problem(shapes.Shape("masked", 32, 16, 4096, 7168), 64) == ("masked", 16, 32, 64)
    # the prefill section's uneven experts: their drawn rows, each padded to PREFILL_ALIGN
    assert round_robin.cases(("uneven",)) == list(shapes.PREFILL_UNEVEN_SHAPES)
    uneven = shapes.Shape("uneven", 64, 256, 5120, 8192)
    rows = shapes.uneven_expert_rows(64, 256)
    total = sum(-(-r // shapes.PREFILL_ALIGN) * shapes.PREFILL_ALIGN for r in rows)
    assert round_robin.problem(uneven, 64) == ("contiguous", total, 64, total) == ("contiguous", 18304, 64, 18304)
    # dense shapes named on the command line replace the sections
    assert round_robin.cases(("dense",), shapes="65x4096x7168,200x2112x512") == [
        shapes.Shape("normal", 1, 65, 4096, 7168), shapes.Shape("normal", 1, 200, 2112, 512)]
    for bad in ("65x4096", "65x4096x0", "ax1x2"):
        with pytest.raises(ValueError, match="MxNxK"):
            round_robin.cases(shapes=bad)


def test_summarize_and_lines():
    samples = {"base": [10e-6, 10e-6, 10e-6, 10e-6], "cur": [9e-6, 9.5e-6, 9e-6, 9e-6],
               "base_aa": [10e-6, 10.1e-6, 9.9e-6, 10e-6]}
    row = {"label": "64x2112x7168", "bitwise_equal": True, **round_robin.summarize(samples)}
    assert row["base_us"] == pytest.approx(10.0) and row["cur_us"] == pytest.approx(9.0)
    assert row["ratio"] == pytest.approx(0.9) and row["ratio_verdict"] == "faster"
    assert row["aa"] == pytest.approx(1.0) and row["aa_verdict"] == "same"
    cfg = {"block_m": 64, "block_n": 16}
    line = round_robin.case_line("64x2112x7168", {"base": cfg, "cur": cfg}, row)
    assert "cur/base 0.9000" in line and "64x16" in line and line.rstrip().endswith("]") and "DIFF" not in line
    bad = {"label": "m1x1024x4096x7168", "bitwise_equal": False, "error": "boom"}
    assert "DIFF" in round_robin.case_line(bad["label"], {}, bad)
    s = round_robin.overall([row, bad])
    assert s["cases"] == 2 and s["timed"] == 1 and s["faster"] == ["64x2112x7168"] and s["diff"] == [bad["label"]]
    assert s["geomean_cur_over_base"] == pytest.approx(0.9)
