"""What the probes of generated-and-edited CUDA variants share (int8_gemv/, sgemm/): writing the
variants' sources into a folder (their gen.py) and picking the kernels a run times (their
probe.py: `[VARIANT ...] [--dir DIR]`)."""

from __future__ import annotations

import glob
import os
import tempfile


def write_sources(folder: str, sources: dict[str, str]) -> list[str]:
    """Write each `name: CUDA source` to folder/name.cu; returns the names, sorted."""
    os.makedirs(folder, exist_ok=True)
    for name, text in sources.items():
        with open(os.path.join(folder, name + ".cu"), "w", encoding="utf-8") as f:
            f.write(text)
    return sorted(sources)


def chosen_kernels(args: list[str], prefix: str, generate) -> list[tuple[str, str]]:
    """(name, path) of the .cu kernels to time: those of `--dir DIR`, else what `generate(folder)`
    writes into a new temporary folder; only the names given as arguments, when there are any."""
    folder = args[args.index("--dir") + 1] if "--dir" in args else tempfile.mkdtemp(prefix=prefix)
    if "--dir" not in args:
        generate(folder)
    only = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] != "--dir")]
    paths = sorted(glob.glob(os.path.join(folder, "*.cu")))
    return [(os.path.basename(p)[:-3], p) for p in paths if not only or os.path.basename(p)[:-3] in only]
