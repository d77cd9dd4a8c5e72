"""Own half staged in shared memory (frees registers, so more blocks fit per SM).
Run from the repository root: `python3 benchmarks/probes/cluster_reduce/own_half_cp_async.py DIR`. Writes, for
T in 128/256/512: x_sA_T.cu (the compiler's output for `A = shared(X[...])`: ld.global + st.shared
through registers) and x_cpA_T.cu (the same with cp.async for A, waited on just before the add),
plus x_now_T.cu (examples/cluster_reduce_dsmem.tk as it is) and x_hbm_1024.cu."""
import os, re, subprocess, sys

out = sys.argv[1] if len(sys.argv) > 1 else ".device/exp3"
os.makedirs(out, exist_ok=True)
src = open("examples/cluster_reduce_dsmem.tk").read()
sA = src.replace("    A = X[b : +1, r * cdiv(N, 2) : +cdiv(N, 2)]", "    A = shared(X[b : +1, r * cdiv(N, 2) : +cdiv(N, 2)])")
assert sA != src
open(os.path.join(out, "sA.tk"), "w").write(sA)


def tkc(path, dst, *defs):
    cmd = [sys.executable, "-m", "tkc.cli", "compile", "--target", "cuda", "-D", "B=2112", *sum((["-D", d] for d in defs), []),
           path, "-o", dst]
    subprocess.run(cmd, check=True)
    return open(dst).read()


for T in (128, 256, 512):
    tkc("examples/cluster_reduce_dsmem.tk", os.path.join(out, f"x_now_{T}.cu"), f"threads={T}")
    code = tkc(os.path.join(out, "sA.tk"), os.path.join(out, f"x_sA_{T}.cu"), f"threads={T}")
    # A's copy: `tk_load<16>(gv, &X[...]); ... tk_store<16>(&A[col], ov);` -> one cp.async per word
    pat = re.compile(r"alignas\(16\) __half gv\[8\];\n\s*tk_load<16>\(gv, (&X\[[^;]*\])\);\n\s*alignas\(16\) __half ov\[8\];\n"
                     r"\s*#pragma unroll\n\s*for \(int e = 0; e < 8; \+\+e\) ov\[e\] = gv\[e\];\n\s*tk_store<16>\(&A\[col\], ov\);")
    code, n = pat.subn(r"tk_cp_async<16>(&A[col], \1);", code, count=1)
    assert n == 1, "A copy not found"
    code = code.replace("    // tile.copy(%X, %0)", "    tk_cp_async_commit();\n    // tile.copy(%X, %0)", 1)
    code = code.replace("    // tile.elementwise(%A, %P, %T)", "    tk_cp_async_wait<0>();\n    // tile.elementwise(%A, %P, %T)", 1)
    code = code.replace('"kernel": "cluster_reduce_dsmem"', '"kernel": "cluster_reduce_dsmem"')
    open(os.path.join(out, f"x_cpA_{T}.cu"), "w").write(code)
tkc("examples/cluster_reduce_hbm.tk", os.path.join(out, "x_hbm_1024.cu"))
