"""Probe (issue 10): does an int8 GEMV with int8 activations (llama2.c runq.c's form: X quantized
per group, integer dot products, one f32 scale per group of W and of X) reach 1.7x the f16 GEMV?

Variants, all at D = 11008, K = 4096, GS = 64, checked against float64 torch, then timed (do_bench
median over 4 rotated input sets, and as CUDA-graph replays) in one run:
* `f16_tuned`: examples/matmul_f16.tk at the tuned BD=2, BK=2048, 256 threads (the baseline);
* `q8_f32x`: examples/matmul_q8.tk (f32 activations) at its defaults;
* `w8a8_generated`: matmul_w8a8.tk here (integer products through the language's casts, NG
  groups per loop trip) as `tkc compile --target cuda` generates it (`__dp4a` since the
  `fuse-int8-dot` pass);
* `w8a8_example*`: examples/matmul_w8a8.tk through `cuda` (its integer sums as `__dp4a`, the
  `fuse-int8-dot` pass) at its defaults and other BD / threads;
* `read W and S only`: a kernel that only loads W's and S's bytes (16 bytes per thread), the
  time those bytes take on their own (a ceiling for every form above);
* `w8a8_dp4a*`: hand/w8a8_dp4a.cu, the generated layout with 4 __dp4a per row and 16 bytes, one
  row group of BD rows per block (BD = 4 unless `_bd2`/`_bd8`), or persistent over row groups
  (`_persistNB`: NB blocks).
`--reads` adds the same bytes read with 1 to 4 16-byte loads per thread at once, through `__ldg` or
`ld.global.nc.L1::no_allocate.L2::256B`, and grid-stride over 8 blocks per SM.
`--pdl` adds a column: the tkc kernels' graphs captured inside `tkc.programmatic_launch()` (each call
launched while the one before it finishes, as `tkc llama` captures its step), and the ratio to the
f16 GEMV captured alike; the hand-written kernels launch as before there.
`--prefetch` (sixteenth session) adds `f16_tuned_pf` and `w8a8_example_pf`: the same generated kernels
with one thread per block issuing `cp.async.bulk.prefetch.L2` of the block's rows of W (and S) before
`griddepcontrol.wait` when launched programmatically, so those bytes move while the kernel before it
finishes (a prefetch into L2 is safe whatever that kernel writes: L2 is coherent); timed with `--pdl`.
Run on the device machine: `python3 benchmarks/probes/int8_gemv/w8a8.py [--reads] [--pdl] [--prefetch] [--only=NAME,...]`.
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

D, K, GS = 11008, 4096, 64
G = K // GS


def read_only_source(n_w: int, n_s: int) -> str:
    """A kernel `rd` (CudaLaunch source) that reads W's `n_w` and then S's `n_s` 16-byte words once (one
    16-byte load per thread) and nothing else: the bytes' own time, a ceiling for every GEMV form."""
    src = (
        '// tkc-launch: {"kernel": "rd", "grid": [GRID, 1, 1], "block": [256, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}\n'
        '#include <cstdint>\n'
        'extern "C" __global__ void __launch_bounds__(256) rd(const uint4* __restrict__ w, const uint4* __restrict__ s, '
        'unsigned* __restrict__ out) {\n'
        '    const long i = (long)blockIdx.x * 256 + threadIdx.x;\n'
        '    const uint4 v = i < NW ? w[i] : s[i - NW];\n'
        '    if ((v.x ^ v.y ^ v.z ^ v.w) == 0x9e3779b9u) out[0] = 1;  // keeps the loads\n'
        '}\n')
    return src.replace("GRID", str(-(-(n_w + n_s) // 256))).replace("NW", str(n_w))


def main() -> None:
    import torch

    import tkc
    from miss import copy_bandwidth
    from tkc.bench import Timer, graph_ms, rotating
    from tkc.cuda_runtime import CudaLaunch
    from tkc.runtime import Kernel

    timer = Timer(cpu=False, warmup_ms=25, rep_ms=200)
    copy = copy_bandwidth(timer, "cuda", 1 << 30)
    print(f"{torch.cuda.get_device_name()}: copy {copy['tbps']:.2f} TB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    cache = tempfile.mkdtemp()
    q8, w8a8, f16 = [], [], []
    for _ in range(4):
        W = torch.randint(-127, 128, (D, G, GS), device="cuda", dtype=torch.int8, generator=g)
        S = torch.rand((D, G, 1), device="cuda", generator=g) * 0.02 + 0.001
        X = torch.randint(-127, 128, (G, GS), device="cuda", dtype=torch.int8, generator=g)
        SX = torch.rand((G, 1), device="cuda", generator=g) * 0.02 + 0.001
        w8a8.append((W, S, X, SX))
        q8.append((W, S, torch.randn((G, GS), device="cuda", generator=g)))
        f16.append((torch.randn((D, K), device="cuda", generator=g).half(), torch.randn((1, K), device="cuda", generator=g)))

    def ref_w8a8(W, S, X, SX):
        return (W.double() * S.double()).reshape(D, K) @ (X.double() * SX.double()).reshape(K, 1)

    def ref_q8(W, S, X):
        return (W.double() * S.double()).reshape(D, K) @ X.double().reshape(K, 1)

    def ref_f16(W, X):
        return W.double() @ X.double().T

    with open(os.path.join(HERE, "hand", "w8a8_dp4a.cu"), encoding="utf-8") as f:
        hand = f.read()
    launches = {}
    def form(bd: int, grid: int) -> str:  # BD rows per block; a grid below D / BD loops (PERSIST)
        text = hand.replace("BD = 4;", f"BD = {bd};").replace('"grid": [2752', f'"grid": [{grid}')
        return text if grid == D // bd else "#define PERSIST\n" + text

    for name, text in {"w8a8_dp4a": form(4, 2752), "w8a8_dp4a_bd2": form(2, 5504), "w8a8_dp4a_bd8": form(8, 1376),
                       "w8a8_dp4a_persist264": form(4, 264), "w8a8_dp4a_persist396": form(4, 396),
                       "w8a8_dp4a_persist528": form(4, 528), "w8a8_dp4a_persist792": form(4, 792),
                       "w8a8_dp4a_bd8_persist264": form(8, 264), "w8a8_dp4a_bd2_persist792": form(2, 792)}.items():
        path = os.path.join(cache, name + ".cu")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        launch = CudaLaunch(path, text)
        launches[name] = (lambda *a, k=launch: (k(*a, y := torch.empty((D, 1), device="cuda")), y)[1])
    example = os.path.join(ROOT, "examples", "matmul_w8a8.tk")
    variants = [
        ("f16_tuned", tkc.compile(os.path.join(ROOT, "examples", "matmul_f16.tk"), target="cuda", cache_dir=cache,
                                  BD=2, BK=2048, threads=256), f16, ref_f16, D * K * 2 + K * 4 + D * 4),
        ("q8_f32x", tkc.compile(os.path.join(ROOT, "examples", "matmul_q8.tk"), target="cuda", cache_dir=cache),
         q8, ref_q8, D * K + D * G * 4 + K * 4 + D * 4),
        ("w8a8_generated", tkc.compile(os.path.join(HERE, "matmul_w8a8.tk"), target="cuda", cache_dir=cache),
         w8a8, ref_w8a8, D * K + D * G * 4 + K + G * 4 + D * 4),
    ] + [(f"w8a8_example{tag}", tkc.compile(example, target="cuda", cache_dir=cache, **consts), w8a8, ref_w8a8,
          D * K + D * G * 4 + K + G * 4 + D * 4)
         for tag, consts in (("", {}), ("_bd1", {"BD": 1}), ("_bd4", {"BD": 4}), ("_bd4_t512", {"BD": 4, "threads": 512}),
                             ("_bd8_t512", {"BD": 8, "threads": 512}), ("_bd2_t128", {"BD": 2, "threads": 128}),
                             ("_bd1_t128", {"BD": 1, "threads": 128}), ("_bd1_t64", {"BD": 1, "threads": 64}))
    ] + [(name, fn, w8a8, ref_w8a8, D * K + D * G * 4 + K + G * 4 + D * 4) for name, fn in launches.items()]
    if "--prefetch" in sys.argv:
        def prefetching(kernel, inputs, ranges):  # the kernel's generated source, its block's rows prefetched
            _, jit = kernel.specialize(kernel.bind_dims(list(inputs)))
            assert not jit._modules  # (not loaded yet: the edited source is what runs)
            text = open(jit.source_path, encoding="utf-8").read()
            enter = "    tk_pdl_enter(tk_pdl);"
            assert text.count(enter) == 1
            pf = "".join(f'        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"({ptr} + (size_t)blockIdx.x * '
                         f'{n // size}), "r"({n}) : "memory");\n' for ptr, n, size in ranges)
            text = text.replace(enter, "    if (tk_pdl && threadIdx.x == 0) {  // probe: the block's rows into L2\n" + pf
                                + "    }\n" + enter)
            with open(jit.source_path, "w", encoding="utf-8") as f:
                f.write(text)
            jit.source = text
            return kernel

        cache_pf = tempfile.mkdtemp()  # (their own sources: the plain variants keep theirs)
        variants[1:1] = [("f16_tuned_pf", prefetching(tkc.compile(os.path.join(ROOT, "examples", "matmul_f16.tk"),
                                                                   target="cuda", cache_dir=cache_pf, BD=2, BK=2048,
                                                                   threads=256), f16[0], [("W", 2 * K * 2, 2)]),
                          f16, ref_f16, D * K * 2 + K * 4 + D * 4)]
        variants.append(("w8a8_example_pf", prefetching(tkc.compile(example, target="cuda", cache_dir=cache_pf), w8a8[0],
                                                        [("W", 2 * K, 1), ("S", 2 * G * 4, 4)]),
                         w8a8, ref_w8a8, D * K + D * G * 4 + K + G * 4 + D * 4))
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)
    if only:  # `--only=NAME,...`: those variants (the first, the baseline, among them)
        variants = [v for v in variants if v[0] in only]
    n_w, n_s = D * K // 16, D * G * 4 // 16
    read_src = read_only_source(n_w, n_s)
    read_path = os.path.join(cache, "read_only.cu")
    with open(read_path, "w", encoding="utf-8") as f:
        f.write(read_src)
    read_launch = CudaLaunch(read_path, read_src)
    flag = torch.zeros(4, dtype=torch.int32, device="cuda")
    read_gus = graph_ms(timer, lambda W, S, X, SX: read_launch(W, S, flag), w8a8) * 1e3
    # the same bytes, U 16-byte loads per thread (U in flight at once), or grid-stride over a grid of B blocks
    # per SM (`--reads`)
    reads = []
    if "--reads" in sys.argv:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        ld = {"": "*({q})", "nc": "__ldg({q})",
              "L2::256B": "tk_ld256({q})"}
        pre = ('__device__ __forceinline__ uint4 tk_ld256(const uint4* p) {\n'
               '    uint4 v;\n'
               '    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" '
               ': "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));\n'
               '    return v;\n'
               '}\n')
        for u, per_sm, hint in ((1, 0, ""), (1, 0, "nc"), (1, 0, "L2::256B"), (2, 0, ""), (4, 0, ""), (2, 0, "L2::256B"),
                                (4, 0, "L2::256B"), (4, 8, "L2::256B")):
            blocks = -(-(n_w + n_s) // (256 * u)) if not per_sm else per_sm * sms
            src = (f'// tkc-launch: {{"kernel": "rdu", "grid": [{blocks}, 1, 1], "block": [256, 1, 1], '
                   '"cluster": [1, 1, 1], "smem_bytes": 0}\n'
                   '#include <cstdint>\n' + pre +
                   'extern "C" __global__ void __launch_bounds__(256) rdu(const uint4* __restrict__ w, '
                   'const uint4* __restrict__ s, unsigned* __restrict__ out) {\n'
                   f'    unsigned x = 0;\n'
                   f'    for (long b = blockIdx.x; b * {256 * u} < {n_w + n_s}; b += gridDim.x) {{\n'
                   f'        uint4 v[{u}];\n'
                   f'        #pragma unroll\n'
                   f'        for (int j = 0; j < {u}; ++j) {{\n'
                   f'            const long i = b * {256 * u} + j * 256 + threadIdx.x;\n'
                   f'            v[j] = i < {n_w} ? {ld[hint].format(q="w + i")} : i < {n_w + n_s} ? '
                   f'{ld[hint].format(q="s + i - " + str(n_w))} : make_uint4(0, 0, 0, 0);\n'
                   '        }\n'
                   f'        #pragma unroll\n'
                   f'        for (int j = 0; j < {u}; ++j) x ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;\n'
                   '    }\n'
                   '    if (x == 0x9e3779b9u) out[0] = 1;  // keeps the loads\n'
                   '}\n')
            path = os.path.join(cache, f"read_u{u}_b{per_sm}_{hint.replace(':', '')}.cu")
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
            k = CudaLaunch(path, src)
            reads.append((f"read, {u} x 16 B" + (f", {per_sm}/SM" if per_sm else "") + (f", {hint}" if hint else ""),
                          graph_ms(timer, lambda W, S, X, SX, k=k: k(W, S, flag), w8a8) * 1e3))
    rows = []
    for name, fn, sets, ref, nbytes in variants:
        for s in sets[:2]:
            out = fn(*s)
            r = ref(*s)
            err = ((out.double() - r).norm() / r.norm()).item()
            if not err < 1e-5:
                raise SystemExit(f"{name}: relative error {err}")
        us = timer(rotating(fn, sets)) * 1e3
        gus = graph_ms(timer, fn, sets) * 1e3
        pgus = float("nan")
        if "--pdl" in sys.argv and isinstance(fn, Kernel):  # (a tkc kernel: its launches take the attribute)
            with tkc.programmatic_launch():
                pgus = graph_ms(timer, fn, sets) * 1e3
        rows.append((name, us, gus, nbytes / (gus * 1e-6) / 1e12 / copy["tbps"] * 100, pgus))
    base, pbase = rows[0][2], rows[0][4]
    print(f"{'variant':<22} {'us':>8} {'graph us':>9} {'% copy':>7} {'x f16 (graph)':>14}"
          + (f" {'pdl graph us':>13} {'x f16 (pdl)':>12}" if "--pdl" in sys.argv else ""))
    for name, us, gus, pct, pgus in rows:
        print(f"{name:<22} {us:8.1f} {gus:9.1f} {pct:6.0f}% {base / gus:13.2f}x"
              + (f" {pgus:13.2f} {pbase / pgus:11.3f}x" if "--pdl" in sys.argv else ""))
    nbytes = D * K + D * G * 4
    for name, gus in [("read W and S only", read_gus)] + reads:
        print(f"{name:<22} {'':>8} {gus:9.1f} {nbytes / (gus * 1e-6) / 1e12 / copy['tbps'] * 100:6.0f}% {base / gus:13.2f}x")


if __name__ == "__main__":
    main()
