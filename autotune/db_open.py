"""Open the tuning database an option names: a SQLite file path or a PostgreSQL URL.

Every option that names a tuning database (`tir tune --db`, `tir db ... --db / --to / --from`,
`tir compile --records`) goes through :func:`open_database`, so they accept and refuse the
same things::

    open_database(None)                        # the default SQLite file ($TIR_CACHE_DIR/tuning.db)
    open_database("runs/tune.db")              # a SQLite file (created, with its folder, if missing)
    open_database("postgresql://u@host/tir")   # a PostgreSQL server (postgres:// too)

A URL of any other scheme, a folder, or a path under something that is not a folder is
refused with one line (an :class:`~tensorir.errors.InputError`, exit status 2) naming the
option; so is a missing file when ``create`` is false.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from tensorir.errors import InputError

if TYPE_CHECKING:
    from autotune.db_store import RecordStore

POSTGRES_SCHEMES = ("postgresql", "postgres")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(spec: str | os.PathLike) -> str | None:
    """The scheme of a ``scheme://...`` spec (lower case), None for a file path."""
    m = _URL.match(os.fspath(spec))
    return m.group(1).lower() if m else None


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or a ``password=`` parameter) as ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def postgres_url(spec: str | os.PathLike | None, option: str = "--db") -> str | None:
    """The PostgreSQL URL ``spec`` names, or None when it is a file path (or None). A URL of
    another scheme is refused."""
    if spec is None:
        return None
    scheme = url_scheme(spec)
    if scheme is None:
        return None
    if scheme not in POSTGRES_SCHEMES:
        raise InputError(
            f"{option} {mask_url(os.fspath(spec))}: unsupported URL scheme {scheme}:// "
            "(give a SQLite file path or a postgresql:// URL)"
        )
    return os.fspath(spec)


def sqlite_path(spec: str | os.PathLike | None, create: bool = True, option: str = "--db") -> Path:
    """The SQLite file ``spec`` names (None: the default), checked: not a folder, not under
    a file, and existing unless ``create``."""
    from autotune.database import default_path

    path = Path(spec) if spec is not None else default_path()
    what = f"{option} {spec}" if spec is not None else f"tuning database {path}"
    if path.is_dir():
        raise InputError(f"{what}: is a folder, not a database file")
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise InputError(f"{what}: {parent} is not a folder")
    if not create and not path.exists():
        raise InputError(f"{what}: no such file")
    return path


def open_database(spec: str | os.PathLike | None, create: bool = True, option: str = "--db") -> RecordStore:
    """The tuning database ``spec`` names (see the module docstring): a SQLite
    :class:`autotune.database.Database` or a :class:`autotune.db_postgres.PostgresDatabase`
    (both :class:`autotune.db_store.RecordStore`). ``option`` is what messages call the spec."""
    url = postgres_url(spec, option)
    if url is not None:
        from autotune.db_postgres import PostgresDatabase

        try:
            return PostgresDatabase(url)
        except InputError as e:
            raise InputError(f"{option} {e}") from None
    from autotune.database import Database

    path = sqlite_path(spec, create, option)
    try:
        return Database(path)
    except sqlite3.DatabaseError as e:
        what = f"{option} {spec}" if spec is not None else f"tuning database {path}"
        raise InputError(f"{what}: not a tuning database ({e})") from None
    except OSError as e:
        what = f"{option} {spec}" if spec is not None else f"tuning database {path}"
        raise InputError(f"{what}: {e.strerror or e}") from None
