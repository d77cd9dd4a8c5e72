"""Own half not held at all: each block pushes the peer's half, and after the cluster barrier
reads its own half straight from global memory (`T = X[own half] + P`): 16 KiB of shared memory
and few registers per block, so more blocks per SM, at the cost of a second global read after
the barrier. Variant `pf`: the block first asks for its own half in L2 with one
`cp.async.bulk.prefetch.L2.global` (sm_90), so the read after the barrier hits L2.
Run from the repository root: `python3 benchmarks/probes/cluster_reduce/own_half_from_global.py DIR`."""
import os, subprocess, sys

out = sys.argv[1] if len(sys.argv) > 1 else ".device/exp4"
os.makedirs(out, exist_ok=True)
src = open("examples/cluster_reduce_dsmem.tk").read()
late = src.replace("    A = shared(X[b : +1, r * cdiv(N, 2) : +cdiv(N, 2)])\n", "")
late = late.replace("    T = A + P\n", "    T = X[b : +1, r * cdiv(N, 2) : +cdiv(N, 2)] + P\n")
assert late != src and "A =" not in late.split("{", 1)[1]
open(os.path.join(out, "late.tk"), "w").write(late)

PF = ('    if (tid == 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: '
      '"l"(&X[b * 16384 + r * 8192]), "r"(16384) : "memory");\n')
for T in (128, 256, 512):
    dst = os.path.join(out, f"x_late_{T}.cu")
    subprocess.run([sys.executable, "-m", "tkc.cli", "compile", "--target", "cuda", "-D", "B=2112", "-D", f"threads={T}",
                    os.path.join(out, "late.tk"), "-o", dst], check=True)
    code = open(dst).read()
    marker = "    extern __shared__ __align__(128) unsigned char smem[];\n"
    assert marker in code
    open(os.path.join(out, f"x_latepf_{T}.cu"), "w").write(code.replace(marker, marker + PF, 1))
for T in (128,):
    subprocess.run([sys.executable, "-m", "tkc.cli", "compile", "--target", "cuda", "-D", "B=2112", "-D", f"threads={T}",
                    "examples/cluster_reduce_dsmem.tk", "-o", os.path.join(out, f"x_now_{T}.cu")], check=True)
subprocess.run([sys.executable, "-m", "tkc.cli", "compile", "--target", "cuda", "-D", "B=2112",
                "examples/cluster_reduce_hbm.tk", "-o", os.path.join(out, "x_hbm_1024.cu")], check=True)
