"""The oracle fuzzer: valid oracle requests and one-field mutations of them, with what each answer must be.

Shared by tests/conformance/checkers/test_oracle_fuzz.py (one `qlwf oracle batch` process answers every line) and the
oracle shards of `qlwf campaign` (the same answer function in-process). Lines come from a seeded
`random.Random`, so a seed replays them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

REQUEST_INVALID = "QLWF_ORACLE_REQUEST_INVALID"
INTERNAL_ERROR = "QLWF_ORACLE_INTERNAL_ERROR"
MARK = "@@QLWF_FUZZ@@"  # replaced by raw JSON text that json.dumps cannot write (1E400, "\ud800", …)
JsonPath = tuple[str | int, ...]


# --------------------------------------------------------------------------------------------------
# Mutations: each returns (line bytes without its line end, what the answer must be)
def paths(value: Any, prefix: JsonPath = ()) -> Iterator[JsonPath]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, (*prefix, i))


def replaced(doc: Any, path: JsonPath, value: Any) -> Any:
    """`doc` with the node at `path` replaced (containers copied along the path only)."""
    if not path:
        return value
    out: Any = dict(doc) if isinstance(doc, dict) else list(doc)
    out[path[0]] = replaced(doc[path[0]], path[1:], value)
    return out


def deleted(doc: Any, path: JsonPath) -> Any:
    if len(path) == 1:
        out: Any = dict(doc) if isinstance(doc, dict) else list(doc)
        del out[path[0]]
        return out
    return replaced(doc, path[:1], deleted(doc[path[0]], path[1:]))


def renamed(doc: Any, path: JsonPath, key: str) -> Any:
    """`doc` with the dict key at the end of `path` renamed, in place in the key order."""
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    return replaced(doc, path[:-1], {key if k == path[-1] else k: v for k, v in parent.items()})


SCALARS: list[Any] = [None, True, False, 0, 1, -1, "", "x", "é\u2028\n\t", "😀", "a" * 300, [], {}, [1, "a"],
                      {"a": 1}, 0.5, -0.0]
NUMBERS: list[Any] = [2**53, 2**53 - 1, -(2**53), 2**64, 10**30, -(10**30), -1, 0, 1.5, 1e308, -1e308, 5e-324,
                      10**308, int(1.7e308)]
NOT_STRICT_NUMBERS = ["1E400", "-1E400", "1e999", "NaN", "Infinity", "-Infinity", "1" + "0" * 400, "-" + "9" * 330]
LONE_SURROGATES = ['"\\ud800"', '"x\\udfff"', '"\\udc00\\ud800"', '"\\ud83d\\u0041"', '"\\udbff"']
BAD_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc3"]
BAD_FN: list[Any] = [["frontier"], {}, {"frontier": 1}, 1, None, True, 2.5, "", "FRONTIER", "frontier ", "nope"]
BLANK = [b"", b" ", b"\t", b"\r", b"  \t \r"]


class Fuzzer:
    def __init__(self, rng: random.Random, pool: list[tuple[str, Any]]) -> None:
        self.rng = rng
        self.pool = pool
        self.paths = [list(paths(inp)) for _, inp in pool]
        self.mutations: list[tuple[int, Callable[[int], tuple[bytes, str]]]] = [
            (5, self.valid), (12, self.delete), (12, self.retype), (10, self.number), (8, self.not_strict_number),
            (8, self.lone_surrogate), (6, self.nested_junk), (5, self.garbage), (4, self.truncated), (6, self.bad_fn),
            (4, self.blank), (6, self.bad_utf8), (5, self.envelope),
        ]
        self.weights = [w for w, _ in self.mutations]

    def line(self) -> tuple[bytes, str, int]:
        """One line, the expectation on its answer and the pool index it came from."""
        i = self.rng.randrange(len(self.pool))
        (_, mutate), = self.rng.choices(self.mutations, self.weights)
        line, expect = mutate(i)
        return line, expect, i

    def _text(self, request: Any, raw: str | None = None) -> bytes:
        text = json.dumps(request, ensure_ascii=self.rng.random() < 0.5,
                          separators=(",", ":") if self.rng.random() < 0.5 else None)
        if raw is not None:
            assert f'"{MARK}"' in text
            text = text.replace(f'"{MARK}"', raw, 1)
        return text.encode("utf-8")

    def _path(self, i: int, where: Callable[[JsonPath], bool] = lambda p: True) -> JsonPath | None:
        candidates = [p for p in self.paths[i] if where(p)]
        return self.rng.choice(candidates) if candidates else None

    def _request(self, i: int, inp: Any) -> dict[str, Any]:
        return {"fn": self.pool[i][0], "input": inp}

    def valid(self, i: int) -> tuple[bytes, str]:
        return self._text(self._request(i, self.pool[i][1])), "valid"

    def delete(self, i: int) -> tuple[bytes, str]:
        path = self._path(i, lambda p: len(p) > 0)
        inp = self.pool[i][1]
        return self._text(self._request(i, deleted(inp, path) if path else {})), "any"

    def retype(self, i: int) -> tuple[bytes, str]:
        path = self._path(i) or ()
        return self._text(self._request(i, replaced(self.pool[i][1], path, self.rng.choice(SCALARS)))), "any"

    def number(self, i: int) -> tuple[bytes, str]:
        path = self._path(i) or ()
        return self._text(self._request(i, replaced(self.pool[i][1], path, self.rng.choice(NUMBERS)))), "any"

    def not_strict_number(self, i: int) -> tuple[bytes, str]:
        path = self._path(i) or ()
        raw = self.rng.choice(NOT_STRICT_NUMBERS)
        return self._text(self._request(i, replaced(self.pool[i][1], path, MARK)), raw), "json_invalid"

    def lone_surrogate(self, i: int) -> tuple[bytes, str]:
        raw = self.rng.choice(LONE_SURROGATES)
        key_path = self._path(i, lambda p: len(p) > 0 and isinstance(p[-1], str))
        if key_path is not None and self.rng.random() < 0.4:
            return self._text(self._request(i, renamed(self.pool[i][1], key_path, MARK)), raw), "json_invalid"
        path = self._path(i) or ()
        return self._text(self._request(i, replaced(self.pool[i][1], path, MARK)), raw), "json_invalid"

    def nested_junk(self, i: int) -> tuple[bytes, str]:
        depth = self.rng.choice([1, 2, 3, 5, 8, 30, 60, 63, 64, 65, 70, 200, 3000])
        opener, closer = self.rng.choice([("[", "]"), ('{"k":', "}"), ('[{"a":', "}]")])
        raw = opener * depth + self.rng.choice(["0", "null", '"s"', "[]", "{}"]) + closer * depth
        path = self._path(i) or ()
        return self._text(self._request(i, replaced(self.pool[i][1], path, MARK)), raw), "any"

    def garbage(self, i: int) -> tuple[bytes, str]:
        data = self.rng.randbytes(self.rng.randint(1, 80)).replace(b"\n", b"")
        return data, "request_family"  # blank, not UTF-8, not JSON or not a request: never reaches a function

    def truncated(self, i: int) -> tuple[bytes, str]:
        text = self.valid(i)[0]
        return text[: self.rng.randrange(1, len(text))].rstrip(b" \t\r"), "json_invalid"

    def bad_fn(self, i: int) -> tuple[bytes, str]:
        return self._text({"fn": self.rng.choice(BAD_FN), "input": self.pool[i][1]}), "request_family"

    def blank(self, i: int) -> tuple[bytes, str]:
        return self.rng.choice(BLANK), "request_invalid"

    def bad_utf8(self, i: int) -> tuple[bytes, str]:
        text = self.valid(i)[0]
        at = self.rng.randrange(len(text) + 1)
        return text[:at] + self.rng.choice(BAD_UTF8) + text[at:], "json_invalid"

    def envelope(self, i: int) -> tuple[bytes, str]:
        fn, inp = self.pool[i]
        choice = self.rng.randrange(5)
        if choice == 0:
            return self._text({"fn": fn}), "request_invalid"
        if choice == 1:
            return self._text({"fn": fn, "input": inp, "extra": 1}), "request_invalid"
        if choice == 2:
            return self._text([fn, inp]), "request_invalid"
        if choice == 3:
            return self._text(fn), "request_invalid"
        return self._text({"fn": MARK, "input": inp}, raw=f'"{fn}","fn":"{fn}"'), "json_invalid"  # duplicate key


# --------------------------------------------------------------------------------------------------
# Checks
def check_answer(raw: bytes, expect: str, want_ok: Any) -> str | None:
    """A problem with one answer line, or None."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return f"answer is not JSON: {raw[:200]!r}"
    if not isinstance(answer, dict) or len(answer) != 1 or next(iter(answer)) not in ("ok", "error"):
        return f"answer is not {{ok}} or {{error}}: {raw[:200]!r}"
    if "ok" in answer:
        if expect == "valid" and answer["ok"] != want_ok:
            return "valid line answered with a resolution that differs from consult()"
        return None if expect in ("valid", "any") else f"expected {expect}, got a resolution"
    error = answer["error"]
    if not isinstance(error, dict) or set(error) != {"class", "code", "message"}:
        return f"error answer has keys {sorted(error)}"
    reason = str(error["message"]).split(":", 1)[0]
    if error["code"] == INTERNAL_ERROR or error["class"] not in ("Invalid", "Conflict", "Unavailable"):
        return f"internal error: {error}"
    if expect == "valid":
        return f"valid line answered {error}"
    if expect in ("json_invalid", "request_invalid") and (error["code"], reason) != (REQUEST_INVALID, expect):
        return f"expected {REQUEST_INVALID} {expect}, got {error}"
    if expect == "request_family" and error["code"] != REQUEST_INVALID:
        return f"expected {REQUEST_INVALID}, got {error}"
    return None
