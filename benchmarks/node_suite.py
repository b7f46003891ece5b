"""ONNX's whole node test suite through onnxruntime and through tensorir compiled for this
CPU (and, with --ref, tensorir's numpy reference), side by side, per op type.

    python -m benchmarks.node_suite                 # every node test, 2 workers
    python -m benchmarks.node_suite --ops LSTM,GRU  # tests whose model uses these op types
    python -m benchmarks.node_suite --json out.json --ref --details

A test passes when every output matches the test's expected data the way ONNX's own backend
runner checks it (`Runner.assert_similar_outputs`, each test's rtol / atol: 1e-3 / 1e-7 by
default). Unlike tests/ops/test_node_suite_host.py, nothing is excluded and unsupported op
types count as failures: this is the figure a user sees. Each test runs in a worker process
(a crash or a hang past --timeout fails that test only, and the worker is restarted).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

RUNNERS = ("ort", "host", "ref")


def _load_case(model_dir: str) -> tuple[Any, list[tuple[list[Any], list[Any]]]]:
    """The model and its (inputs, expected outputs) data sets, as ONNX's runner reads them."""
    import glob

    import onnx

    model = onnx.load(os.path.join(model_dir, "model.onnx"))
    sets = []
    for d in sorted(glob.glob(os.path.join(model_dir, "test_data_set*"))):
        ins = _read_protos(sorted(glob.glob(os.path.join(d, "input_*.pb"))), model.graph.input)
        outs = _read_protos(sorted(glob.glob(os.path.join(d, "output_*.pb"))), model.graph.output)
        sets.append((ins, outs))
    return model, sets


def _read_protos(paths: list[str], values: Any) -> list[Any]:
    """Tensors, sequences and optionals, typed by the graph's value infos (ONNX's loader)."""
    import onnx
    from onnx import numpy_helper

    out = []
    for i, path in enumerate(paths):
        with open(path, "rb") as f:
            data = f.read()
        vtype = values[i].type if i < len(values) else None
        if vtype is not None and vtype.HasField("sequence_type"):
            proto = onnx.SequenceProto()
            proto.ParseFromString(data)
            out.append(numpy_helper.to_list(proto))
        elif vtype is not None and vtype.HasField("optional_type"):
            proto = onnx.OptionalProto()
            proto.ParseFromString(data)
            out.append(numpy_helper.to_optional(proto))
        else:
            proto = onnx.TensorProto()
            proto.ParseFromString(data)
            out.append(numpy_helper.to_array(proto))
    return out


def _run_ort(model: Any, inputs: list[Any]) -> list[Any]:
    """onnxruntime's outputs; tensors of types numpy lacks (bfloat16, float8, int4: the
    ml_dtypes arrays ONNX's loader makes) go through tensorir.tools.ort_io as raw bytes."""
    import onnxruntime as ort

    from tensorir.tools.ort_io import run_session

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return run_session(sess, dict(zip(names, inputs, strict=False)))


def _run_tir(model: Any, inputs: list[Any], target: str) -> list[Any]:
    from tensorir.onnx_backend import TirBackend

    return list(TirBackend.prepare(model, "CPU", target=target).run(inputs))


def run_one(model_dir: str, runner: str, rtol: float, atol: float) -> tuple[bool, str]:
    """(passed, why not) of one node test on one runner."""
    from onnx.backend.test.runner import Runner

    try:
        model, sets = _load_case(model_dir)
        for ins, expected in sets:
            got = _run_ort(model, ins) if runner == "ort" else _run_tir(model, ins, runner)
            Runner.assert_similar_outputs(expected, got, rtol=rtol, atol=atol, model_dir=model_dir)
    except BaseException as e:  # any failure is that test's result
        first = (str(e).strip().splitlines() or [""])[0]
        return False, f"{type(e).__name__}: {first}"[:200]
    return True, ""


def _worker() -> None:
    """Read `model_dir runner rtol atol` lines, answer one JSON line each."""
    import warnings

    warnings.filterwarnings("ignore")
    for line in sys.stdin:
        model_dir, runner, rtol, atol = line.split()
        ok, why = run_one(model_dir, runner, float(rtol), float(atol))
        print(json.dumps({"ok": ok, "why": why}), flush=True)


class _Worker:
    """A worker process; `ask` returns its answer, or a failure when it dies or hangs."""

    def __init__(self) -> None:
        self.proc = None
        self.answers: queue.Queue = queue.Queue()

    def _start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", TIR_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "benchmarks.node_suite", "--worker"]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        self.answers = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.answers), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, answers: queue.Queue) -> None:
        for line in proc.stdout:
            answers.put(json.loads(line))
        answers.put(None)

    def ask(self, request: str, timeout: float) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            self.proc.kill()
            self.proc = None
            return {"ok": False, "why": f"timeout after {timeout:.0f} s"}
        if answer is None:
            code = self.proc.wait()
            self.proc = None
            return {"ok": False, "why": f"worker died (exit {code})"}
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()


def _cases(op_filter: set[str] | None) -> list[tuple[Any, list[str]]]:
    """(TestCase, op types) of every node test, optionally only those using `op_filter`."""
    import onnx
    from onnx.backend.test.loader import load_model_tests

    out = []
    for case in load_model_tests(kind="node"):
        model = onnx.load(os.path.join(case.model_dir, "model.onnx"), load_external_data=False)
        ops = sorted({n.op_type for n in model.graph.node})
        if op_filter is None or op_filter & set(ops):
            out.append((case, ops))
    return out


def run_suite(runners: list[str], workers: int, timeout: float, op_filter: set[str] | None) -> list[dict]:
    """One row per test: name, op types, and a (passed, why) per runner."""
    cases = _cases(op_filter)
    jobs: queue.Queue = queue.Queue()
    for i in range(len(cases)):
        jobs.put(i)
    rows: list[dict] = [{"name": c.name, "ops": ops} for c, ops in cases]
    done = [0]
    lock = threading.Lock()
    t0 = time.time()

    def drain() -> None:
        w = _Worker()
        while True:
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                break
            case = cases[i][0]
            for r in runners:
                a = w.ask(f"{case.model_dir} {r} {case.rtol} {case.atol}", timeout)
                rows[i][r] = [a["ok"], a["why"]]
            with lock:
                done[0] += 1
                if done[0] % 100 == 0 or done[0] == len(cases):
                    print(f"  {done[0]}/{len(cases)} tests, {time.time() - t0:.0f} s", file=sys.stderr)
        w.close()

    threads = [threading.Thread(target=drain) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


def per_op(rows: list[dict], runners: list[str]) -> dict[str, dict[str, list[int]]]:
    """op type -> runner -> [passed, total] over the tests whose model uses that op."""
    table: dict[str, dict[str, list[int]]] = collections.defaultdict(lambda: {r: [0, 0] for r in runners})
    for row in rows:
        for op in row["ops"]:
            for r in runners:
                table[op][r][0] += row[r][0]
                table[op][r][1] += 1
    return table


def report(rows: list[dict], runners: list[str], details: bool) -> str:
    total = len(rows)
    passed = {r: sum(row[r][0] for row in rows) for r in runners}
    lines = [f"ONNX node tests: {total}"]
    for r in runners:
        lines.append(f"  {r:5s} passed {passed[r]:5d} / {total}")
    if "ort" in runners and "host" in runners:
        both = sum(row["ort"][0] and row["host"][0] for row in rows)
        ort_ok = passed["ort"]
        share = 100 * both / max(ort_ok, 1)
        lines.append(f"  host passes {both} of the {ort_ok} onnxruntime passes ({share:.1f}%)")
    lines.append("")
    lines.append("op type".ljust(28) + "".join(f"{r:>12s}" for r in runners))
    table = per_op(rows, runners)
    for op in sorted(table):
        cells = "".join(f"{table[op][r][0]:>7d}/{table[op][r][1]:<4d}" for r in runners)
        lines.append(op.ljust(28) + cells)
    if details:
        lines.append("")
        for row in rows:
            for r in runners:
                if not row[r][0] and (r != "host" or row.get("ort", [True])[0]):
                    lines.append(f"{row['name']} [{r}] {row[r][1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops", help="only tests whose model uses one of these op types (comma-separated)")
    ap.add_argument("--ref", action="store_true", help="also run tensorir's numpy reference")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test and runner")
    ap.add_argument("--json", help="write every test's result here")
    ap.add_argument("--details", action="store_true", help="list every failure with its reason")
    args = ap.parse_args(argv)
    if args.worker:
        _worker()
        return 0
    runners = ["ort", "host"] + (["ref"] if args.ref else [])
    op_filter = set(args.ops.split(",")) if args.ops else None
    rows = run_suite(runners, args.workers, args.timeout, op_filter)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=0)
    print(report(rows, runners, args.details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
