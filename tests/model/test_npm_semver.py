"""model/semver_range.py: a placement runtime's versionRange is accepted exactly as ql3 accepts it
(task-attempts.md §3A): a string of 1..128 UTF-16 code units without control characters for which
npm semver 7.7.4's `validRange` is not null.

The reference is tests/vectors/semver-range-vectors.json, written by tests/vectors/generate_semver_vectors.js
with the npm package itself; its `ql3` field is ql3's verdict, `validRange` npm's answer alone."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import nodesemver
import pytest
from qlwf.model.errors import Unavailable
from qlwf.model.semver_range import (
    NPM_SEMVER_VERSION,
    SEMVER_RANGE_UNSUPPORTED,
    SemverRangeUnsupported,
    is_valid_npm_range,
)

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
VECTOR_FILE = VECTORS / "semver-range-vectors.json"
GENERATOR = VECTORS / "generate_semver_vectors.js"
REPO = Path(__file__).resolve().parents[2]


@cache
def _vector_file() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(VECTOR_FILE.read_text(encoding="utf-8"))
    return loaded


def _vectors() -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = _vector_file()["vectors"]
    return vectors


def _ql3_string_checks_pass(x: str) -> bool:
    """ql3's boundedString(versionRange, ..., 128), which runs before semver decides."""
    utf16_units = len(x.encode("utf-16-le")) // 2
    return 1 <= utf16_units <= 128 and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in x)


def test_the_vector_file_is_npm_semver_as_ql3_pins_it() -> None:
    header = _vector_file()["header"]
    vectors = _vectors()
    assert header["semver"] == NPM_SEMVER_VERSION == "7.7.4"
    assert header["count"] == len(vectors) >= 300
    assert len({v["range"] for v in vectors}) == len(vectors)
    verdicts = {(v["validRange"] is not None, v["ql3"]) for v in vectors}
    assert verdicts == {(True, True), (False, False), (True, False)}  # (True, False): too long, controls, ""


def test_every_vector_is_answered_as_ql3_did_or_unavailable() -> None:
    mismatches: list[str] = []
    unsupported: list[str] = []
    for vector in _vectors():
        x = vector["range"]
        try:
            got = is_valid_npm_range(x)
        except SemverRangeUnsupported:
            unsupported.append(x)
            continue
        if got != vector["ql3"]:
            mismatches.append(f"is_valid_npm_range({x!r}) = {got}, ql3: {vector['ql3']} "
                              f"(validRange {vector['validRange']!r})")
    assert not mismatches, f"{len(mismatches)} differ, the first ones:\n" + "\n".join(mismatches[:8])
    # Unavailable only where ql3's own string checks pass: it never stands in for a verdict they decide.
    assert all(_ql3_string_checks_pass(x) for x in unsupported)
    assert len(unsupported) < len(_vectors()) // 4, "most vectors must test the port, not its restriction"


@pytest.mark.parametrize(("x", "npm_valid", "why"), [
    ("\ufeff1.2.3", True, "U+FEFF"),  # JavaScript's trim() removes U+FEFF, Python's strip() does not
    ("1.2.3\x85", False, "U+0085"),  # Python's \s matches U+0085, JavaScript's does not
    ("1.2+b", True, "'+'"),  # npm removes build metadata from any comparator
    ("+1.2.3", True, "'+'"),  # ... leaving "" (any version)
    ("~1.2.3--01", True, "'--'"),  # the port drops the hyphen before a prerelease starting with '-'
    ("^1.2.3--01", True, "'--'"),  # (on "^1.2.3--1" both say valid, for different ranges)
    ("**", False, "two '*'"),  # npm removes only the first '*' of a comparator
    ("*1.2.3*", False, "two '*'"),
    ("9007199254740992.0.0", False, "16 or more digits"),  # above Number.MAX_SAFE_INTEGER
    ("^9007199254740991", False, "16 or more digits"),  # its upper bound 9007199254740992.0.0 is
    ("999999999999999*01.2.1", False, "16 or more digits"),  # '*' removed: 99999999999999901.2.1
])
def test_each_unsupported_class_is_a_real_disagreement(x: str, npm_valid: bool, why: str) -> None:
    """Each restriction of the module answers Unavailable where the port and npm do part; when a
    nodesemver release fixes one, this fails and the restriction can go."""
    vector = next(v for v in _vectors() if v["range"] == x)
    assert (vector["validRange"] is not None) == npm_valid
    assert (nodesemver.valid_range(x, False) is not None) != npm_valid, "the port now agrees with npm"
    with pytest.raises(SemverRangeUnsupported) as raised:
        is_valid_npm_range(x)
    assert why in raised.value.message


@pytest.mark.parametrize(("x", "accepted"), [
    ("^1.2.3", True),
    ("~1.2", True),
    (">=1.0.0 <2.0.0", True),
    ("1.x", True),
    ("*", True),
    ("1.2.3 - 2.3.4", True),
    ("^18.19.0 || ^20.9.0 || >=21.1.0", True),
    ("1.2.3-beta.1", True),
    ("v1.2.3", True),
    ("=1.2.3", True),
    ("  >=  1.2.3  ", True),
    ("", False),  # npm says "*", but ql3 wants at least one character
    (">=1.0.0" + " " * 121, True),  # 128 characters
    (">=1.0.0" + " " * 122, False),  # 129: longer than ql3 allows, npm would take it
    ("\t1.2.3", False),  # npm takes the TAB as space, ql3 refuses control characters first
    ("1.2.3\n", False),
    ("1.2.3\x7f", False),
    ("\u00e9" * 129, False),  # too long decides before "not ASCII" could
    ("abc", False),
    ("latest", False),
    (">=", False),
    ("1.2.3.4", False),
    ("^^1", False),
    ("1 - ", False),
    (">=1.0.0, <2.0.0", False),
    (None, False),
    (123, False),
    (["^1.2.3"], False),
])
def test_named_ranges(x: object, accepted: bool) -> None:
    assert is_valid_npm_range(x) is accepted
    vector = next((v for v in _vectors() if v["range"] == x), None)
    if vector is not None:
        assert vector["ql3"] is accepted, "the named case contradicts npm semver's vector"


def test_unsupported_is_an_oracle_unavailable() -> None:
    with pytest.raises(SemverRangeUnsupported) as raised:
        is_valid_npm_range("1.2.3 \U0001f600")
    assert isinstance(raised.value, Unavailable)
    assert raised.value.to_json() == {"class": "Unavailable", "code": "QLWF_ORACLE_SEMVER_RANGE_UNSUPPORTED",
                                      "reason": "semver_range_unsupported"}
    assert SEMVER_RANGE_UNSUPPORTED == "QLWF_ORACLE_SEMVER_RANGE_UNSUPPORTED"
    assert "U+1F600" in raised.value.message
    assert pickle.loads(pickle.dumps(raised.value)).message == raised.value.message


SEMVER_DIR = os.environ.get("SEMVER_DIR")


@pytest.mark.skipif(shutil.which("node") is None or not SEMVER_DIR,
                    reason="needs node on PATH and SEMVER_DIR naming an install of npm semver 7.7.4 "
                           "(npm install --prefix DIR semver@7.7.4)")
def test_regenerated_vectors_are_the_committed_ones() -> None:
    node = shutil.which("node")
    assert node is not None and SEMVER_DIR is not None
    done = subprocess.run([node, str(GENERATOR), SEMVER_DIR], cwd=REPO, capture_output=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout == VECTOR_FILE.read_bytes()
