"""`qlwf oracle`: consult the specification oracle on ql3 JSON snapshots (one file, or batch lines on stdin).

The protocol — strict JSON in, one answer out — is `qlwf.oracle.protocol`; this module reads files and
stdin, writes stdout, and maps the answers to exit codes.
"""

from __future__ import annotations

import argparse
import gc
import sys

from qlwf.model.errors import Invalid, QlwfError
from qlwf.model.memo import parsed_json_input
from qlwf.model.oracle import FUNCTIONS, ORACLE_REQUEST_INVALID, consult
from qlwf.oracle.protocol import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    INTERNAL_ERROR,
    MAX_DEPTH,
    answer_bytes,
    decode_utf8,
    describe,
    encode,
    one_line,
    parse_json_floats,
)
from qlwf.support import stdio

INPUTS = {
    "frontier": "{plan, run, stepRuns, observedAtMs} (frontier.md)",
    "cancel": "{run, stepRuns, activeTaskAttempts, observedAtMs} (cancellation.md)",
    "recover": "{admission, run, attempt, stepRun, reason, observedAtMs} (task-attempts.md)",
    "admit-attempt": ("{plan, run, stepRun, binding, attemptNumber, admittedAtMs} (task-attempts.md §3) or ql3's "
                      "{plan, run, stepRun, taskReconciliation, execution, attemptNumber, admittedAtMs} (§3A)"),
    "admit-workflow": "an execution plan (records.md)",
    "step-transition": "{current, command, context} (state-machines.md §3); batch only",
}


# --------------------------------------------------------------------------------------------------
# Commands
def _stdout_gone() -> int:
    """The reader closed stdout: nobody is left to answer, which ends the oracle normally."""
    stdio.discard_stdout()
    return 0


def _fail(code: int, message: str) -> int:
    print(one_line(message), file=sys.stderr)
    return code


def _read(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except (OSError, ValueError) as e:
        raise Invalid(ORACLE_REQUEST_INVALID, "file_unreadable",
                      f"cannot read {path!r}: {getattr(e, 'strerror', None) or e}") from e
    return decode_utf8(data)


def run_single(args: argparse.Namespace) -> int:
    try:
        inp, floats = parse_json_floats(_read(args.file))
        with parsed_json_input():
            answer = consult(args.fn, inp)
        body = {"resolution": answer.resolution, "explanation": answer.explanation} if args.explain \
            else answer.resolution
        data = encode(body, args.pretty, floats)  # inside the handler: unencodable output is an internal error
    except QlwfError as e:
        return _fail(EXIT_INPUT, f"{e.error_class} {e.code} {e.reason}: {e.message}")
    except Exception as e:
        return _fail(EXIT_INTERNAL, f"internal error ({describe(e)})")
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        return _stdout_gone()
    return 0


FULL_COLLECTION_EVERY = 256  # answers between full (generation 2) collections in batch mode


def run_batch(_args: argparse.Namespace) -> int:
    # readline() on the binary buffer returns as soon as one line is there (no read-ahead wait);
    # every answer is flushed before the next line is read, so a client may wait for each one.
    read, out = sys.stdin.buffer.readline, sys.stdout.buffer
    # The cyclic collector runs between answers, not inside them: a collection triggered mid-request
    # is latency the client waits for, one after the flush overlaps the client's next request. The
    # start-up heap (modules, tables) is frozen so a full collection does not rescan it.
    gc.freeze()
    gc.disable()
    try:
        served = 0
        while raw := read():
            out.write(answer_bytes(raw))
            out.flush()
            served += 1
            gc.collect(2 if served % FULL_COLLECTION_EVERY == 0 else 0)
    except BrokenPipeError:
        return _stdout_gone()
    finally:
        gc.enable()
        gc.unfreeze()  # an in-process caller (a test) keeps its own collector as it was
    return 0


DESCRIPTION = "Resolve one ql3 snapshot with a pure function of the spec and print the contract object."
EPILOG = "\n".join([
    "functions (input):",
    *(f"  {fn:<16}{INPUTS.get(fn, '')}" for fn in FUNCTIONS),
    '  batch           JSON lines {"fn": FUNCTION, "input": {...}} on stdin',
    "",
    "output:",
    "  FUNCTION FILE   the resolution as canonical JSON (records.md §5) on one line (FILE - reads",
    '                  stdin); --pretty indents; --explain prints {"resolution", "explanation": {id: rule}}',
    "  batch           exactly one answer line per input line, in order, flushed at once:",
    '                  {"ok": resolution} or {"error": {"class", "code", "message"}}; blank,',
    "                  non-JSON and non-UTF-8 lines are answered with QLWF_ORACLE_REQUEST_INVALID",
    "  Input must be strict JSON: NaN, Infinity, numbers beyond a double (1E400), lone surrogates,",
    f"  duplicate keys and nesting deeper than {MAX_DEPTH} are json_invalid.",
    "",
    "exit codes:",
    "  0   answered (batch: stdin ended, or the reader closed stdout)",
    f"  {EXIT_INPUT}   invalid input: one line 'CLASS CODE reason: message' on stderr, nothing on stdout",
    f"  {EXIT_INTERNAL}  internal error: a bug in the oracle (batch: answered as {INTERNAL_ERROR})",
])


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    oracle = sub.add_parser("oracle", help="consult the specification oracle on a ql3 JSON snapshot",
                            description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    fns = oracle.add_subparsers(dest="fn", required=True, metavar="FUNCTION")
    for fn in FUNCTIONS:
        if fn == "step-transition":
            continue  # batch only: it takes {current, command, context}
        p = fns.add_parser(fn, help=f"resolve a snapshot with the {fn} contract", description=DESCRIPTION,
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("file", metavar="FILE", help="ql3 JSON snapshot, or - for stdin")
        p.add_argument("--explain", action="store_true", help="add the rule that decided each StepRun/attempt")
        p.add_argument("--pretty", action="store_true", help="indent the output (default: canonical JSON)")
        p.set_defaults(func=run_single)
    b = fns.add_parser("batch", help='JSON lines {"fn": ..., "input": {...}} on stdin, one answer line each',
                       description="Answer each JSON line of stdin with one line on stdout, flushed at once.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.set_defaults(func=run_batch)
