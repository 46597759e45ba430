"""Device check (not committed): load_d configurations against the library's reduce-add picks, bitwise."""
import cupy
import cugemm8
from cugemm8 import heuristics, heuristics_wgrad as hw, wgrad

orig = hw.choose


def forced(block_n=None):
    def choose(layout, m, n, groups, sms):
        p = orig(layout, m, n, groups, sms)
        c = p.config
        bn = block_n or c.block_n
        cfg = hw.make_config(layout, c.n, groups, c.block_m, bn, transpose_d=c.transpose_d, load_d=True)
        rows = n if c.transpose_d else m
        tiles = -(-rows // c.block_m) * -(-c.n // bn) * (groups if layout == "k_grouped" else 1)
        return heuristics.plan_for(cfg, tiles, sms)
    return choose


def operands(rng, m, k):
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    return cugemm8.per_token_cast_to_fp8(x)


ok = True
for m, n, k in [(7168, 2112, 4096), (7168, 4096, 4096), (200, 304, 640), (2048, 7168, 1024), (1000, 4000, 384)]:
    rng = cupy.random.default_rng(m + n + k)
    a, sa = operands(rng, m, k)
    b, sb = operands(rng, n, k)
    init = rng.standard_normal((m, n), dtype=cupy.float32)
    outs = {}
    for name, choose in (("reduce-add", orig), ("load_d", forced()), ("load_d 152", forced(152))):
        hw.choose = choose
        wgrad._prepared.clear()
        out = init.copy()
        cugemm8.wgrad_matmul(a, sa, b, sb, out)
        again = init.copy()
        cugemm8.wgrad_matmul(a, sa, b, sb, again)
        c = rng.standard_normal((m, n), dtype=cupy.float32) if name == "load_d" else None
        if c is not None:
            sep = cupy.empty_like(out)
            cugemm8.wgrad_matmul(a, sa, b, sb, sep, c=c)
            c_ref = c.copy()
            hw.choose = orig
            wgrad._prepared.clear()
            cugemm8.wgrad_matmul(a, sa, b, sb, c_ref)
            same_c = bool((sep == c_ref).all())
            print(f"{m}x{n}x{k} {name} with c: bitwise equal to reduce-add {same_c}")
            ok &= same_c
        outs[name] = out
        rep = bool((out == again).all())
        ok &= rep
        print(f"{m}x{n}x{k} {name}: {hw.choose is orig and 'pick' or ''} repeat bitwise {rep}")
    for name in ("load_d", "load_d 152"):
        eq = bool((outs[name] == outs["reduce-add"]).all())
        ok &= eq
        print(f"{m}x{n}x{k} {name} bitwise equal to reduce-add: {eq}, max diff {float(cupy.abs(outs[name] - outs['reduce-add']).max())}")
    hw.choose = orig

for g, (m, n), sizes in [(4, (512, 640), [256, 0, 384, 128]), (8, (2048, 7168), [4096 + 128 * ((i % 3) - 1) for i in range(8)]),
                          (4, (7168, 4096), [1024, 1152, 0, 896])]:
    rng = cupy.random.default_rng(g + m)
    ktot = sum(sizes)
    a, sa = operands(rng, m, ktot)
    b, sb = operands(rng, n, ktot)
    ks = cupy.asarray(sizes, dtype=cupy.int32)
    init = rng.standard_normal((g, m, n), dtype=cupy.float32)
    outs = {}
    for name, choose in (("reduce-add", orig), ("load_d", forced()), ("load_d 152", forced(152))):
        hw.choose = choose
        wgrad._prepared.clear()
        out = init.copy()
        cugemm8.k_grouped_wgrad_matmul(a, sa, b, sb, ks, out)
        outs[name] = out
    hw.choose = orig
    for name in ("load_d", "load_d 152"):
        eq = bool((outs[name] == outs["reduce-add"]).all())
        ok &= eq
        print(f"k-grouped G{g} {m}x{n} {sizes[:4]}: {name} bitwise equal to reduce-add: {eq}")
    untouched = all(bool((outs["load_d"][i] == init[i]).all()) for i, s in enumerate(sizes) if s == 0)
    ok &= untouched
    print("  empty groups untouched:", untouched)
print("ALL OK" if ok else "FAILURES")
