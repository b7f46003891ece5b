"""The PostgreSQL tuning database on a real server (tests/pg_server.py): migrations, the CLI
(push / pull / stats, tir compile --records URL), credentials from libpq's environment, and
an unreachable server. The contract shared with SQLite is tests/autotune/test_database.py."""

from __future__ import annotations

import multiprocessing as mp
import socket
from pathlib import Path

import psycopg
import pytest

from autotune.database import Database
from autotune.db_open import open_database
from autotune.db_postgres import MIGRATIONS, PostgresDatabase, migrate, schema_version
from autotune.db_store import UPSERT_SQL
from autotune.record_format import COLUMNS, TABLE, normalize
from tensorir.cli import main
from tensorir.errors import InputError
from tests.autotune.test_cli_db import fill, rec, tir

MODEL = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no ./tuning_logs


# -- migrations ----------------------------------------------------------------------------------


def _indexes(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [TABLE])}


def test_a_new_database_gets_every_migration(pg_url):
    with PostgresDatabase(pg_url) as db:
        assert schema_version(db.conn) == len(MIGRATIONS) == 2
        assert "idx_records_best" in _indexes(db.conn)
        assert db.conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
    with PostgresDatabase(pg_url) as db:  # reopening applies nothing
        assert schema_version(db.conn) == 2 and len(db) == 0


def test_an_older_database_is_migrated_and_keeps_its_records(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert migrate(conn, upto=1) == 1  # a database made before the index
        row = normalize(rec("w", 1, 1e-3))
        conn.execute(UPSERT_SQL.replace("?", "%s"), [row[c] for c in COLUMNS])
        assert "idx_records_best" not in _indexes(conn)
    with PostgresDatabase(pg_url) as db:
        assert schema_version(db.conn) == 2 and "idx_records_best" in _indexes(db.conn)
        assert db.best("w", "cpu")["id"] == row["id"]


def test_a_database_from_a_newer_tensorir_is_refused(pg_url, capsys):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute("UPDATE schema_version SET version = 99")
    rc, _, err = tir(["db", "stats", "--db", pg_url], capsys)
    assert rc == 2 and len(err.splitlines()) == 1
    assert f"--db {pg_url}: schema version 99 is newer than this tensorir's (2)" in err


def test_a_read_only_role_reads_an_up_to_date_database(pg_url, capsys):
    """Opening migrates nothing when the schema is current, so a role that may only SELECT
    (no CREATE in the schema) can look records up, as tir compile does."""
    with open_database(pg_url) as db:
        db.add(rec("w", 1, 1e-3))
        role = f"reader_{pg_url.rsplit('/', 1)[1]}"
        db.conn.execute(f"CREATE ROLE {role} LOGIN")
        db.conn.execute(f"GRANT SELECT ON {TABLE}, schema_version TO {role}")
    reader = pg_url.replace("postgres@", f"{role}@")
    with open_database(reader) as db:
        assert [r["config"]["i"] for r in db.best_records("cpu")] == [1]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.add(rec("w", 2, 1e-3))
    rc, out, _ = tir(["db", "top", "--db", reader], capsys)
    assert rc == 0 and out.splitlines()[1].split()[:3] == ["w", "cpu", "1.000"]


def _open_and_add(url: str, k: int, barrier) -> None:
    barrier.wait(60)  # every process connects at the same moment
    with open_database(url) as db:
        db.add(rec("w", k, 1e-3 * (k + 1)))


def test_tuners_opening_a_new_database_at_once_do_not_race(pg_url):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_open_and_add, args=(pg_url, k, barrier)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with PostgresDatabase(pg_url) as db:
        assert len(db) == 4 and db.best("w", "cpu")["config"]["i"] == 0
        assert db.conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]


# -- connecting ----------------------------------------------------------------------------------


def test_credentials_from_libpq_environment(pg_server, pg_url, monkeypatch):
    dbname = pg_url.rsplit("/", 1)[1]
    for k, v in {"PGHOST": "127.0.0.1", "PGPORT": str(pg_server.port), "PGUSER": "postgres"}.items():
        monkeypatch.setenv(k, v)
    with open_database(f"postgresql:///{dbname}") as db:
        db.add(rec("w", 1, 1e-3))
    with open_database(pg_url) as db:
        assert len(db) == 1 and db.path == pg_url


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.mark.parametrize("cmd", [["db", "stats", "--db"], ["db", "push", "--db", "t.db", "--to"]])
def test_unreachable_server_is_one_line_exit_2(cmd, capsys, tmp_path):
    Database(tmp_path / "t.db").close()
    url = f"postgresql://tuner:s3cret@127.0.0.1:{_closed_port()}/tir"
    rc, out, err = tir([*cmd, url], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{cmd[-1]} postgresql://tuner:***@127.0.0.1:" in err and "cannot connect to PostgreSQL" in err
    assert "refused" in err.lower() and "s3cret" not in err + out


def test_unreachable_server_from_python():
    with pytest.raises(InputError, match="cannot connect to PostgreSQL"):
        PostgresDatabase(f"postgresql://127.0.0.1:{_closed_port()}/tir")


def test_a_server_lost_mid_run_is_one_line_and_keeps_what_was_committed():
    """The server stops between two measurements: the next write is one InputError naming
    the masked URL (the CLI's exit 2), and once the server is back, the record committed
    before is there."""
    from tests.pg_server import PgServer

    server = PgServer.start()
    try:
        url = server.create_database()
        db = open_database(url)
        db.add(rec("w1", 1, 1.0))
        server._pg_ctl(["-m", "fast", "-w", "stop"], 60)
        with pytest.raises(InputError, match="lost the connection to PostgreSQL") as e:
            db.add(rec("w2", 2, 2.0))
        assert "\n" not in str(e.value) and str(e.value).startswith("postgresql://")
        server._pg_ctl(["-l", str(server.root / "log"), "-w", "-o", f"-p {server.port}", "start"], 60)
        with open_database(url) as again:
            assert [r["workload_key"] for r in again.records()] == ["w1"]
    finally:
        server.stop()


# -- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def local_db(tmp_path) -> str:
    path = fill(tmp_path / "local.db")
    with Database(path) as db:
        db.add(rec("conv_w1", 7, 9e-3, timing="model"))  # slower, but timed in the model: the best
    return path


def test_push_pull_round_trip_and_stats(local_db, pg_url, tmp_path, capsys):
    rc, out, err = tir(["db", "push", "--db", local_db, "--to", pg_url], capsys)
    assert rc == 0, err
    assert out.splitlines() == [
        f"{local_db} -> {pg_url}: 15 records, 15 new, 0 replaced, 0 skipped",
        f"{pg_url}: 15 records",
    ]
    rc, out, _ = tir(["db", "push", "--db", local_db, "--to", pg_url], capsys)  # idempotent
    assert "15 records, 0 new, 0 replaced, 15 skipped" in out

    rc, out, _ = tir(["db", "stats", "--db", pg_url], capsys)
    assert rc == 0
    got = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert got["database"][0] == pg_url and got["database"][-1] in ("KiB)", "MiB)")
    assert got["records"] == ["15"] and got["workloads"] == ["4"] and got["devices"] == ["2"]
    assert got["errors"] == ["1"]
    assert got["cpu"] == ["12", "records,", "4", "workloads,", "1", "errors"]
    assert got["gpu"] == ["3", "records,", "3", "workloads,", "0", "errors"]

    rc, out, _ = tir(["db", "pull", "--from", pg_url, "--db", "back.db", "--device", "gpu"], capsys)
    assert rc == 0 and "3 records, 3 new" in out
    rc, out, _ = tir(["db", "pull", "--from", pg_url, "--db", "back.db"], capsys)
    assert rc == 0 and "15 records, 12 new, 0 replaced, 3 skipped" in out
    with Database(local_db) as a, Database(tmp_path / "back.db") as b, open_database(pg_url) as p:
        assert a.records() == b.records() == p.records()  # lossless both ways
        assert p.best("conv_w1", "cpu")["timing"] == "model"  # in-model records still win
    for src, out_dir in ((local_db, "from_sqlite"), (pg_url, "from_pg")):
        assert tir(["db", "export", "--db", src, "--out", out_dir], capsys)[0] == 0
    for name in ("cpu.jsonl", "gpu.jsonl"):
        assert (tmp_path / "from_pg" / name).read_bytes() == (tmp_path / "from_sqlite" / name).read_bytes()

    # a changed record on the server comes back as replaced
    with open_database(pg_url) as p:
        p.add(rec("conv_w2", 8, 5.0, device="gpu"))
    rc, out, _ = tir(["db", "pull", "--from", pg_url, "--db", "back.db", "--device", "gpu"], capsys)
    assert "3 records, 0 new, 1 replaced, 2 skipped" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["db", "push", "--db", "nope.db", "--to", "URL"], ["--db nope.db", "no such file"]),
        (["db", "push", "--db", "DB", "--to", "mysql://h/x"], ["--to mysql://h/x", "unsupported URL scheme"]),
        (["db", "pull", "--from", "URL", "--db", "DB", "--device", "tpu"], ["--device 'tpu'", "none"]),
        (["db", "pull", "--from", "https://h/x", "--db", "DB"], ["--from https://h/x", "unsupported"]),
    ],
)
def test_push_pull_bad_input(argv, words, local_db, pg_url, capsys):
    argv = [{"DB": local_db, "URL": pg_url}.get(a, a) for a in argv]
    rc, _out, err = tir(argv, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


def test_tir_compile_picks_the_records_on_the_server(pg_url, capsys):
    """Records of this machine's device key for the tiny model's workloads, stored on the
    server: `tir compile --records URL` finds the device and applies them."""
    from autotune.cli_tune import tuning_device
    from autotune.task import extract_tasks, load_graph

    key = tuning_device("host")
    tasks = extract_tasks(load_graph(str(MODEL), "host", {}), "host")
    assert tasks
    with open_database(pg_url) as db:
        for t in tasks:
            config = t.space("host").default()
            db.add({"workload_key": t.key, "device": key, "config": config, "costs": [1e-4]})
    assert main(["compile", str(MODEL), "--records", pg_url, "-o", "out"]) == 0
    text = capsys.readouterr().out
    assert f"tuning records: device {key};" in text, text
    used = int(text.split(f"device {key}; ")[1].split(" kernels use one")[0])
    assert used >= len(tasks), text
    # --device with no records there names the devices the server has
    rc = main(["compile", str(MODEL), "--records", pg_url, "--device", "foo", "-o", "out2"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"devices with records: {key}" in err and len(err.splitlines()) == 1
