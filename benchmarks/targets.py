"""The auto-scheduling issue's speed targets, checked against one suite run's table.

    python benchmarks/targets.py benchmarks/out/suite-<stamp>.csv

For every target and workload: the ratio the run measured, whether it meets the target,
and for a miss the GFLOP/s that would meet it as a percentage of the workload's bound in
the same run (the roofline of ``measure.roofline`` when the table has it, else the FMA
peak). A miss that needs more than 100% of the bound cannot be closed on that machine by
any schedule: the baseline is already closer to the limit than the target allows.
``tune_suite.py`` prints this after its table.

The targets (issue "auto-scheduling", at 256 trials unless said): GMM >= 1.2x PyTorch
CPU, every other workload >= 1.0x, the fused ones (DENSE, CONVLAYER, TBG) >= 1.2x; every
workload >= 1.5x TVM MetaSchedule at 64 trials and >= 1.2x at 256; tuning at least 4x
TVM's trials per second.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass

FUSED = {"DENSE", "CONVLAYER", "TBG"}


@dataclass(frozen=True)
class Check:
    target: str
    workload: str
    ratio: float
    want: float
    needed_pct: float | None   # the GFLOP/s that meets the target, % of the bound

    @property
    def met(self) -> bool:
        return self.ratio >= self.want

    def line(self) -> str:
        head = f"{self.workload:9s} {self.target:15s} {self.ratio:5.2f}x (>= {self.want}x)"
        if self.met:
            return f"{head} met"
        if self.needed_pct is None:
            return f"{head} MISSED"
        beyond = ", beyond it" if self.needed_pct > 100 else ""
        return f"{head} MISSED: needs {self.needed_pct:.0f}% of the bound{beyond}"


def _num(cell: str) -> float | None:
    try:
        return float(cell.rstrip("x"))
    except ValueError:
        return None


# (the ratio's column, which is also the target's name; the ratio wanted, None for the
# PyTorch one, which depends on the workload; the baseline's GFLOP/s column)
TARGETS = (("vs PyTorch", None, "PyTorch GFLOP/s"),
           ("vs TVM @64", 1.5, "TVM GFLOP/s @64"),
           ("vs TVM @256", 1.2, "TVM GFLOP/s @256"),
           ("trials/s vs TVM", 4.0, None))


def checks(rows: list[dict[str, str]]) -> list[Check]:
    """Every target on every row of a suite table (rows as ``csv.DictReader`` gives)."""
    out: list[Check] = []
    for row in rows:
        name = row["workload"]
        ours = _num(row.get("re-timed @256", ""))
        if ours is None:
            continue
        pct = _num(row.get("% roofline", "")) or _num(row.get("% peak", ""))
        bound = ours / (pct / 100) if pct else None
        for column, want, base_column in TARGETS:
            ratio = _num(row.get(column, ""))
            if ratio is None:
                continue
            if want is None:
                want = 1.2 if name == "GMM" or name in FUSED else 1.0
            base = _num(row.get(base_column, "")) if base_column else None
            needed = 100 * want * base / bound if base and bound else None
            out.append(Check(column, name, ratio, want, needed))
    return out


def summary(checks_: list[Check]) -> str:
    """One line per target (how many met), then one line per miss."""
    lines = []
    for target in dict.fromkeys(c.target for c in checks_):
        these = [c for c in checks_ if c.target == target]
        met = sum(c.met for c in these)
        lines.append(f"{target}: met by {met} of {len(these)}")
    lines += [c.line() for c in checks_ if not c.met]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[0], newline="") as f:
        print(summary(checks(list(csv.DictReader(f)))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
