"""The parts of a ql3 execution revision: command, environment and placement (task-attempts.md §3A).

Each normalizer takes the raw JSON value and returns a new value in canonical key order, or raises
EvidenceProblem with the detail (the §3A ladder reports it as check A5). Keys the spec says are
dropped are dropped; everything else fails closed. Orders that the spec puts in the ql3 collation
use `collation`, which answers Unavailable rather than guess outside its alphabet.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, cast

from . import collation
from . import tables as T
from .errors import evidence_check
from .records import Record
from .semver_range import is_valid_npm_range
from .values import is_array, is_int, is_int_in, is_object, is_str

_PLACEMENT_TOKEN_RE = re.compile(r"[a-z0-9][a-z0-9._+-]*", re.ASCII)
_LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*", re.ASCII)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_ARRAY_INDEX_RE = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_BASE64URL_RE = re.compile(r"[A-Za-z0-9_-]*", re.ASCII)
_ARRAY_INDEX_LIMIT = 2**32 - 1  # ECMAScript: an array index is an integer below 2^32 - 1


def utf8_len(x: str) -> int | None:
    """UTF-8 length of x, or None for a string with a lone surrogate (not valid UTF-8)."""
    try:
        return len(x.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def utf16_len(x: str) -> int:
    """JavaScript's `length`: ql3 counts "characters" in UTF-16 code units."""
    return len(x.encode("utf-16-le", "surrogatepass")) // 2


def is_bytes_text(x: Any, lo: int, hi: int, *, no_controls: bool = False) -> bool:
    """A string of lo..hi UTF-8 bytes without U+0000 (or without any control when no_controls)."""
    if not is_str(x) or (_CONTROL_RE.search(x) if no_controls else "\x00" in x):
        return False
    n = utf8_len(x)
    return n is not None and lo <= n <= hi


def is_absolute_path(x: Any) -> bool:
    return is_bytes_text(x, 1, T.MAX_PATH_BYTES) and x.startswith("/")


# --- command -----------------------------------------------------------------------------------------

def normalize_command(x: Any) -> Record:
    """`{kind: "argv", file, args}` or `{kind: "shell", command, shell?}`; other keys are dropped."""
    evidence_check(is_object(x), "command must be an object")
    kind = x.get("kind")
    if kind == "argv":
        evidence_check("file" in x and is_absolute_path(x["file"]), "command.file must be an absolute path")
        args = x.get("args")
        evidence_check(is_array(args) and len(args) <= T.MAX_COMMAND_ARGS, "command.args must be an array of <= 256")
        total = utf8_len(x["file"]) or 0
        for arg in args:
            evidence_check(is_bytes_text(arg, 0, T.MAX_COMMAND_ARG_BYTES), "command.args entry invalid")
            total += utf8_len(arg) or 0
        evidence_check(total <= T.MAX_COMMAND_BYTES, "command file plus args exceed 65536 bytes")
        return {"kind": "argv", "file": x["file"], "args": list(args)}
    evidence_check(kind == "shell", "command.kind must be argv or shell")
    evidence_check(is_bytes_text(x.get("command"), 1, T.MAX_COMMAND_BYTES), "command.command invalid")
    out: Record = {"kind": "shell", "command": x["command"]}
    if "shell" in x:
        evidence_check(x["shell"] in T.SHELLS and is_str(x["shell"]), "command.shell must be /bin/sh or /bin/bash")
        out["shell"] = x["shell"]
    return out


# --- environment (cluster only) ------------------------------------------------------------------------

def secret_ref_subject(ref: str) -> Record | None:
    """The object a `qlsecret:v1:` reference names, or None when it is not a canonical reference:
    unpadded base64url that re-encodes to itself, of a JSON object {projectId, name, version?}."""
    prefix = "qlsecret:v1:"
    if not ref.startswith(prefix):
        return None
    body = ref[len(prefix):]
    if not body or _BASE64URL_RE.fullmatch(body) is None or len(body) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        subject: Any = json.loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != body:
        return None  # non-canonical: unused trailing bits set
    if not is_object(subject) or not {"projectId", "name"} <= subject.keys() <= {"projectId", "name", "version"}:
        return None
    if not is_str(subject["projectId"]) or not is_str(subject["name"]) or not subject["name"]:
        return None
    if "version" in subject and not (is_int(subject["version"]) and subject["version"] >= 1):
        return None
    return cast(Record, subject)


def encode_secret_ref(project_id: str, name: str, version: int | None = None) -> str:
    """The canonical `qlsecret:v1:` reference of a secret (for builders and tests)."""
    subject: Record = {"projectId": project_id, "name": name}
    if version is not None:
        subject["version"] = version
    body = json.dumps(subject, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return "qlsecret:v1:" + base64.urlsafe_b64encode(body).decode("ascii").rstrip("=")


def _environment_entry(x: Any, project_id: str) -> tuple[Record, int]:
    evidence_check(is_object(x), "environment entry must be an object")
    name = x.get("name")
    evidence_check(is_str(name) and _ENV_NAME_RE.fullmatch(name) is not None and not name.startswith("QL3_"),
                   "environment name invalid")
    if x.get("kind") == "public":
        value = x.get("value")
        evidence_check(is_bytes_text(value, 0, T.MAX_ENVIRONMENT_BYTES), "environment value invalid")
        return {"name": name, "kind": "public", "value": value}, len(name) + (utf8_len(value) or 0)
    evidence_check(x.get("kind") == "secret", "environment kind must be public or secret")
    ref = x.get("secretRef")
    evidence_check(is_bytes_text(ref, 1, T.MAX_SECRET_REF_BYTES), "environment secretRef invalid")
    subject = secret_ref_subject(ref)
    evidence_check(subject is not None and subject["projectId"] == project_id,
                   "environment secretRef is not a canonical reference of this project")
    return {"name": name, "kind": "secret", "secretRef": ref}, len(name) + (utf8_len(ref) or 0)


def normalize_environment(x: Any, project_id: str) -> list[Record]:
    """At most 256 unique names; sorted by name in the ql3 collation (the input may be unsorted)."""
    evidence_check(is_array(x) and len(x) <= T.MAX_ENVIRONMENT_ENTRIES, "environment must be an array of <= 256")
    entries: list[Record] = []
    total = 0
    for raw in x:
        entry, size = _environment_entry(raw, project_id)
        entries.append(entry)
        total += size
    evidence_check(len({e["name"] for e in entries}) == len(entries), "environment names are not unique")
    evidence_check(total <= T.MAX_ENVIRONMENT_BYTES, "environment names plus values exceed 65536 bytes")
    return sorted(entries, key=lambda e: collation.sort_key(e["name"]))


# --- placement (cluster only) --------------------------------------------------------------------------

def _token(x: Any) -> bool:
    return is_str(x) and len(x) <= T.MAX_PLACEMENT_TOKEN_CHARS and _PLACEMENT_TOKEN_RE.fullmatch(x) is not None


def _token_list(x: Any, what: str) -> list[str]:
    evidence_check(is_array(x) and len(x) <= T.MAX_PLACEMENT_LIST and all(_token(v) for v in x),
                   f"placement {what} must be at most 16 tokens")
    evidence_check(len(set(x)) == len(x), f"placement {what} are not unique")
    return sorted(x)  # code point order (§3A)


def label_key_order(keys: list[str]) -> list[str]:
    """ql3's property order of a labels object: canonical array indices ascending by value, then the
    other keys in the ql3 collation (JavaScript enumerates integer-like keys first)."""
    indices = [k for k in keys if _ARRAY_INDEX_RE.fullmatch(k) and int(k) < _ARRAY_INDEX_LIMIT]
    others = [k for k in keys if k not in set(indices)]
    return sorted(indices, key=int) + collation.ql3_sorted(others)


def normalize_labels(x: Any, *, non_empty: bool = False) -> Record:
    evidence_check(is_object(x) and len(x) <= T.MAX_PLACEMENT_LIST, "placement labels must be an object of <= 16")
    evidence_check(not non_empty or len(x) > 0, "preferred labels must not be empty")
    for key, value in x.items():
        evidence_check(len(key) <= T.MAX_LABEL_KEY_CHARS and _LABEL_KEY_RE.fullmatch(key) is not None,
                       "placement label key invalid")
        evidence_check(is_str(value) and 1 <= utf16_len(value) <= T.MAX_LABEL_VALUE_CHARS
                       and _CONTROL_RE.search(value) is None and utf8_len(value) is not None,
                       "placement label value invalid")
    return {k: x[k] for k in label_key_order(list(x))}


def _runtimes(x: Any) -> list[Record]:
    evidence_check(is_array(x) and len(x) <= T.MAX_PLACEMENT_LIST, "placement runtimes must be an array of <= 16")
    out: list[Record] = []
    for r in x:
        evidence_check(is_object(r) and "name" in r and set(r) <= {"name", "versionRange"},
                       "placement runtime must be {name, versionRange?}")
        evidence_check(_token(r["name"]), "placement runtime name invalid")
        if "versionRange" in r:
            evidence_check(is_valid_npm_range(r["versionRange"]), "placement runtime versionRange invalid")
        out.append({k: r[k] for k in ("name", "versionRange") if k in r})
    evidence_check(len({r["name"] for r in out}) == len(out), "placement runtime names are not unique")
    return sorted(out, key=lambda r: collation.sort_key(r["name"]))


def _required(x: Any) -> Record:
    evidence_check(is_object(x) and set(x) <= set(T.PLACEMENT_REQUIRED_KEYS), "placement.required keys invalid")
    out: Record = {}
    for key in T.PLACEMENT_REQUIRED_KEYS:
        if key not in x:
            if key == "executors":
                out[key] = [T.REMOTE_WORKER_EXECUTOR]
            continue
        value = x[key]
        if key in T.PLACEMENT_STRING_LISTS:
            out[key] = _token_list(value, key)
            if key == "executors":
                evidence_check(T.REMOTE_WORKER_EXECUTOR in out[key], "placement executors must allow remote-worker")
        elif key == "runtimes":
            out[key] = _runtimes(value)
        elif key == "labels":
            out[key] = normalize_labels(value)
        elif key == "gpuVendor":
            evidence_check(_token(value), "placement gpuVendor invalid")
            out[key] = value
        else:  # minMemoryBytes, minDiskBytes
            evidence_check(is_int(value) and value >= 1, f"placement {key} must be an int >= 1")
            out[key] = value
    return out


def _preferred(x: Any) -> list[Record]:
    evidence_check(is_array(x) and len(x) <= T.MAX_PLACEMENT_LIST, "placement.preferred must be an array of <= 16")
    out: list[Record] = []
    for p in x:
        evidence_check(is_object(p) and set(p) == {"labels", "weight"}, "preference must be {labels, weight}")
        evidence_check(is_int_in(p["weight"], 1, T.MAX_PREFERENCE_WEIGHT), "preference weight must be 1..100")
        out.append({"labels": normalize_labels(p["labels"], non_empty=True), "weight": p["weight"]})
    return out


def normalize_placement(x: Any) -> Record:
    """Absent (the caller passes None) or null is the default placement; executors defaults too."""
    if x is None:
        return {"required": {"executors": [T.REMOTE_WORKER_EXECUTOR]}}
    evidence_check(is_object(x) and set(x) <= {"required", "preferred"}, "placement keys must be among required, "
                   "preferred")
    out: Record = {"required": _required(x.get("required", {}))}
    if "preferred" in x:
        out["preferred"] = _preferred(x["preferred"])
    return out
