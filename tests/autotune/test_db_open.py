"""open_database: what `--db` (and `--records`) accept and refuse, one line and exit 2."""

from __future__ import annotations

import pytest

from autotune.database import Database
from autotune.db_open import mask_url, open_database, postgres_url
from tensorir.cli import main
from tensorir.errors import InputError


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "folder").mkdir()


def test_paths_open_sqlite(tmp_path):
    with open_database("sub/dir/t.db") as db:  # folders made as before
        assert isinstance(db, Database) and db.path.resolve() == tmp_path / "sub" / "dir" / "t.db"
    with open_database(None) as db:
        assert db.path == tmp_path / "cache" / "tuning.db"
    with open_database(tmp_path / "sub" / "dir" / "t.db", create=False) as db:
        assert len(db) == 0


@pytest.mark.parametrize(
    "spec, words",
    [
        ("mysql://u:secret@h/db", ["--db mysql://u:***@h/db", "unsupported URL scheme mysql://"]),
        ("sqlite:///x.db", ["unsupported URL scheme sqlite://"]),
        ("folder", ["--db folder", "is a folder"]),
        ("afile/t.db", ["--db afile/t.db", "is not a folder"]),
        ("afile/deeper/t.db", ["is not a folder"]),
    ],
)
def test_refused_specs(spec, words):
    with pytest.raises(InputError) as e:
        open_database(spec)
    msg = str(e.value)
    assert "\n" not in msg and "secret" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_missing_file_without_create():
    with pytest.raises(InputError, match=r"--db nope\.db: no such file"):
        open_database("nope.db", create=False)


def test_postgres_url_and_mask():
    assert postgres_url("t.db") is None and postgres_url(None) is None
    assert postgres_url("postgres://h/db") == "postgres://h/db"
    assert postgres_url("PostgreSQL://h/db") == "PostgreSQL://h/db"
    assert mask_url("postgresql://me:pw@h:5/db?sslmode=require&password=x") == (
        "postgresql://me:***@h:5/db?sslmode=require&password=***"
    )
    assert mask_url("postgresql://h/db") == "postgresql://h/db"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["db", "stats", "--db", "mysql://h/x"], ["--db mysql://h/x", "unsupported URL scheme"]),
        (["db", "import", "x.jsonl", "--db", "folder"], ["--db folder", "is a folder"]),
        (["tune", "MODEL", "--db", "http://h/x.db"], ["--db http://h/x.db", "unsupported URL scheme"]),
        (["tune", "MODEL", "--db", "afile/t.db"], ["--db afile/t.db", "is not a folder"]),
        (["compile", "MODEL", "--records", "ftp://h/x", "-o", "out"], ["--records ftp://h/x", "unsupported"]),
    ],
)
def test_cli_refuses_with_one_line_exit_2(argv, words, tmp_path, capsys):
    import shutil
    from pathlib import Path

    model = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"
    shutil.copy(model, tmp_path / "m.onnx")
    (tmp_path / "x.jsonl").write_text("")
    argv = [str(tmp_path / "m.onnx") if a == "MODEL" else a for a in argv]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "mysql:").exists() and not (tmp_path / "http:").exists()
