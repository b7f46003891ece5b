"""benchmarks/layers.py --scaling: each kernel's time beyond a perfect speed-up, on a real build."""

import pytest

from benchmarks.layers import print_scaling, profile_scaling, scaling_rows


def test_scaling_rows_rank_kernels_by_the_time_a_second_thread_did_not_save():
    rows = [{"symbol": "a"}, {"symbol": "b"}, {"symbol": "c"}]
    out = scaling_rows(rows, [1.0, 2.0, 0.2], [0.5, 1.6, 0.2], threads=2)
    assert [r["symbol"] for r in out] == ["b", "c", "a"]  # lost 0.6, 0.1, 0.0
    assert out[0]["lost_ms"] == pytest.approx(0.6) and out[0]["speedup"] == pytest.approx(1.25)
    assert out[2]["speedup"] == pytest.approx(2.0)


def test_profile_scaling_times_every_kernel_of_one_build_at_both_counts(capsys):
    rows = profile_scaling("examples/tiny_cnn.onnx", threads=2, repeat=2, rounds=1)
    assert rows and all(r["ms_1"] > 0 and r["ms_n"] > 0 for r in rows)
    assert [r["lost_ms"] for r in rows] == sorted((r["lost_ms"] for r in rows), reverse=True)
    print_scaling(rows, 2)
    assert f"{len(rows)} kernels:" in capsys.readouterr().out


def test_the_hand_over_line_flags_a_profile_the_slow_state_came_into():
    from benchmarks.layers import handover_line

    assert handover_line(1330.0, 1400.0) == "hand-over canary: 1.33 ms before, 1.40 ms after"
    slow = handover_line(1330.0, 2700.0)
    assert slow.startswith("hand-over canary: 1.33 ms before, 2.70 ms after: THE CORES HANDED DATA")
    assert "SLOWLY" in handover_line(2700.0, 1330.0)
