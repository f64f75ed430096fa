"""`qlwf oracle`: consult the specification oracle on ql3 JSON snapshots."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from qlwf.model.canonical import canonical_text, plain_canonical_json
from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.oracle import FUNCTIONS, ORACLE_REQUEST_INVALID, consult

EXIT_INPUT = 2  # malformed or inconsistent input (typed model error)
EXIT_INTERNAL = 70  # a bug in the oracle itself; never expected


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)  # C speed; a shorter dict means a repeated key, found (and named) below
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return obj


def _members_match(text: str, value: Any) -> bool:
    """True only if `value`, parsed from `text` into plain dicts, lost no repeated key.

    Outside strings a `:` only separates a member's name from its value, and the fast encoder
    writes `:` unescaped and nowhere else, so without escaped colons (`\\u003a`) in the text both
    count members plus the colons inside strings alike, and a dropped repeated member makes the
    value's count smaller. Any doubt (an escaped colon, a value orjson refuses) answers False.
    """
    # (A one-character search is a memchr; most requests have no backslash at all.)
    if "\\" in text and ("\\u003a" in text or "\\u003A" in text):
        return False
    try:
        return plain_canonical_json(value).count(b":") == text.count(":")
    except (ValueError, RecursionError):  # a lone surrogate, or nesting the reference encoder refuses
        return False


def parse_json_floats(text: str) -> tuple[Any, bool]:
    """parse_json, and whether the text had a float literal (`1.0`, `1e400`; -> float or infinity)."""
    floats: list[str] = []

    def parse_float(literal: str) -> float:
        floats.append(literal)
        return float(literal)

    # Plain dicts first (the C decoder builds them). On any doubt or error, parse again with the
    # checking hook, which decides (and words) the outcome exactly as it always did.
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=parse_float)
        plain = _members_match(text, value)
    except (ValueError, RecursionError):
        plain = False
    if not plain:
        floats.clear()
        try:
            value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant,
                               parse_float=parse_float)
        except (ValueError, RecursionError) as e:
            raise Invalid(ORACLE_REQUEST_INVALID, "json_invalid", f"input is not valid JSON: {e}") from e
    return value, bool(floats)


def parse_json(text: str) -> Any:
    """Strict JSON: duplicate keys and NaN/Infinity are errors (they have no ql3 meaning)."""
    return parse_json_floats(text)[0]


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


def _answer(line: str) -> tuple[dict[str, Any], bool]:
    """answer_line, and whether the answer may hold a float (only when the request text had one)."""
    floats = False
    try:
        request, floats = parse_json_floats(line)
        if not isinstance(request, dict) or set(request) != {"fn", "input"}:
            raise Invalid(ORACLE_REQUEST_INVALID, "request_invalid", 'a request is exactly {"fn", "input"}')
        return {"ok": consult(request["fn"], request["input"]).resolution}, floats
    except QlwfError as e:
        return {"error": {"class": e.error_class, "code": e.code, "message": f"{e.reason}: {e.message}"}}, False
    except Exception as e:
        return {"error": {"class": "Unavailable", "code": "QLWF_ORACLE_INTERNAL_ERROR",
                          "message": f"{type(e).__name__}: {e}"}}, False


def answer_line(line: str) -> dict[str, Any]:
    """One batch request → {"ok": resolution} or {"error": {class, code, message}}."""
    return _answer(line)[0]


def encode_answer(line: str) -> str:
    """The canonical answer line to one request (without the newline).

    An answer is built from the parsed request and the model's own values: plain JSON, and free of
    floats unless the request had a float literal, so the fast encoder is exact for it.
    """
    answer, floats = _answer(line)
    return canonical_text(answer) if floats else plain_canonical_json(answer).decode("utf-8")


def run_batch(_args: argparse.Namespace) -> int:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(encode_answer(line) + "\n")
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
