"""model/collation.py: the ql3 collation (task-attempts.md §3A) is node's `a.localeCompare(b)`.

The reference is tests/vectors/collation-vectors.json, written by tests/vectors/generate_collation_vectors.js
with node (its header names node's ICU); the last tests regenerate it when node is on PATH."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qlwf.model import collation
from qlwf.model.collation import (
    COLLATION_UNSUPPORTED,
    CollationUnsupported,
    compare,
    ql3_sorted,
    sort_key,
    strictly_ascending,
)
from qlwf.model.errors import Unavailable

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
VECTOR_FILE = VECTORS / "collation-vectors.json"
GENERATOR = VECTORS / "generate_collation_vectors.js"
REPO = Path(__file__).resolve().parents[2]

Pair = tuple[str, str, int]


@cache
def _vector_file() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(VECTOR_FILE.read_text(encoding="utf-8"))
    return loaded


def _pairs() -> list[Pair]:
    return [(a, b, sign) for a, b, sign in _vector_file()["pairs"]]


def _sign(x: Any, y: Any) -> int:
    return int(x > y) - int(x < y)


def _report(mismatches: list[str]) -> str:
    return f"{len(mismatches)} pairs differ from node, the first ones:\n" + "\n".join(mismatches[:8])


def test_the_vector_file_is_nodes_and_covers_the_alphabet() -> None:
    header = _vector_file()["header"]
    pairs = _pairs()
    assert header["count"] == len(pairs) >= 10_000
    assert header["icu"] and header["node"].startswith("v")
    assert header["collator"]["locale"] == "en-US" and header["collator"]["sensitivity"] == "variant"
    assert {sign for _, _, sign in pairs} == {-1, 0, 1}
    used = {c for a, b, _ in pairs for c in a + b}
    assert used == {chr(i) for i in range(128)}, "every ASCII character occurs in some pair"
    assert any(a == "" or b == "" for a, b, _ in pairs)
    assert max(len(a) for a, _, _ in pairs) > 100


def test_every_vector_pair_compares_as_node_did() -> None:
    mismatches = [f"compare({a!r}, {b!r}) = {compare(a, b)}, node: {sign}"
                  for a, b, sign in _pairs() if compare(a, b) != sign]
    assert not mismatches, _report(mismatches)


def test_sort_key_orders_the_vector_pairs_as_node_did() -> None:
    mismatches = [f"sort_key({a!r}) vs sort_key({b!r}): {_sign(sort_key(a), sort_key(b))}, node: {sign}"
                  for a, b, sign in _pairs() if _sign(sort_key(a), sort_key(b)) != sign]
    assert not mismatches, _report(mismatches)


@pytest.mark.parametrize(("a", "b", "sign"), [
    ("a", "A", -1),  # case decides only on equal primaries: lowercase first
    ("a", "B", -1),  # primaries first: a < b whatever the case
    ("aB", "Ab", -1),  # the first case difference decides
    ("ab", "aB", -1),
    ("abc", "ABd", -1),
    ("a\x01", "a", 0),  # U+0001 is ignorable
    ("", "\x00\x7f", 0),
    ("\t", "\n", -1),
    ("\r", " ", -1),
    ("_", "-", -1),
    ("a-b", "a_b", 1),
    ("~", "$", -1),
    ("$", "0", -1),
    ("9", "a", -1),
    ("Z", "a0", 1),
    ("a", "aa", -1),  # a proper prefix first
    ("A", "a ", -1),
    ("a b", "ab", -1),  # the space is not ignorable
    ("NODE_ENV", "node_env", 1),
    ("API_KEY", "APIKEY", -1),
    ("pkg:a:b", "pkg:a-b:c", 1),
    ("kubernetes.io/arch", "kubernetes_io", 1),
])
def test_named_orders(a: str, b: str, sign: int) -> None:
    assert compare(a, b) == sign
    assert compare(b, a) == -sign


def test_the_spec_primary_order() -> None:
    # task-attempts.md §3A, "The ql3 collation", then digits and letters.
    spec = ["\t", "\n", "\v", "\f", "\r", " ", *"_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$", *"0123456789",
            *"abcdefghijklmnopqrstuvwxyz"]
    assert all(compare(x, y) == -1 for x, y in pairwise(spec))
    for lower in "abcdefghijklmnopqrstuvwxyz":
        upper = lower.upper()
        assert compare(lower, upper) == -1 and sort_key(lower)[0] == sort_key(upper)[0]
    ignorable = [chr(i) for i in [*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F]]
    assert set(ignorable) == collation.IGNORABLE
    assert all(compare(c, "") == 0 and compare("a" + c + "b", "ab") == 0 for c in ignorable)
    assert len(spec) + 26 + len(ignorable) == 128


@pytest.mark.parametrize(("call", "character"), [
    (lambda: compare("é", "e"), "U+00E9"),
    (lambda: compare("abc", "ab\x80"), "U+0080"),
    (lambda: sort_key("task-\U0001f600"), "U+1F600"),
    (lambda: sort_key("\ud800"), "U+D800"),  # a lone surrogate too
    (lambda: ql3_sorted(["b", "a", "Å"]), "U+00C5"),
    (lambda: strictly_ascending(["a", "b", "ç"]), "U+00E7"),
])
def test_a_string_outside_ascii_is_unavailable(call: Any, character: str) -> None:
    with pytest.raises(CollationUnsupported) as raised:
        call()
    error = raised.value
    assert isinstance(error, Unavailable)
    assert error.to_json() == {"class": "Unavailable", "code": "QLWF_ORACLE_COLLATION_UNSUPPORTED",
                               "reason": "collation_unsupported"}
    assert COLLATION_UNSUPPORTED == "QLWF_ORACLE_COLLATION_UNSUPPORTED"
    assert character in error.message
    assert pickle.loads(pickle.dumps(error)).to_json() == error.to_json()


def test_sorted_is_stable_and_compares_only_what_it_must() -> None:
    assert ql3_sorted(["b", "a\x01", "A", "a", "_"]) == ["_", "a\x01", "a", "A", "b"]  # "a\x01" = "a": kept
    assert ql3_sorted(["a", "a\x01"]) == ["a", "a\x01"]
    assert ql3_sorted(iter(["é"])) == ["é"] and ql3_sorted([]) == []  # nothing is compared
    assert strictly_ascending([]) and strictly_ascending(["é"]) and strictly_ascending(["a", "B", "c"])
    assert not strictly_ascending(["a", "a\x01"])  # equal is not ascending
    assert not strictly_ascending(["B", "a"])
    # A descending pair of supported strings decides False, whatever the unsupported ones would do.
    assert not strictly_ascending(["é", "b", "a"])
    with pytest.raises(CollationUnsupported):
        strictly_ascending(["é", "a", "b"])


ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12)
# Few characters, so that equal primaries, case-only and ignorable-only differences are frequent.
NEAR_TIES = st.text(st.sampled_from(list("aAbB_- \t0\x01\x7f")), max_size=6)
STRINGS = ASCII | NEAR_TIES


@given(STRINGS, STRINGS, STRINGS)
def test_compare_is_a_total_preorder_that_sort_key_realises(a: str, b: str, c: str) -> None:
    assert compare(a, a) == 0
    assert compare(a, b) == -compare(b, a)
    assert _sign(sort_key(a), sort_key(b)) == compare(a, b)
    assert (sort_key(a) == sort_key(b)) == (compare(a, b) == 0)
    x, y, z = ql3_sorted([a, b, c])
    assert compare(x, y) <= 0 and compare(y, z) <= 0 and compare(x, z) <= 0  # transitivity
    if compare(x, y) == 0 and compare(y, z) == 0:
        assert compare(x, z) == 0
    assert strictly_ascending([x, y, z]) == (compare(x, y) < 0 and compare(y, z) < 0)


@cache
def _regenerated() -> bytes:
    node = shutil.which("node")
    assert node is not None
    # localeCompare() uses the default locale, which node takes from LC_ALL/LANG: the C locale gives
    # en-US, the locale the committed file was made with (the generator refuses any other).
    env = {**os.environ, "LC_ALL": "C"}
    done = subprocess.run([node, str(GENERATOR)], cwd=REPO, env=env, capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def _node_versions() -> tuple[str, str]:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run([node, "-p", "process.version + ' ' + process.versions.icu"], capture_output=True,
                          text=True, timeout=60, check=True)
    version, icu = done.stdout.split()
    return version, icu


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH: the committed "
                                "collation vectors cannot be regenerated here")


@needs_node
def test_regenerated_pairs_are_the_committed_ones() -> None:
    """Whatever node version runs it, the generator must write the same pairs and signs."""
    committed = VECTOR_FILE.read_bytes()
    fresh = _regenerated()
    body = committed.split(b"\n", 1)[1]
    assert fresh.split(b"\n", 1)[1] == body, "node orders some generated pair differently from the committed file"


@needs_node
def test_regenerated_file_is_byte_identical() -> None:
    header = _vector_file()["header"]
    version, icu = _node_versions()
    if (version, icu) != (header["node"], header["icu"]):
        pytest.skip(f"node {version} with ICU {icu} here, the file was made with node {header['node']} "
                    f"and ICU {header['icu']}: its header differs (the pairs are checked separately)")
    assert _regenerated() == VECTOR_FILE.read_bytes()
