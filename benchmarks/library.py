"""The library internals the tools reach past the public API for (choosing, building and binding one
configuration, the JIT's source folder), in one place: when they move, only this file changes. A
`Library` wraps one copy of the package, so a second checkout can be loaded beside this one
(round_robin)."""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
from pathlib import Path


class Library:
    def __init__(self, pkg):
        self.pkg = pkg
        self.name = pkg.__name__

    def _mod(self, sub: str):
        return importlib.import_module(f"{self.name}.{sub}")

    def _host(self):
        """The kernel's host side: fp8_gemm (render, build, tensor maps, bind); before the restructure,
        render and build lived in kernels and bind in runtime (a --base checkout may be that old)."""
        try:
            return self._mod("fp8_gemm")
        except ModuleNotFoundError:
            return None

    # ------------------------------------------------------------------ configurations
    @property
    def heuristics(self):
        return self._mod("heuristics")

    @property
    def wgrad_heuristics(self):
        return self._mod("heuristics_wgrad")

    @property
    def KernelConfig(self):  # noqa: N802 - a class
        return self.heuristics.KernelConfig

    def choose(self, layout: str, m: int, n: int, k: int, groups: int, num_sms: int, *out_format):
        """The LaunchPlan (config, grid, num_tiles) the API would use (for an output format, where given)."""
        return self.heuristics.choose(layout, m, n, k, groups, num_sms, *out_format)

    def small_m_choice(self, layout: str, m: int, n: int, k: int, num_sms: int, out_format: str = "bfloat16"):
        """The small-M kernel's configuration where the API runs it, else None (and None in packages without it)."""
        try:
            hs = self._mod("heuristics_small_m")
        except ModuleNotFoundError:
            return None
        if hasattr(hs, "for_call"):
            return hs.for_call(layout, m, n, k, num_sms, out_format)
        # v30, before for_call: the same rule
        return hs.choose_small_m(m, n, k, num_sms) if layout == "normal" and out_format == "bfloat16" else None

    def small_m_config(self, fields: dict):
        """This package's SmallMConfig from another's fields (those it lacks keep their defaults)."""
        return self._mod("small_m").SmallMConfig(**fields)

    def small_m_bind(self, cfg, a, a_scale, b, b_scale, out):
        """small_m.bind: a callable(stream_ptr=...) launching the small-M configuration `cfg` on these arrays."""
        return self._mod("small_m").bind(cfg, a, a_scale, b, b_scale, out)

    def make_config(self, layout: str, n: int, k: int, groups: int, block_m: int, block_n: int, **kw):
        return self.heuristics.make_config(layout, n, k, groups, block_m, block_n, **kw)

    def block_n_candidates(self, block_m: int) -> list[int]:
        return self.heuristics.block_n_candidates(block_m)

    def config(self, fields: dict):
        """A KernelConfig from dataclasses.asdict of one (e.g. a configuration of the other package). Fields
        this package's KernelConfig does not have must hold their default there (an older package builds
        what the newer one's defaults mean, or refuses)."""
        import dataclasses

        known = {f.name: f for f in dataclasses.fields(self.KernelConfig)}
        current = {f.name: f for f in dataclasses.fields(current_config_type())}
        for name, value in fields.items():
            if name not in known and (name not in current or current[name].default != value):
                raise ValueError(f"{name}={value!r} has no counterpart in {self.name}'s KernelConfig")
        return self.KernelConfig(**{k: v for k, v in fields.items() if k in known})

    def grid_for(self, cfg, tiles: int, num_sms: int) -> int:
        return self.heuristics.grid_for(cfg, tiles, num_sms)

    def launch_plan(self, cfg, grid: int, num_tiles: int):
        return self.heuristics.LaunchPlan(config=cfg, grid=grid, num_tiles=num_tiles)

    @contextlib.contextmanager
    def api_choosing(self, choose=None):
        """The public API plans with `choose(layout, m, n, k, groups, sms)` inside the block (None: its own
        heuristic); its cache of prepared calls is emptied before and after."""
        api = self._mod("api")
        real = api.choose
        api._prepared.clear()
        api.choose = choose or real
        try:
            small = self._mod("heuristics_small_m")
        except ModuleNotFoundError:
            small = None
        try:
            if choose is not None and small is not None:   # a forced configuration runs, not the small-M kernel
                with small.disabled():
                    yield
            else:
                yield
        finally:
            api.choose = real
            api._prepared.clear()

    # ------------------------------------------------------------------ building and launching
    def build(self, cfg, ffma=None) -> bytes:
        """The cubin (fills the JIT caches under the key the launch path looks up)."""
        return (self._host() or self._mod("kernels")).build(cfg, ffma=ffma)

    def render(self, cfg) -> str:
        return (self._host() or self._mod("kernels")).render(cfg)

    def bind(self, cfg, a, a_scale, b, b_scale, out, *, layout=None, grid=None, ffma=None, out_scale=None):
        """run(out=..., stream_ptr=...) launching `cfg` on these arrays (e4m3 output: its scales to `out_scale`);
        run.launcher.grid/.kernel."""
        extra = {} if out_scale is None else {"out_scale": out_scale}  # (packages before e4m3 output lack it)
        run = (self._host() or self._mod("runtime")).bind(cfg, a, a_scale, b, b_scale, out, layout=layout, grid=grid,
                                                         ffma=ffma, **extra)
        # Packages before 55579bd launched with the layout's and out_scale's pointers and kept no reference: the
        # callable holds them here, or their memory goes to the next allocation (NOTES.md v41).
        run.arrays = (layout, out_scale)
        return run

    def device_properties(self, device: int) -> dict:
        return self._mod("runtime").device_properties(device)

    def compile_cubin(self, source: str) -> bytes:
        return self._mod("jit").compile_cubin(source)

    def nvrtc_version(self) -> tuple[int, int]:
        return self._mod("jit").nvrtc_version()

    def cache_dir(self) -> Path:
        return self._mod("jit").cache_dir()

    def source_dir(self) -> Path:
        return self._mod("jit").source_dir()

    # ------------------------------------------------------------------ for the timeline tracer
    def set_source_dir(self, path: Path) -> None:
        """Build from another copy of cuda_src/ (read by the compile options and the cache key)."""
        jit = self._mod("jit")
        jit.source_dir = lambda: Path(path).resolve()
        jit._sources_digest.cache_clear()

    def wrap_render(self, wrapper) -> None:
        """render = wrapper(original render); build() looks render up at call time."""
        host = self._host() or self._mod("kernels")
        host.render = wrapper(host.render)

    def forget_loaded(self) -> None:
        """Drop loaded modules and launchers (builds that differ outside the cache key share keys)."""
        owner = self._host() or self._mod("runtime")
        owner._kernels.clear()
        owner._launchers.clear()

    def module_global(self, kernel, name: str) -> tuple[int, int]:
        """(device pointer, bytes) of a __device__ variable of a loaded kernel's module."""
        from cuda.bindings import driver as cu

        runtime = self._mod("runtime")
        ptr, size = runtime._check(cu.cuModuleGetGlobal(kernel.module, name.encode()), f"cuModuleGetGlobal({name})")
        return int(ptr), int(size)

    def clear_module_global(self, kernel, name: str) -> None:
        from cuda.bindings import driver as cu

        ptr, size = self.module_global(kernel, name)
        self._mod("runtime")._check(cu.cuMemsetD8(ptr, 0, size), "cuMemsetD8")


def current_config_type():
    return importlib.import_module("cugemm8.heuristics").KernelConfig


@functools.lru_cache(maxsize=None)
def current() -> Library:
    """This checkout's cugemm8."""
    return Library(importlib.import_module("cugemm8"))


def add_base_argument(ap) -> None:
    """The A/B tools' --base: another checkout's cugemm8/ and cuda_src/, loaded by load()."""
    ap.add_argument("--base", required=True, help="folder holding the other checkout's cugemm8/ and cuda_src/")


def load(root: str | Path, alias: str) -> Library:
    """The cugemm8 of another checkout (a folder holding cugemm8/ and cuda_src/, as from
    `git archive <commit> cugemm8 cuda_src`) under the module name `alias`. Its relative imports resolve
    inside that copy, and its jit.source_dir() finds that copy's cuda_src/."""
    pkg_dir = Path(root).resolve() / "cugemm8"
    if alias in sys.modules:
        loaded = sys.modules[alias]
        if Path(loaded.__file__).resolve().parent != pkg_dir:
            raise ValueError(f"{alias} is already loaded from {loaded.__file__}")
        return Library(loaded)
    init = pkg_dir / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"no cugemm8 package at {pkg_dir}")
    spec = importlib.util.spec_from_file_location(alias, init, submodule_search_locations=[str(pkg_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
            del sys.modules[name]
        raise
    return Library(module)
