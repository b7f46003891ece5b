"""WeightBlob: placing once per key, aligned; the chunk of an offset; moving chunks last."""

import numpy as np
import pytest

from tensorir.weight_blob import WeightBlob


def _blob() -> WeightBlob:
    b = WeightBlob()
    for k, n in enumerate([3, 20, 1, 17]):  # float32 counts: 12, 80, 4, 68 bytes
        b.place(f"w{k}", lambda n=n, k=k: np.full(n, k + 1, np.float32))
    return b


def test_place_is_aligned_and_once_per_key():
    b = _blob()
    assert b.offsets == {"w0": 0, "w1": 64, "w2": 192, "w3": 256}
    assert b.size == 384 and len(b.blob()) == 384
    assert b.place("w1", lambda: pytest.fail("made twice")) == 64


def test_chunk_at_inside_a_constant():
    b = _blob()
    assert [b.chunk_at(o) for o in (0, 63, 64, 100, 191, 192, 256, 383)] == [0, 0, 1, 1, 1, 2, 3, 3]
    with pytest.raises(ValueError, match="outside the blob"):
        b.chunk_at(384)


def test_an_empty_constant_has_a_chunk_even_at_the_end():
    b = _blob()
    assert b.place("empty", lambda: np.zeros(0, np.float32)) == 384 and b.size == 384
    assert b.chunk_at(384) == 4 and b.chunk_at(383) == 3
    remap, first = b.move_to_end([3])  # w3 after the empty one
    assert (first, b.offsets["empty"], b.offsets["w3"]) == (256, 256, 256)
    assert b.chunk_at(b.offsets["w3"]) == 4 and remap(300) == 300


def test_move_to_end_keeps_bytes_and_rewrites_offsets():
    b = _blob()
    before = np.frombuffer(b.blob(), np.float32).copy()
    remap, first = b.move_to_end([1, 0])
    # the others keep their order (w2, w3), then the tail in the order given (w1, w0)
    assert b.offsets == {"w2": 0, "w3": 64, "w1": 192, "w0": 320}
    assert first == 192 and b.size == 384
    after = np.frombuffer(b.blob(), np.float32)
    for old in (0, 8, 64, 100, 188, 192, 256, 300):  # every byte reads the same at its new place
        assert after[remap(old) // 4] == before[old // 4]
    assert [b.chunk_at(b.offsets[k]) for k in ("w2", "w3", "w1", "w0")] == [0, 1, 2, 3]


def test_move_to_end_refuses_unknown_or_repeated_chunks():
    b = _blob()
    with pytest.raises(ValueError, match="not distinct chunks"):
        b.move_to_end([1, 1])
    with pytest.raises(ValueError, match="not distinct chunks"):
        b.move_to_end([4])
