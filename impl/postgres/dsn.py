"""`QLWF_PG_DSN`, the existing server to use, checked before any work: a malformed or unreachable DSN
is one line, not a traceback."""

from __future__ import annotations

import os
import re

import psycopg
from psycopg.conninfo import conninfo_to_dict

DSN_ENV = "QLWF_PG_DSN"
"""Environment variable naming an existing server to use (instead of a throwaway cluster, for the harness)."""


class PostgresUnavailable(RuntimeError):
    """No server can be provided: the DSN is unusable, or no DSN was configured and no server binaries
    were found (conformance/provision starts a throwaway cluster from them)."""


CONNECT_TIMEOUT_S = 5
_URI_PASSWORD = re.compile(r"(://[^:/@\s]*):[^@\s]*@")
_KEY_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def one_line(error: BaseException) -> str:
    """An exception's message on one line (libpq messages span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def check_dsn_env() -> None:
    """Raise PostgresUnavailable (one-line message, the DSN itself never echoed: it may hold a
    password) when QLWF_PG_DSN is set but cannot be parsed or connected to, or its role may not create
    the databases the runs need; unset passes."""
    dsn = os.environ.get(DSN_ENV, "").strip()
    if not dsn:
        return
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as e:
        raise PostgresUnavailable(f"{DSN_ENV} is malformed: {_redacted(one_line(e), dsn)}") from None
    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            row = conn.execute(_MAY_CREATE_DATABASES).fetchone()
    except psycopg.Error as e:
        raise PostgresUnavailable(f"{DSN_ENV} is unreachable: {_redacted(one_line(e), dsn)}") from None
    if row is None or row[0] is not True:
        raise PostgresUnavailable(f"{DSN_ENV}'s role may not create databases, and every run creates its own and drops "
                                  "it afterwards: grant the role CREATEDB (or name a superuser)")


# CREATE DATABASE needs the role's CREATEDB attribute or superuser (PostgreSQL's CREATE DATABASE page)
_MAY_CREATE_DATABASES = "SELECT rolcreatedb OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user"


def _redacted(message: str, dsn: str) -> str:
    """libpq quotes parts of a malformed DSN back; passwords must not reach a log."""
    message = message.replace(dsn, "<the DSN>")
    return _KEY_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1:***@", message))
