"""Values known only when a kernel runs, checked inside the kernel on the GPU (`cuda` and
`tilelang`; tests/test_index_check.py has the generated code and the CPU emulation):

* examples/embedding.tk at tile-edge shapes with ids at 0 and V - 1 matches torch, called plainly
  and captured in a CUDA graph without tkc.assume_valid (no host sync to forbid), replayed with
  new ids;
* an out-of-range id (V, -1) in a fresh process: the launch fails at the synchronize, the
  process prints the .tk location and the value, and no output row is written from outside E;
* a runtime scalar passed as a device tensor (`pos` of attention.tk), replayed from a CUDA graph
  captured without tkc.assume_valid at a position that breaks `requires pos < S` (and at -1):
  the replay fails with the requirement's location and the value.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import tkc

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMBEDDING = os.path.join(ROOT, "examples", "embedding.tk")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tkc-cache"))


@pytest.mark.parametrize("target", ["cuda", "tilelang"])
def test_in_range_ids_match_torch_and_capture_without_assume_valid(cache_dir, target):
    V, N = 77, 1100  # N off BN
    k = tkc.compile(EMBEDDING, target=target, cache_dir=cache_dir, BN=256)
    g = torch.Generator(device="cuda").manual_seed(0)
    E = torch.randn(V, N, device="cuda", generator=g) * 1e3 + 7
    ids = torch.tensor([0, V - 1, 5, V - 1, 0], dtype=torch.int32, device="cuda")
    assert torch.equal(k(E, ids), E[ids.long()])
    k(E, ids)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = k(E, ids)
    for new in ([V - 1, 1, 2, 3, 0], [9, 9, 9, V - 2, 76]):
        ids.copy_(torch.tensor(new, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, E[ids.long()])


# The end of every child script: a failed launch shows at the synchronize (exit 7)
SYNC = """
try:
    torch.cuda.synchronize()
except RuntimeError as exc:
    print("launch failed:", str(exc).splitlines()[0], flush=True)
    sys.exit(7)
print("no error", flush=True)
"""


def _child(script: str, *argv: str) -> str:
    """Run `script` + SYNC in a fresh process (a trapped kernel leaves its CUDA context unusable);
    asserts that its launch failed, returns what it printed."""
    r = subprocess.run([sys.executable, "-c", script + SYNC, *argv], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 7, out
    return out


CHILD = """
import sys, torch, tkc
k = tkc.compile(sys.argv[1], target=sys.argv[2], cache_dir=sys.argv[3], BN=256)
E = torch.randn(77, 300, device="cuda")
ids = torch.tensor([3, int(sys.argv[4]), 5], dtype=torch.int32, device="cuda")
y = k(E, ids)
"""


@pytest.mark.parametrize("target, bad", [("cuda", 77), ("cuda", -1), ("tilelang", 77)])
def test_out_of_range_id_stops_the_kernel_with_its_location(cache_dir, target, bad):
    out = _child(CHILD, EMBEDDING, target, cache_dir, str(bad))
    assert f"embedding.tk:9:29: error: index tensor `ids` holds {bad}, outside [0, 77) of what it indexes" in out, out


CHILD_POS = """
import sys, torch, tkc
k = tkc.compile(sys.argv[1], target=sys.argv[2], cache_dir=sys.argv[3])
H, HD, S = 4, 32, 64
q, kc, vc = torch.randn(H, HD, device="cuda"), torch.randn(S, H * HD, device="cuda").half(), torch.randn(S, H * HD, device="cuda").half()
pos = torch.tensor([3], dtype=torch.int32, device="cuda")
k(q, kc, vc, pos)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = k(q, kc, vc, pos)
pos.fill_(int(sys.argv[4]))
g.replay()
"""


@pytest.mark.parametrize("target, bad, message", [
    ("cuda", 64, "attention.tk:19:14: error: requirement `pos < 64` does not hold at this call"),
    ("cuda", -1, "error: runtime scalar `pos` is negative"),
    ("tilelang", 64, "attention.tk:19:14: error: requirement `pos < 64` does not hold at this call")])
def test_runtime_scalar_out_of_range_stops_a_graph_replay(cache_dir, target, bad, message):
    path = os.path.join(ROOT, "examples", "attention.tk")
    out = _child(CHILD_POS, path, target, cache_dir, str(bad))
    assert message in out and f"with pos = {bad}" in out, out
