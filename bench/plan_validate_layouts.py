"""`tuner plan --validate` with a chosen HSDP or TP layout, on the CPU proxy (real torchrun trials).

    nice -n 10 python bench/plan_validate_layouts.py fsdp+tp8 hsdp     # ~3 min each on a 2-core VM

`tuner plan` picks the fastest layout that fits (FSDP for 13B on 32 H100); this forces the
13B / 32 x H100 plan's choice to each named layout (names as in the plan's table) and runs its
proxy through `tuner.plan.validate_plan`: the layout in the workload's knobs, scaled to the
proxy (tuner/plan/_proxy.py), measured against helper.layouts' prediction. Folders:
/tmp/plan-validate-<layout>.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helper import plan_training  # noqa: E402
from tuner.plan import format_validation, validate_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layouts", nargs="+", help="plan layout names, e.g. hsdp fsdp+tp8 pp2+fsdp")
    args = ap.parse_args()
    plan_args = {"model_size": "13b", "gpu_count": 32, "tokens": 100e9}
    plan = plan_training(**plan_args)
    names = [r["layout"] for r in plan["layouts"]]
    for name in args.layouts:
        if name not in names:
            print(f"layout {name!r}: not in the plan; one of {', '.join(names)}", file=sys.stderr)
            return 2
        forced = {**plan, "chosen": next(r for r in plan["layouts"] if r["layout"] == name)}
        v = validate_plan(forced, plan_args, out_dir=Path(f"/tmp/plan-validate-{name}"))["validation"]
        print(f"=== chosen {name}\n{format_validation(v)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
