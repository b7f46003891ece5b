"""Time knob configs of one tuning task of a zoo model, against its default config.

    PYTHONPATH=. python -m benchmarks.task_configs resnet18 max_pool '{"pad_at": "root"}'
    PYTHONPATH=. python -m benchmarks.task_configs mobilenet_v2_224 "f32[3,6,1,1" '{"oc_blocks": 1}'
    python3 -m benchmarks.task_configs resnet18 "f32[1,128,7,7,4]" '{"ow_tile": 2}' --target opencl:nvidia

The task is the first of the model's tuning tasks (autotune.task.extract_tasks, heaviest
first) whose description contains PATTERN. The default config and each given config (JSON,
completed with the defaults) are measured by the tuner's Measurer (result checked against
the reference, median of `repeat` timings), `--rounds` times in turn, so a drifting machine
shows as a spread between rounds rather than as a difference between configs.
"""

from __future__ import annotations

import argparse
import json

from autotune.measure import MeasureOptions, Measurer
from autotune.task import extract_tasks, load_graph
from benchmarks.fuse_ab import _model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("pattern", help="a substring of the task's description")
    p.add_argument("configs", nargs="*", help="JSON knob configs (missing knobs: defaults)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--target", default="host", help="e.g. opencl:nvidia (timed on the local device)")
    args = p.parse_args(argv)
    tasks = extract_tasks(load_graph(_model(args.model), args.target), args.target)
    task = next((t for t in tasks if args.pattern in str(t)), None)
    if task is None:
        raise SystemExit(f"{args.model}: no tuning task matches {args.pattern!r}")
    space = task.space(args.target)
    configs = [space.default()] + [space.complete(json.loads(c)) for c in args.configs]
    print(task)
    with Measurer(MeasureOptions(target=args.target, workers=1, threads=args.threads)) as m:
        for _ in range(args.rounds):
            for c, r in zip(configs, m.measure(task, configs), strict=True):
                print(f"  {r.cost * 1e3:8.3f} ms  {r.error or ''} {c}")


if __name__ == "__main__":
    main()
