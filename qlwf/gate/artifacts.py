"""Every generated artifact of the repository, each with the generator that builds it.

`qlwf regenerate` writes them all; `stale()` compares them all with what a fresh build gives
(tests/app/gate/test_artifacts.py). A generator is pure: it returns file texts, so comparing and writing
are the same build. Not listed: docs/crash-points.md, a measured run on both backends (its own
test re-measures one row), and conformance/exec/schema/, written by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qlwf.gate.checks import EXPLORER_FULL_WORKFLOWS, EXPLORER_QUICK_K, EXPLORER_QUICK_WORKFLOWS, load_script

Texts = dict[str, str]  # repository-relative path -> file text
EXPLORER_MANIFEST = "conformance/checkers/explore_manifest.json"
EXPLORER_MAX_STEPS = 4
EXPLORER_SELECTED = (5,)  # larger K explored for chosen families only (explore.SELECTED: chains and diamonds)
EXPLORER_TESTED_STEPS = 3  # the test suite explores K <= 3; the larger shapes are checked by the full gate profile
EXPLORER_ABOUT = (
    "Expected counts of the exhaustive explorer (conformance/checkers/explore/, `qlwf explore`): per DAG shape, "
    f"in total for every shape of K = 1..{EXPLORER_MAX_STEPS} steps (totals), and for the chosen families of K = "
    f"{', '.join(map(str, EXPLORER_SELECTED))} (selected). tests/conformance/checkers/test_explore.py and "
    f"tests/app/gate/test_artifacts.py fail "
    f"when a count of K <= {EXPLORER_TESTED_STEPS} changes, the gate's explorer check (`qlwf check`: K = "
    f"{EXPLORER_QUICK_K} quick; K = {EXPLORER_MAX_STEPS} and the selected families full) when one of its counts "
    "changes; after an intended change of the model or of the abstraction, run `qlwf regenerate` and review the "
    "difference. Under workflows: the multi-workflow scopes (W Runs of one shape side by side, searched up to "
    "permutations of the Runs: docs/explorer-reduction.md); the gate explores "
    f"{', '.join(EXPLORER_QUICK_WORKFLOWS)} quick and {', '.join(EXPLORER_FULL_WORKFLOWS)} full, the nightly job "
    "all of them. Under full: every shape of K = 1..3 with the full alphabet (`qlwf explore --full`), which the "
    "nightly job explores with --pinned; `qlwf regenerate` keeps that section as it is, and `qlwf explore --full "
    "--pin` measures it again, as the nightly job runs it (--max-steps 2; the five 3-step shapes with an edge; "
    "then --shape '3:-' alone, split across the cores: half an hour on two).")
PINNED_FULL = "full"  # the manifest's section of the full-alphabet counts


@dataclass(frozen=True)
class Artifact:
    name: str
    about: str
    build: Callable[[Path], Texts]
    owns: Callable[[Path], list[str]]  # the files of this artifact now in the tree (to find ones no longer built)


def _docs(root: Path) -> Texts:
    generate = load_script(root / "docs" / "generate.py", "qlwf_docs_generate")
    return {f"docs/{name}": render() for name, render in generate.OUTPUTS.items()}


def _examples(root: Path) -> Texts:
    generate = load_script(root / "examples" / "generate.py", "qlwf_examples_generate")
    return {f"examples/{name}": generate.render(name, content) for name, content in generate.build().items()}


def _corpus(_root: Path) -> Texts:
    from qlwf.conformance.traces import corpus_build as build_corpus

    return {f"conformance/traces/corpus/{name}": text for name, text in build_corpus.build().items()}


def explorer_manifest_text(report: Any, pinned: dict[str, Any] | None = None,
                           full: dict[str, Any] | None = None) -> str:
    """The manifest file for an exploration of every shape up to EXPLORER_MAX_STEPS steps and the
    selected families beyond. A smaller report (the test suite's K <= 3) is completed with the larger
    shapes' counts from `pinned` (the manifest in the tree): its own shapes and every total are still
    rebuilt, so a changed count of K <= report.max_steps shows in every total it enters. `full`, the
    full-alphabet section, is written as given, by default as `pinned` has it (`qlwf explore --full
    --pin` measures it)."""
    if full is None and pinned is not None:
        full = pinned.get(PINNED_FULL)
    from qlwf.conformance.checkers.explore import WORKFLOW_SCOPES, counts_of_shapes, manifest_counts, shape_size

    explored = manifest_counts(report)
    shapes, workflows = explored["shapes"], explored.get("workflows", {})
    if pinned is not None:
        shapes |= {name: c for name, c in pinned.get("shapes", {}).items()
                   if name not in shapes and shape_size(name) > report.max_steps}
        workflows = pinned.get("workflows", {}) | workflows
    counts = counts_of_shapes(shapes, EXPLORER_MAX_STEPS if pinned is not None else report.max_steps,
                              {name: workflows[name] for name in WORKFLOW_SCOPES if name in workflows})
    return json.dumps({"about": EXPLORER_ABOUT, **counts, **({PINNED_FULL: full} if full else {})},
                      indent=2) + "\n"


def pinned_manifest(root: Path) -> dict[str, Any]:
    """The explorer manifest in the tree at `root` (empty if there is none)."""
    path = root / EXPLORER_MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def pin_full(root: Path, report: Any) -> Path:
    """Write the full-alphabet counts of `report`'s shapes into the manifest at `root` (the other
    shapes of its full section, and every other section, stay as they are)."""
    from qlwf.conformance.checkers.explore import COUNT_KEYS

    manifest = pinned_manifest(root)
    full = dict(manifest.get(PINNED_FULL, {}))
    full |= {r.shape: {k: getattr(r, k) for k in COUNT_KEYS} for r in report.shapes}
    manifest[PINNED_FULL] = {name: full[name] for name in sorted(full, key=lambda n: (int(n.split(":")[0]), n))}
    path = root / EXPLORER_MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def _explorer(root: Path, report: Any = None) -> Texts:
    import os

    from qlwf.conformance.checkers.explore import WORKFLOW_SCOPES, Config, explore, scope_shapes

    if report is None:
        report = explore(Config(max_steps=EXPLORER_MAX_STEPS, shapes=scope_shapes(EXPLORER_MAX_STEPS,
                                                                                  EXPLORER_SELECTED),
                                workflow_scopes=WORKFLOW_SCOPES), jobs=min(4, os.cpu_count() or 1))
    if report.findings:
        first = report.findings[0]
        raise RuntimeError(f"the explorer found {len(report.findings)} violation(s) (first: {first.shape} "
                           f"{first.kind}: {first.message}); no manifest is written for a failing model")
    tree = pinned_manifest(root)
    pinned = tree if report.max_steps < EXPLORER_MAX_STEPS else None
    return {EXPLORER_MANIFEST: explorer_manifest_text(report, pinned, tree.get(PINNED_FULL))}


def _glob(pattern: str) -> Callable[[Path], list[str]]:
    return lambda root: sorted(p.relative_to(root).as_posix() for p in root.glob(pattern))


ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("docs", "docs/tables.md, docs/matrix.md and docs/benchmarks.md (docs/generate.py)", _docs,
             lambda root: ["docs/tables.md", "docs/matrix.md", "docs/benchmarks.md"]),
    Artifact("examples", "the oracle snapshots of examples/ (examples/generate.py)", _examples,
             _glob("examples/*.json*")),
    Artifact("corpus", "the golden conformance traces (conformance/traces/corpus_build.py)", _corpus,
             _glob("conformance/traces/corpus/*.json")),
    Artifact("explorer", f"the explorer's counts manifest, K = 1..{EXPLORER_MAX_STEPS} and the selected families "
                         f"of K = {', '.join(map(str, EXPLORER_SELECTED))} ({EXPLORER_MANIFEST})",
             _explorer, lambda root: [EXPLORER_MANIFEST]),
)
NAMES = tuple(a.name for a in ARTIFACTS)


def source_root() -> Path:
    """The checkout this qlwf runs from (generators and artifacts are files of the source tree)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "docs" / "generate.py").is_file():
        raise FileNotFoundError(f"{root} is not a qlwf source checkout (no docs/generate.py): "
                                "regenerate runs from a checkout")
    return root


def build(root: Path, names: tuple[str, ...] = NAMES, *, explorer_report: Any = None) -> dict[str, Texts]:
    """artifact name -> its freshly built files."""
    out: dict[str, Texts] = {}
    for a in ARTIFACTS:
        if a.name in names:
            out[a.name] = _explorer(root, explorer_report) if a.name == "explorer" else a.build(root)
    return out


def stale(root: Path, built: dict[str, Texts]) -> list[str]:
    """Files that differ from the fresh build, are missing, or belong to an artifact that no longer builds them."""
    by_name = {a.name: a for a in ARTIFACTS}
    out = []
    for name, texts in built.items():
        for path, text in texts.items():
            f = root / path
            if not f.is_file() or f.read_text(encoding="utf-8") != text:
                out.append(path)
        out += [p for p in by_name[name].owns(root) if p not in texts]
    return sorted(out)


def write(root: Path, built: dict[str, Texts]) -> list[str]:
    """Write every built file, remove the files an artifact no longer builds; the paths changed."""
    changed = stale(root, built)
    by_name = {a.name: a for a in ARTIFACTS}
    for name, texts in built.items():
        for path, text in texts.items():
            f = root / path
            if not f.is_file() or f.read_text(encoding="utf-8") != text:
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(text, encoding="utf-8")
        for extra in by_name[name].owns(root):
            if extra not in texts:
                (root / extra).unlink()
    return changed
