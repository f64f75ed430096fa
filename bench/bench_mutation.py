"""Mutation score of impl/ with a real mutation tool (Cosmic Ray) against the behavioural selection.

Cosmic Ray edits each mutant into the source file, runs a test command, and restores the file. So
that a killed or crashed run can never leave a mutant in this tree, the job works on a copy: the
tracked and untracked-but-not-ignored files are copied to WORKDIR, which gets its own venv (the
project with its dev extras and cosmic-ray, editable, so the copy's files are the ones imported).
Each mutant is judged by bench/mutation/suite.py (corpus + generated traces in lockstep, invariants,
the CAS cases): exit 1 = killed. Not part of the default test run.

Run (a long job; it lowers its own priority like `nice -n 10`):
    python bench/bench_mutation.py [--paths impl/commands impl/sqlite] [--workdir DIR] [--sample F] [--resume]
    python bench/bench_mutation.py --backend postgres [--sample F]   # impl/postgres against the suite on
        PostgreSQL: one throwaway cluster for the whole job (QLWF_PG_DSN for every mutant's suite)
    python bench/bench_mutation.py --report-only --second-pass   # survivors against their files' wider tests
Writes WORKDIR/session.sqlite (Cosmic Ray's session), WORKDIR/summary.json (score per file, every
survivor with its diff) and prints the per-file table docs/benchmarks.md records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The PostgreSQL backend's conformance side (its factory and shared server) moved out of impl/postgres
# (conformance/backends/postgres.py) and is still mutated with it.
DEFAULT_PATHS = {"sqlite": ("impl/commands", "impl/sqlite"),
                 "postgres": ("impl/postgres", "conformance/backends/postgres.py")}
# Files no selection of this job reaches by design (they are exercised elsewhere): the process-boundary
# driver (tests/conformance/exec/test_exec_backend.py, the gate's exec check); the DSN check
# (tests/conformance/provision/test_pg_server.py, test_pg_signals.py, test_pg_security.py: the job brings its own
# server); the audit reader
# (tests/app/review/test_audit.py). The cluster manager (conformance/provision/) and the PostgreSQL driver
# (conformance/drivers/postgres.py) lie outside every path.
EXCLUDED = ("impl/sqlite/driver.py", "impl/postgres/dsn.py", "impl/postgres/readonly.py")
TIMEOUT_S = {"sqlite": 120.0, "postgres": 300.0}
# Cosmic Ray replaces each binary operator by every other one (11 mutants per `a | b`); one partner
# per operator keeps the question "is this operator checked?" at a tenth of the cost.
BINARY_PARTNERS = {"Add": "Sub", "Sub": "Add", "Mul": "Add", "Div": "Mul", "FloorDiv": "Mul", "Mod": "Mul",
                   "Pow": "Mul", "LShift": "RShift", "RShift": "LShift", "BitOr": "BitAnd", "BitAnd": "BitOr",
                   "BitXor": "BitOr"}


def copy_tree(workdir: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source, target = REPO / name, workdir / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def make_venv(workdir: Path) -> Path:
    python = workdir / ".venv" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(workdir / ".venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-qq", "--disable-pip-version-check", "-e",
                        f"{workdir}[dev,mutation]"], check=True)
    return python


def write_config(workdir: Path, python: Path, paths: list[str], traces: int, backend: str) -> Path:
    config = workdir / "mutation.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(paths)}\n"
        f"timeout = {TIMEOUT_S[backend]}\n"
        f"excluded-modules = {json.dumps([e for e in EXCLUDED if any(e.startswith(p) for p in paths)])}\n"
        f'test-command = "{python} bench/mutation/suite.py --backend {backend} --traces {traces}"\n'
        "\n[cosmic-ray.distributor]\nname = \"local\"\n", encoding="utf-8")
    return config


def select(workdir: Path, fraction: float, seed: int) -> tuple[int, int]:
    """Drop the redundant binary-operator partners, then keep a seeded sample of `fraction` of each
    file's mutants (at least 3 per file). Returns (mutants generated, mutants kept)."""
    import random
    import sqlite3

    conn = sqlite3.connect(workdir / "session.sqlite")
    with conn:
        rows = conn.execute("SELECT job_id, module_path, operator_name FROM mutation_specs ORDER BY job_id").fetchall()
        by_file: dict[str, list[str]] = {}
        for job, path, op in rows:
            name = op.removeprefix("core/")
            if name.startswith("ReplaceBinaryOperator_"):
                left, right = name.split("_")[1:3]
                if BINARY_PARTNERS.get(left) != right:
                    continue
            by_file.setdefault(path, []).append(job)
        rng = random.Random(seed)
        keep = {j for jobs in by_file.values() for j in rng.sample(sorted(jobs), min(len(jobs), max(3, round(
            fraction * len(jobs)))))}
        drop = [(j,) for j, _, _ in rows if j not in keep]
        conn.executemany("DELETE FROM mutation_specs WHERE job_id = ?", drop)
        conn.executemany("DELETE FROM work_items WHERE job_id = ?", drop)
    conn.close()
    return len(rows), len(keep)


def summarize(python: Path, workdir: Path) -> dict[str, Any]:
    """Per file: mutants, killed, survived, incompetent, timeouts; every survivor's diff (read in the copy's venv)."""
    script = r"""
import json, sys
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome
files, survivors = {}, []
with use_db(sys.argv[1], WorkDB.Mode.open) as db:
    for item, result in db.completed_work_items:
        path = str(item.mutations[0].module_path)
        row = files.setdefault(path, {"mutants": 0, "killed": 0, "survived": 0, "incompetent": 0, "timeout": 0})
        row["mutants"] += 1
        if result.worker_outcome == WorkerOutcome.ABNORMAL:
            row["timeout"] += 1
        elif result.test_outcome == TestOutcome.KILLED:
            row["killed"] += 1
        elif result.test_outcome == TestOutcome.SURVIVED:
            row["survived"] += 1
            m = item.mutations[0]
            survivors.append({"job": item.job_id, "file": path, "line": m.start_pos[0], "operator": m.operator_name,
                              "occurrence": m.occurrence, "diff": result.diff})
        else:
            row["incompetent"] += 1
    pending = db.num_work_items - db.num_results
print(json.dumps({"files": files, "survivors": survivors, "pending": pending}))
"""
    out = subprocess.run([str(python), "-c", script, str(workdir / "session.sqlite")], check=True,
                         capture_output=True, text=True).stdout
    summary: dict[str, Any] = json.loads(out)
    return summary


# Second pass: each survivor of the selection re-run against the wider tests of its file (those tests
# are behavioural too; they are left out of the per-mutant selection only for its cost).
WIDER_TESTS = {
    "impl/sqlite/migrations.py": ["tests/impl/test_sqlite_schema.py"],
    "impl/sqlite/memory.py": ["tests/impl/test_sqlite_schema.py", "tests/impl/test_sqlite_adapter.py"],
    "impl/sqlite/readonly.py": ["tests/app/review/test_audit.py"],
    "impl/sqlite/drift_injection.py": ["tests/conformance/lockstep/test_conformance.py",
                                       "tests/impl/test_sqlite_adapter.py"],
    "impl/commands/drift_patch.py": ["tests/conformance/lockstep/test_conformance.py",
                                     "tests/impl/test_sqlite_adapter.py"],
    "conformance/backends/postgres.py": ["tests/conformance/concurrency/test_pg_concurrency.py",
                                         "tests/conformance/backends/test_backends.py"],
    "impl/postgres/failures.py": ["tests/impl/test_pg_adapter.py", "tests/conformance/faults/test_pg_outage.py"],
    "impl/postgres/database.py": ["tests/impl/test_pg_adapter.py", "tests/conformance/faults/test_pg_outage.py"],
}
# 500 traces: the selection has some
SLOW_BATCH = "tests/conformance/lockstep/test_conformance.py::test_generated_batch_passes_on_sqlite"
DEFAULT_WIDER = {"sqlite": ["tests/impl/test_sqlite_adapter.py", "tests/impl/test_cas_guards.py",
                            "tests/conformance/lockstep/test_conformance.py", "tests/impl/test_sqlite_mirror_drift.py"],
                 "postgres": ["tests/impl/test_pg_adapter.py", "tests/impl/test_cas_guards.py",
                              "tests/impl/test_pg_schema.py"]}
MARKERS = {"sqlite": "not postgres", "postgres": "postgres"}


def annotation_only(survivor: dict[str, Any], workdir: Path) -> bool:
    """A mutant inside a type annotation of a module with postponed evaluation (PEP 563): never
    evaluated at run time, so no test can kill it. Judged from the diff's changed lines."""
    changed = [ln[1:] for ln in survivor["diff"].splitlines() if ln.startswith(("-", "+"))
               and not ln.startswith(("---", "+++"))]
    source = (workdir / survivor["file"]).read_text(encoding="utf-8")
    return (survivor["operator"].endswith("ReplaceBinaryOperator_BitOr_BitAnd")
            and "from __future__ import annotations" in source
            and all(ln.lstrip().startswith("def ") or re.match(r"^\s*[\w.]+\s*:\s*[^=]*$", ln) for ln in changed))


def second_pass(python: Path, workdir: Path, summary: dict[str, Any], backend: str, env: dict[str, str]) -> None:
    """Apply each survivor again (Cosmic Ray's `apply`), run its file's wider tests, restore the file.
    Mutants of type annotations are marked so, not run (see annotation_only)."""
    for s in summary["survivors"]:
        if "wider" in s:
            continue
        if annotation_only(s, workdir):
            s["wider"] = {"tests": [], "killed": False, "failed": [], "annotation": True}
            continue
        path = workdir / s["file"]
        original = path.read_bytes()
        try:
            subprocess.run([str(python), "-m", "cosmic_ray.cli", "apply", s["file"], s["operator"],
                            str(s["occurrence"])], cwd=workdir, check=True, capture_output=True)
            tests = WIDER_TESTS.get(s["file"], DEFAULT_WIDER[backend])
            pytest = [str(python), "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-m",
                      MARKERS[backend], *tests, "--deselect", SLOW_BATCH]
            run = subprocess.run(pytest, cwd=workdir, capture_output=True, text=True, timeout=600, env=env)
            s["wider"] = {"tests": tests, "killed": run.returncode != 0,
                          "failed": [ln for ln in run.stdout.splitlines() if ln.startswith("FAILED")][:3]}
        except subprocess.TimeoutExpired:
            s["wider"] = {"tests": tests, "killed": True, "failed": ["timeout"]}
        finally:
            path.write_bytes(original)
        print(f"{s['file']}:{s['line']} {s['operator']}: {'killed' if s['wider']['killed'] else 'survived'} "
              "by the wider tests", file=sys.stderr, flush=True)


def render(summary: dict[str, Any]) -> str:
    lines = ["| file | mutants | killed | timeout | survived | incompetent | score |", "|---|---|---|---|---|---|---|"]
    total = {"mutants": 0, "killed": 0, "survived": 0, "incompetent": 0, "timeout": 0}
    for path, row in sorted(summary["files"].items()):
        for k in total:
            total[k] += row[k]
        lines.append(_row(path, row))
    lines.append(_row("**all**", total))
    if summary["pending"]:
        lines.append(f"\n{summary['pending']} mutants not run yet (resume with --resume)")
    return "\n".join(lines)


def _row(name: str, r: dict[str, int]) -> str:
    judged = r["killed"] + r["timeout"] + r["survived"]
    score = f"{100 * (r['killed'] + r['timeout']) / judged:.1f} %" if judged else "n/a"
    return (f"| {name} | {r['mutants']} | {r['killed']} | {r['timeout']} | {r['survived']} | {r['incompetent']} "
            f"| {score} |")


@contextlib.contextmanager
def job_server(backend: str) -> Iterator[dict[str, str]]:
    """The environment of every mutant's suite: on PostgreSQL, one throwaway cluster for the whole job
    (a fresh database per trace), unless QLWF_PG_DSN already names a server."""
    env = dict(os.environ)
    if backend != "postgres" or env.get("QLWF_PG_DSN"):
        yield env
        return
    sys.path.insert(0, str(REPO))
    from qlwf.conformance.provision import ThrowawayCluster

    with ThrowawayCluster() as cluster:
        yield env | {"QLWF_PG_DSN": cluster.dsn()}


def run_session(python: Path, workdir: Path, config: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    cosmic = [str(python), "-m", "cosmic_ray.cli"]
    start = time.perf_counter()
    if not args.resume:
        subprocess.run([*cosmic, "init", str(config), "session.sqlite"], cwd=workdir, check=True)
        generated, kept = select(workdir, args.sample, args.seed)
        print(f"mutation run: {generated} mutants generated, {kept} selected (sample {args.sample}, seed "
              f"{args.seed})", file=sys.stderr, flush=True)
        subprocess.run([*cosmic, "baseline", str(config)], cwd=workdir, check=True, env=env)
    subprocess.run([*cosmic, "exec", str(config), "session.sqlite"], cwd=workdir, check=True, env=env)
    print(f"mutation run: {time.perf_counter() - start:.0f} s", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=tuple(DEFAULT_PATHS), default="sqlite",
                        help="the backend the suite judges each mutant on (default sqlite)")
    parser.add_argument("--paths", nargs="+", help="files or packages under impl/ (default: the backend's)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/qlwf-mutation"))
    parser.add_argument("--traces", type=int, default=12, help="generated traces per mutant (suite.py)")
    parser.add_argument("--sample", type=float, default=1.0, help="fraction of each file's mutants to run")
    parser.add_argument("--seed", type=int, default=20261201, help="seed of the sample")
    parser.add_argument("--resume", action="store_true", help="continue the session in WORKDIR")
    parser.add_argument("--report-only", action="store_true", help="summarize the session in WORKDIR and exit")
    parser.add_argument("--second-pass", action="store_true",
                        help="re-run each survivor against its file's wider tests (after the run)")
    args = parser.parse_args(argv)
    args.paths = args.paths or list(DEFAULT_PATHS[args.backend])
    os.nice(10)
    workdir: Path = args.workdir.resolve()
    python = workdir / ".venv" / "bin" / "python"
    if not args.report_only:
        if not args.resume:
            if workdir.exists():
                shutil.rmtree(workdir)
            workdir.mkdir(parents=True)
            copy_tree(workdir)
        python = make_venv(workdir)
        config = write_config(workdir, python, args.paths, args.traces, args.backend)
        with job_server(args.backend) as env:
            run_session(python, workdir, config, args, env)
    summary = summarize(python, workdir)
    if args.second_pass:
        with job_server(args.backend) as env:
            second_pass(python, workdir, summary, args.backend, env)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(render(summary))
    print(f"{len(summary['survivors'])} survivors: {workdir / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
