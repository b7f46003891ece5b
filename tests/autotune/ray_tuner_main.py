"""One tuner process of tests/autotune/test_ray_tune.py: tunes a matmul task on a Ray cluster
and reports every result the tuner recorded, one JSON line each, flushed as it goes.

    python tests/autotune/ray_tuner_main.py ADDRESS DEVICE DB REPORT M K N TRIALS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from autotune.db_open import open_database
    from autotune.measure import MeasureOptions
    from autotune.ray_measure import RayMeasurer
    from autotune.task import Task
    from autotune.tuner import TuneOptions, Tuner
    from tensorir.graph.types import TensorType
    from tensorir.ops.workload import workload_key

    address, device, db_spec, report = argv[:4]
    m, k, n, trials = map(int, argv[4:8])
    ins = (TensorType((m, k)), TensorType((k, n)))
    task = Task(key=workload_key("matmul", ins, {}), op="matmul", in_types=ins, attrs={}, flops=2 * m * k * n)
    space = task.space()
    out = open(report, "a")  # noqa: SIM115 (open for the whole run, one flushed line per result)

    def on_batch(_state, results) -> None:
        for r in results:
            row = {
                "workload_key": task.key,
                "config": space.complete(r.config),
                "error": r.error,
                "costs": r.costs,
            }
            out.write(json.dumps(row) + "\n")
        out.flush()

    options = TuneOptions(
        device=device,
        trials=trials,
        batch_size=4,
        search="random",
        early_stopping=None,
        progress=False,
        retime=0,  # the test matches each reported trial with its record: no re-timing after them
        model_path=Path(report).with_suffix(".model.json"),
    )
    measure = MeasureOptions(repeat=2, min_repeat_s=0.001, run_timeout_s=20.0)
    tuner = Tuner(
        [task],
        open_database(db_spec),
        options,
        measure,
        on_batch=on_batch,
        measurer=lambda o: RayMeasurer(o, device, address),
    )
    summary = tuner.run()
    print(f"{summary.trials} trials", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
