"""benchmarks/knob_ab.py: the pins it parses and the records it pins them in."""

import onnx
import pytest

from benchmarks.knob_ab import parse_pins, pinned_records


def test_parse_pins_reads_literals_and_words():
    assert parse_pins(["prefetch_weights=0", "ow_tile=4", "outer_order=rows"]) == {
        "prefetch_weights": 0,
        "ow_tile": 4,
        "outer_order": "rows",
    }
    with pytest.raises(SystemExit, match="expected NAME=VALUE"):
        parse_pins(["prefetch_weights"])


def test_pins_go_only_to_tasks_whose_space_has_the_knob():
    model = onnx.load("examples/tiny_cnn.onnx")
    records = pinned_records(model, {"ow_tile": 4, "no_such_knob": 1})
    assert records, "the tiny CNN's convs have the knob"
    assert all(cfg == {"ow_tile": 4} for cfg in records.values())
    assert not pinned_records(model, {"no_such_knob": 1})


def test_after_pause_times_back_to_back_and_each_run_after_the_pause():
    from benchmarks.after_pause import after_pause

    calls = []
    hot, later = after_pause(lambda: calls.append(1), rounds=2, pause_s=0.001, after=3)
    assert len(calls) == 2 * (10 + 10 + 3) and len(later) == 3
    assert hot >= 0 and all(t >= 0 for t in later)
