"""Schedule constants chosen by the cost model (`schedule="model"`, `tkc compile --schedule model`).

For a kernel with a `tune` clause, every configuration of its space (tkc/tune.py's
`build_space`; constants given explicitly stay fixed) is lowered and tiled once
(`tile,defer-reduce,fold-copies,software-pipeline,check-smem-fit`: a configuration that breaks a `requires`
or does not fit in shared memory drops out), and passes/cost_model.py estimates its time. With
static dims the best one is the choice. With dynamic dims (`dynamic M`) the choice is made per
bucket of their values (M in [1, 16], [17, 64], ..., [1025, 4096], [4097, 8192], [8193, 16384],
[16385, ...): estimated at the bucket's upper end, the last at 65536), so a kernel compiles one
specialization per distinct choice at its first call and none afterwards (issue 13: "a call at an
M never seen before compiles nothing"). The buckets grow by 4x, but by 2x from 4096 to 16384:
estimated at 16384, M = 8192 got a choice made for twice its blocks (MiSS at K 4096, N 11008:
U = 1, 107.4 us on an H200, where the choice at 8192, U = 2, took 94.6; docs/PERFORMANCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl.diagnostics import TkError, error

BUCKET_ENDS = (16, 64, 256, 1024, 4096, 8192, 16384)  # upper ends; the last bucket is open
OPEN_BUCKET_AT = 65536  # where the open bucket is estimated
MODEL_PIPELINE = "tile,defer-reduce,fold-copies,software-pipeline,check-smem-fit"


def bucket_of(value: int) -> int:
    """The index of the bucket that holds a dynamic dim's `value`."""
    return next((i for i, end in enumerate(BUCKET_ENDS) if value <= end), len(BUCKET_ENDS))


def bucket_value(index: int) -> int:
    """The value a bucket is estimated at."""
    return BUCKET_ENDS[index] if index < len(BUCKET_ENDS) else OPEN_BUCKET_AT


def bucket_label(index: int) -> str:
    lo = 1 if index == 0 else BUCKET_ENDS[index - 1] + 1
    return f"{lo}..{BUCKET_ENDS[index]}" if index < len(BUCKET_ENDS) else f"{lo}.."


@dataclass
class Choice:
    """The chosen constants at one set of dynamic values, and every candidate's estimate
    (best first): (constants, passes.cost_model.Estimate)."""

    consts: dict[str, int]
    values: dict[str, int]
    ranking: list


class Chooser:
    """Lowers each configuration once and estimates it at any dynamic values. `dims`: the static
    dims; `fixed`: constants given explicitly; `dynamic`: extra dynamic dims (as `--dynamic`)."""

    def __init__(self, path: str, text: str, kernel, dims: dict[str, int], fixed: dict[str, int],
                 dynamic: tuple[str, ...] = ()):
        from tkc.tune import build_space, configurations

        if not kernel.tune:
            raise error(kernel.loc, f"`schedule=\"model\"` chooses among the values of a `tune` clause, and "
                        f"`{kernel.name}` has none", "add one, e.g. `tune BM = (16, 64), BN = (64, 128)`")
        self.path, self.text, self.dims, self.dynamic = path, text, dims, dynamic
        self.names = sorted(set(kernel.dynamic) | set(dynamic))
        self.configs = list(configurations(build_space(kernel, fixed, {})))
        self._modules: list | None = None

    def modules(self) -> list:
        """(config, tiled module) of every configuration that lowers and fits."""
        if self._modules is None:
            from passes.manager import parse_pipeline, run_pipeline
            from tkc import driver

            passes = parse_pipeline(MODEL_PIPELINE)
            self._modules = []
            for config in self.configs:
                try:
                    module = driver.frontend(self.path, {**self.dims, **config}, self.text, self.dynamic)
                    self._modules.append((config, run_pipeline(module, passes)))
                except TkError:  # breaks a `requires`, a tile layout or the shared-memory budget
                    continue
            if not self._modules:
                raise error(driver.frontend(self.path, self.dims, self.text, self.dynamic).func.loc,
                            "no configuration of the `tune` space compiles at these dims",
                            "`tkc tune --dry-run` lists why each one is rejected")
        return self._modules

    def choose(self, values: dict[str, int]) -> Choice:
        """The best configuration at dynamic dims `values` (empty for a static kernel)."""
        from passes.cost_model import estimate

        ranking = sorted(((c, estimate(m, values)) for c, m in self.modules()), key=lambda t: t[1].time_us)
        return Choice(dict(ranking[0][0]), dict(values), ranking)

    def buckets(self) -> list[tuple[int, Choice]]:
        """(bucket index, choice) for every bucket of the dynamic dims (one, `-1`, when static).
        Several dynamic dims share the bucket index (each is estimated at its value)."""
        if not self.names:
            return [(-1, self.choose({}))]
        return [(i, self.choose({n: bucket_value(i) for n in self.names})) for i in range(len(BUCKET_ENDS) + 1)]


def explain(chooser: Chooser, top: int = 3) -> list[str]:
    """`tkc compile --explain` lines: per bucket, the choice and the best `top` estimates."""
    lines = [f"schedule chosen by the cost model (passes/cost_model.py) over {len(chooser.modules())} of "
             f"{len(chooser.configs)} configurations of the `tune` space"]
    for index, choice in chooser.buckets():
        where = (" at " + ", ".join(f"{n} in {bucket_label(index)} (estimated at {v})" for n, v in choice.values.items())
                 if index >= 0 else "")
        lines.append(f"{where.strip() or 'at the kernel dims'}: {_fmt(choice.consts)}")
        for consts, est in choice.ranking[:top]:
            lines.append(f"    {_fmt(consts)}: {est.line()}")
    return lines


def _fmt(consts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(consts.items()))
