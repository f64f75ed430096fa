"""`qlwf oracle`: consult the specification oracle on ql3 JSON snapshots."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from qlwf.model.canonical import canonical_text
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.oracle import FUNCTIONS, ORACLE_REQUEST_INVALID, consult

EXIT_INPUT = 2  # malformed or inconsistent input (typed model error)
EXIT_INTERNAL = 70  # a bug in the oracle itself; never expected


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def parse_json(text: str) -> Any:
    """Strict JSON: duplicate keys and NaN/Infinity are errors (they have no ql3 meaning)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise Invalid(ORACLE_REQUEST_INVALID, "json_invalid", f"input is not valid JSON: {e}") from e


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Invalid(ORACLE_REQUEST_INVALID, "file_unreadable", f"cannot read {path}: {e}") from e


def _emit(obj: Any, pretty: bool, out: TextIO) -> None:
    out.write((json.dumps(obj, ensure_ascii=False, indent=2) if pretty else canonical_text(obj)) + "\n")


def run_single(args: argparse.Namespace) -> int:
    try:
        answer = consult(args.fn, parse_json(_read(args.file)))
    except QlwfError as e:
        print(f"{e.error_class} {e.code} {e.reason}: {e.message}", file=sys.stderr)
        return EXIT_INPUT
    except Exception as e:
        print(f"internal error ({type(e).__name__}): {e}", file=sys.stderr)
        return EXIT_INTERNAL
    if args.explain:
        _emit({"resolution": answer.resolution, "explanation": answer.explanation}, args.pretty, sys.stdout)
    else:
        _emit(answer.resolution, args.pretty, sys.stdout)
    return 0


def answer_line(line: str) -> dict[str, Any]:
    """One batch request → {"ok": resolution} or {"error": {class, code, message}}."""
    try:
        request = parse_json(line)
        if not isinstance(request, dict) or set(request) != {"fn", "input"}:
            raise Invalid(ORACLE_REQUEST_INVALID, "request_invalid", 'a request is exactly {"fn", "input"}')
        return {"ok": consult(request["fn"], request["input"]).resolution}
    except QlwfError as e:
        return {"error": {"class": e.error_class, "code": e.code, "message": f"{e.reason}: {e.message}"}}
    except Exception as e:
        return {"error": {"class": "Unavailable", "code": "QLWF_ORACLE_INTERNAL_ERROR",
                          "message": f"{type(e).__name__}: {e}"}}


def run_batch(_args: argparse.Namespace) -> int:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(canonical_text(answer_line(line)) + "\n")
    sys.stdout.flush()
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    oracle = sub.add_parser("oracle", help="consult the specification oracle on a ql3 JSON snapshot")
    fns = oracle.add_subparsers(dest="fn", required=True, metavar="FUNCTION")
    for fn in FUNCTIONS:
        if fn == "step-transition":
            continue  # batch only: it takes {current, command, context}
        p = fns.add_parser(fn, help=f"resolve a snapshot with the {fn} contract")
        p.add_argument("file", metavar="FILE", help="ql3 JSON snapshot, or - for stdin")
        p.add_argument("--explain", action="store_true", help="add the rule that decided each StepRun/attempt")
        p.add_argument("--pretty", action="store_true", help="indent the output (default: canonical JSON)")
        p.set_defaults(func=run_single)
    b = fns.add_parser("batch", help='JSON lines {"fn": ..., "input": {...}} on stdin, one answer line each')
    b.set_defaults(func=run_batch)
