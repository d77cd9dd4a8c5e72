"""Per-target limits the passes check against.

Shared memory per block (bytes): sm_90 (H100/H200) 232448 with the opt-in attribute, sm_80
(A100) 166912, sm_89 (Ada) 101376; without opt-in every target is limited to the 48 KiB static
default (49152). Source: CUDA C++ Programming Guide, "Compute Capabilities" table (maximum shared
memory per thread block).
"""

SMEM_LIMITS = {"sm_90": 232448, "sm_90a": 232448, "sm_80": 166912, "sm_89": 101376, "static": 49152}
DEFAULT_SM = "sm_90"
