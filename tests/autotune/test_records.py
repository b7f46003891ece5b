"""Records: best config per workload across the database and tuning_logs/<device>.jsonl."""

from __future__ import annotations

import json

import pytest

from autotune.database import Database
from autotune.records import Records
from tensorir.errors import InputError, TirError


def rec(wk: str, i: int, cost: float | None, device: str = "cpu", **kw) -> dict:
    r = {
        "workload_key": wk,
        "device": device,
        "target": "llvm",
        "config": {"i": i},
        "costs": [cost] * 2 if cost is not None else [],
        "timestamp": 100.0 + i,
        "host": "h",
        "tensorir_version": "0.1.0",
    }
    r.update(kw)
    return r


def write_log(path, records) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


@pytest.fixture
def sources(tmp_path):
    db_path = tmp_path / "t.db"
    with Database(db_path) as db:
        db.add_many(
            [
                rec("w0", 1, 1.0),  # db wins w0
                rec("w0", 2, 3.0),
                rec("w1", 3, 2.0),  # jsonl beats this
                rec("w2", 4, 5.0),
                rec("w2", 5, None, error="crash"),  # errors never win
                rec("w3", 6, 0.001, device="gpu"),  # another device
                rec("w0", 7, 0.5, target="other"),  # another target (only filtered when asked)
            ]
        )
    logs = tmp_path / "tuning_logs"
    write_log(
        logs / "cpu.jsonl",
        [
            rec("w0", 10, 1.5),
            rec("w1", 11, 0.25),
            {**rec("w2", 12, 0.0001), "error": "timeout"},  # an error with a cost: ignored
            rec("w4", 13, 7.0),
            rec("w5", 14, 0.1, device="gpu"),  # wrong device in the cpu file: ignored
            rec("w6", 15, 0.2, schema_version=99),  # other schema: ignored
        ],
    )
    write_log(logs / "gpu.jsonl", [rec("w3", 20, 0.0005, device="gpu")])
    return db_path, logs


def test_best_across_db_and_jsonl(sources):
    db_path, logs = sources
    r = Records.open(db_path, logs, device="cpu", target="llvm")
    assert len(r) == 4 and r.keys() == ["w0", "w1", "w2", "w4"]
    assert r.best("w0") == {"i": 1} and r.source_of("w0") == "db"
    assert r.best("w1") == {"i": 11} and r.source_of("w1") == str(logs / "cpu.jsonl")
    assert r.best("w2") == {"i": 4} and r.best_cost("w2") == 5.0
    assert r.best("w4") == {"i": 13}
    assert r.best("w3") is None and r.source_of("w3") is None and "w3" not in r
    assert r.best("w5") is None and r.best("w6") is None
    # no target filter: the record of target "other" competes too
    assert Records.open(db_path, logs, device="cpu").best("w0") == {"i": 7}
    gpu = Records.open(db_path, logs, device="gpu")
    assert len(gpu) == 1 and gpu.best("w3") == {"i": 20}


def test_tie_prefers_smaller_id_then_db(tmp_path):
    db_path = tmp_path / "t.db"
    with Database(db_path) as db:
        db.add(rec("w", 1, 2.0))
    same = rec("w", 1, 2.0)
    write_log(tmp_path / "logs" / "cpu.jsonl", [same])
    r = Records.open(db_path, tmp_path / "logs", device="cpu")
    assert r.best("w") == {"i": 1} and r.source_of("w") == "db"


def test_missing_sources_are_empty_and_not_created(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    r = Records.open()
    assert len(r) == 0 and r.best("w0") is None
    assert not (tmp_path / "cache" / "tuning.db").exists()
    # ./tuning_logs is the default log folder; a single file works as `logs` too
    write_log(tmp_path / "tuning_logs" / "host.jsonl", [rec("w", 1, 1.0, device="host")])
    assert Records.open().best("w") == {"i": 1}
    write_log(tmp_path / "one.jsonl", [rec("v", 2, 1.0, device="host")])
    assert Records.open(logs=tmp_path / "one.jsonl").keys() == ["v"]
    with pytest.raises(InputError, match="nowhere"):
        Records.open(logs=tmp_path / "nowhere")


def test_reads_live_wal_database_read_only(tmp_path):
    db_path = tmp_path / "live.db"
    db = Database(db_path)  # a tuner holding the database open
    db.add(rec("w", 1, 1.0))
    assert Records.open(db_path, tmp_path, device="cpu").best("w") == {"i": 1}
    db.add(rec("w", 2, 0.5))
    assert Records.open(db_path, tmp_path, device="cpu").best("w") == {"i": 2}
    db.close()


def test_malformed_line_names_file_and_line(tmp_path):
    log = tmp_path / "logs" / "cpu.jsonl"
    write_log(log, [rec("w", 1, 1.0)])
    with open(log, "a") as f:
        f.write("\n{not json\n")
    with pytest.raises(InputError) as e:
        Records.open(tmp_path / "none.db", log.parent, device="cpu")
    assert f"{log}:3:" in str(e.value) and "\n" not in str(e.value)
    write_log(log, [rec("w", 1, 1.0), {"device": "cpu", "config": {}}])
    with pytest.raises(TirError, match=r"cpu\.jsonl:2: bad tuning record.*workload_key"):
        Records.open(tmp_path / "none.db", log.parent, device="cpu")


def test_not_a_database(tmp_path):
    bad = tmp_path / "junk.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InputError, match="junk.db"):
        Records.open(bad, tmp_path, device="cpu")


def test_timed_alone_reads_past_the_in_model_verdicts(tmp_path):
    """An in-model record outranks any record timed alone; `timed_alone` ranks only the
    records timed alone (what the in-model check times next), in the database and the logs."""
    db_path, logs = tmp_path / "t.db", tmp_path / "logs" / "cpu.jsonl"
    with Database(db_path) as db:
        db.add_many([rec("w0", 1, 5.0, timing="model"), rec("w0", 2, 2.0), rec("w0", 3, 3.0)])
    write_log(logs, [rec("w1", 10, 9.0, timing="model"), rec("w1", 11, 4.0)])
    for source in ({"db": db_path, "logs": False}, {"db": False, "logs": logs}):
        verdicts, alone = (Records.open(**source, device="cpu", timed_alone=a) for a in (False, True))
        key = "w0" if source["db"] else "w1"
        assert verdicts.best(key) == {"i": 1 if source["db"] else 10}  # the verdict, at its higher cost
        assert alone.best(key) == {"i": 2 if source["db"] else 11}
        assert alone.best_cost(key) == (2.0 if source["db"] else 4.0)


def test_the_newest_in_model_check_wins_across_sources(tmp_path):
    """A check in the database newer than the log's (or the other way round) makes the other
    source's in-model verdicts of that workload stale, whatever their costs."""
    db_path, logs = tmp_path / "t.db", tmp_path / "logs" / "cpu.jsonl"
    old = [rec("w", 0, 5.0, timing="model", config={}, timestamp=10.0)]
    old.append(rec("w", 1, 1.0, timing="model", timestamp=10.0))  # config 1 won the old check
    new = [rec("w", 0, 4.0, timing="model", config={}, timestamp=20.0)]
    new.append(rec("w", 2, 4.5, timing="model", timestamp=20.0))  # config 2 lost the new one
    for in_db, in_log in ((old, new), (new, old)):
        db_path.unlink(missing_ok=True)
        with Database(db_path) as db:
            db.add_many(in_db)
        write_log(logs, in_log)
        recs = Records.open(db_path, logs, device="cpu")
        assert (recs.best("w"), recs.best_cost("w")) == ({}, 4.0)
        assert recs.keys() == ["w"] and "w" in recs and len(recs) == 1
    write_log(logs, [*old, rec("w", 3, 0.5)])  # no newer check: the old one still speaks
    assert Records.open(False, logs, device="cpu").best("w") == {"i": 1}
