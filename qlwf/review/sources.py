"""What `qlwf diff` compares: the two trees, and the oracle inputs both models answer.

The base is a git revision, unpacked with `git archive` (only pyproject.toml and the model and
proofs directories it maps) into a temporary directory that is always removed, or a directory
holding another copy of the repository. Oracle inputs are data only: the example snapshots of
examples/ and the snapshots recorded in the golden corpus traces (each Run at each step, as a
frontier snapshot and, while a cancel intent is open, a cancellation snapshot). The corpus
traces' inputs are also run through both models step by step. All inputs are the working tree's.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qlwf.conformance.checkers.model_import import TreeError, package_dirs, tree_dirs
from qlwf.conformance.traces.format import EXPECTATION_KEYS

Record = dict[str, Any]
ORACLE_FUNCTIONS = ("admit-attempt", "admit-workflow", "step-transition", "frontier", "cancel", "recover")


class DiffInputError(ValueError):
    """Bad input to `qlwf diff` (exit 2): not a repository, an unknown revision, no model there."""


@dataclass(frozen=True)
class Tree:
    root: Path
    label: str  # how the report names it


def _git(repo: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess[Any]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text, check=False)


def repository_root(start: Path) -> Path:
    done = _git(start, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise DiffInputError(f"{start}: not a git repository")
    return Path(str(done.stdout).strip())


def head_tree(repo: Path) -> Tree:
    try:
        tree_dirs(repo)
    except TreeError as e:
        raise DiffInputError(str(e)) from e
    return Tree(repo, "working tree")


def resolve_revision(repo: Path, ref: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise DiffInputError(f"unknown revision {ref!r} in {repo}")
    return str(done.stdout.strip())


@contextmanager
def base_tree(repo: Path | None, base: str) -> Iterator[Tree]:
    """`base` is a directory holding a copy of the repository, or a revision of `repo`."""
    as_path = Path(base)
    if as_path.is_dir() and (as_path / "pyproject.toml").is_file():
        try:
            tree_dirs(as_path)
        except TreeError as e:
            raise DiffInputError(str(e)) from e
        yield Tree(as_path.resolve(), str(as_path))
        return
    if repo is None:
        raise DiffInputError(f"{base!r} is not a directory with a pyproject.toml, and there is no repository "
                             "to resolve it as a revision")
    try:
        commit = resolve_revision(repo, base)
    except DiffInputError:
        if as_path.is_dir():  # meant as a copy, most likely: say what it lacks (decisions Q-110)
            raise DiffInputError(f"{base!r} is a directory without a pyproject.toml (a copy of the repository has "
                                 f"one at its top), and not a revision of {repo}") from None
        raise
    tmp = Path(tempfile.mkdtemp(prefix="qlwf-diff-base-"))
    try:
        _unpack(repo, commit, tmp)
        yield Tree(tmp, f"{base} ({commit[:10]})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(repo: Path, commit: str, into: Path) -> None:
    shown = _git(repo, "show", f"{commit}:pyproject.toml")
    pyproject = shown.stdout if shown.returncode == 0 else None
    wanted = ["pyproject.toml"] if pyproject is not None else []
    for rel in package_dirs(pyproject).values():
        if _git(repo, "ls-tree", "--name-only", commit, "--", rel).stdout.strip():
            wanted.append(rel)
    if not wanted:
        raise DiffInputError(f"revision {commit[:10]} holds no model")
    done = _git(repo, "archive", "--format=tar", commit, "--", *wanted, text=False)
    if done.returncode != 0:
        raise DiffInputError(f"git archive {commit[:10]} failed: {done.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        extract_plain(archive, into)
    try:
        tree_dirs(into)
    except TreeError as e:
        raise DiffInputError(f"revision {commit[:10]}: {e}") from e


def extract_plain(archive: tarfile.TarFile, into: Path) -> None:
    """Extract an archive of plain files and directories below `into`, refusing anything else: by the
    stdlib's "data" filter where the interpreter has one (3.11.4 and later), by the same test made
    here before that (Debian 12's python3 is 3.11.2), so `qlwf diff` runs on every Python 3.11."""
    if hasattr(tarfile, "data_filter"):
        try:
            archive.extractall(into, filter="data")
        except tarfile.FilterError as e:
            raise DiffInputError(f"the archive of the base holds what is not a plain file below it: {e}") from e
        return
    root = into.resolve()
    for member in archive.getmembers():
        target = (root / member.name).resolve()
        if not (member.isfile() or member.isdir()) or root not in (target, *target.parents):
            raise DiffInputError(f"the archive of the base holds {member.name!r}, not a plain file below it")
    archive.extractall(into)


# ------------------------------------------------------------------------------------------------
# Oracle inputs
def _function_of(name: str) -> str | None:
    return next((fn for fn in ORACLE_FUNCTIONS if name.startswith(fn + "-") or name == fn), None)


def example_inputs(examples: Path) -> list[Record]:
    out: list[Record] = []
    for path in sorted(examples.glob("*.json")):
        fn = _function_of(path.stem)
        if fn is not None:
            out.append({"id": f"examples/{path.name}", "fn": fn, "input": json.loads(path.read_text("utf-8"))})
    batch = examples / "batch.jsonl"
    if batch.is_file():
        for i, line in enumerate(batch.read_text("utf-8").splitlines(), 1):
            if line.strip():
                item = json.loads(line)
                out.append({"id": f"examples/batch.jsonl:{i}", "fn": item["fn"], "input": item["input"]})
    return out


# The key of every record kind of a snapshot (commands.md §1.3; conformance/traces/format.py KIND_KEYS).
_KEYS = {"admissions": ("planDigest",), "runs": ("id",), "stepRuns": ("id",), "attempts": ("id",),
         "taskReceipts": ("attemptId",), "leases": ("attemptId",)}


def corpus_inputs(corpus: Path) -> list[Record]:
    """Frontier and cancellation snapshots of every Run after every recorded step of every trace,
    rebuilt from the recorded record changes (no model runs here), each distinct input once."""
    out: list[Record] = []
    seen: set[str] = set()
    for path in sorted(corpus.glob("*.json")):
        trace = json.loads(path.read_text("utf-8"))
        records: dict[str, dict[str, Record]] = {kind: {} for kind in _KEYS}
        for i, step in enumerate(trace.get("steps", [])):
            for change in step.get("state", {}).get("changes", []):
                kind = change["kind"]
                if kind in records:
                    key = json.dumps(change["key"])
                    if change["record"] is None:
                        records[kind].pop(key, None)
                    else:
                        records[kind][key] = change["record"]
            if "clock" not in step:
                continue
            for item in _snapshots_at(records, step["clock"]):
                text = json.dumps(item, sort_keys=True)
                if text not in seen:
                    seen.add(text)
                    out.append({"id": f"corpus/{path.stem}:step {i}:{item['fn']} {item['run']}", "fn": item["fn"],
                                "input": item["input"]})
    return out


def _snapshots_at(records: dict[str, dict[str, Record]], clock: int) -> Iterator[Record]:
    plans = {a["plan"]["runId"]: a["plan"] for a in records["admissions"].values()}
    for run in sorted(records["runs"].values(), key=lambda r: r["id"]):
        steps = sorted((s for s in records["stepRuns"].values() if s["runId"] == run["id"]), key=lambda s: s["id"])
        if run["id"] in plans:
            yield {"fn": "frontier", "run": run["id"],
                   "input": {"plan": plans[run["id"]], "run": run, "stepRuns": steps, "observedAtMs": clock}}
        if run["status"] == "running" and "cancelRequestedAtMs" in run:
            active = []
            for a in sorted(records["attempts"].values(), key=lambda a: a["id"]):
                if a["runId"] == run["id"] and a["status"] in ("claimed", "starting", "running"):
                    lease = records["leases"].get(json.dumps([a["id"]]))
                    receipt = records["taskReceipts"].get(json.dumps([a["id"]]))
                    active.append({"admission": receipt, "attempt": a,
                                   "leaseStatus": lease["status"] if lease else None})
            yield {"fn": "cancel", "run": run["id"],
                   "input": {"run": run, "stepRuns": steps, "activeTaskAttempts": active, "observedAtMs": clock}}


def corpus_dir(root: Path) -> Path:
    """A tree's corpus folder: `traces/corpus` of its conformance package, or `corpus` in trees from before the
    rooms of issue 34 (so `qlwf diff --base` still reaches back past the move)."""
    text = (root / "pyproject.toml").read_text("utf-8") if (root / "pyproject.toml").is_file() else ""
    conformance = "conformance"
    if text:
        conformance = tomllib.loads(text).get("tool", {}).get("setuptools", {}).get("package-dir", {}).get(
            "qlwf.conformance", conformance)
    current = root / conformance / "traces" / "corpus"
    return current if current.is_dir() else root / conformance / "corpus"


def oracle_inputs(root: Path) -> list[Record]:
    return example_inputs(root / "examples") + corpus_inputs(corpus_dir(root))


def corpus_traces(root: Path) -> list[Record]:
    """The golden corpus traces' inputs (recorded expectations stripped), by file name."""
    out = []
    for path in sorted(corpus_dir(root).glob("*.json")):
        t = json.loads(path.read_text("utf-8"))
        steps = [{k: v for k, v in s.items() if k not in EXPECTATION_KEYS} for s in t["steps"]]
        out.append({"name": path.stem, "initialClock": t["initialClock"], "steps": steps,
                    "file": str(path)})
    return out
