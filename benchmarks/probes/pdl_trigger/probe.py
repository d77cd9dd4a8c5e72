"""Probe (issue 10): what `griddepcontrol` costs a small kernel launched the ordinary way.

examples/accum.tk through `cuda` at B x N f32 (64 x 4096, 64 x 768, 64 x 288, 1 x 4096), each
checked against torch, then timed as CUDA-graph replays (tkc.bench.graph_ms over 8 input sets,
three rounds, min-max printed) next to torch eager (`X + D`). Variants of the generated source:
* `ordinary`: as generated (the runtime passes tk_pdl = 0: the wait only, no trigger);
* `trigger`: `griddepcontrol.launch_dependents` executed whatever the flag (what every kernel did
  before the flag; the probe's first form timed the generated kernel of 4d2390c for it);
* `no_pdl`: neither the wait nor the trigger;
* `t128` / `bn2048`: the example at 128 threads / BN = 2048 (every thread holds a chunk);
* `eager_out` (tenth session): eager writing each set's own Y (`torch.add(X, D, out=Y)`);
* `w4` (tenth session): chunks of 4 f32 (one 16-byte vector) instead of 8, so all 256 threads of a
  1024-wide tile hold one (the generated form leaves half of them idle).
Run on the device machine from the repository root: `python3 benchmarks/probes/pdl_trigger/probe.py`.
"""

from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

WAIT = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
FLAG = "if (programmatic && static_cast"


def main() -> None:
    import torch

    from codegen import cuda
    from tkc import driver
    from tkc.bench import Timer, graph_ms
    from tkc.cuda_runtime import CudaLaunch

    timer = Timer(cpu=False, warmup_ms=25, rep_ms=150)
    tmp = tempfile.mkdtemp()
    path = os.path.join(ROOT, "examples", "accum.tk")
    print(torch.cuda.get_device_name(), "(graph us, min-max of 3 rounds)")
    for B, N in [(64, 4096), (64, 768), (64, 288), (1, 4096), (64, 512)]:
        def gen(**consts) -> str:
            return cuda.emit(driver.optimize(driver.frontend(path, {"B": B, "N": N, **consts}), "cuda"))

        src = gen()
        assert WAIT in src and FLAG in src
        variants = {"ordinary": src, "trigger": src.replace(FLAG, "if (static_cast"),
                    "no_pdl": src.replace(WAIT, "").replace(FLAG, "if (false && static_cast"),
                    "t128": gen(threads=128), "bn2048": gen(BN=2048)}
        if "ch < 128" in src and "ch % 128 * 8" in src:  # w4: chunks of 4 (one 16-byte vector), every thread busy
            variants["w4"] = (src.replace("[8]", "[4]").replace("ch < 128", "ch < 256").replace("ch % 128 * 8", "ch % 256 * 4")
                              .replace("e < 8", "e < 4").replace("chunk of 8", "chunk of 4"))
        sets = [(torch.randn(B, N, device="cuda"), torch.randn(B, N, device="cuda"), torch.empty(B, N, device="cuda"))
                for _ in range(8)]
        # eager allocates its output: inside a graph that is one block of the graph's pool, reused by
        # every call, while the variants (and eager_out) write each set's own Y
        fns = {"eager": lambda X, D, Y: X + D, "eager_out": lambda X, D, Y: torch.add(X, D, out=Y)}
        for name, text in variants.items():
            cu = os.path.join(tmp, f"{name}_{B}_{N}.cu")
            with open(cu, "w", encoding="utf-8") as f:
                f.write(text)
            k = CudaLaunch(cu, text)
            fns[name] = lambda X, D, Y, k=k: k(X, D, Y)
            X, D, Y = sets[0]
            fns[name](X, D, Y)
            torch.cuda.synchronize()
            assert torch.equal(Y, X + D), name
        res = {n: [] for n in fns}
        for _ in range(3):
            for n, f in fns.items():
                res[n].append(graph_ms(timer, f, sets) * 1e3)
        print(f"accum B={B} N={N}: " + " | ".join(f"{n} {min(v):.3f}-{max(v):.3f}" for n, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
