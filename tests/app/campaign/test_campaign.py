"""`qlwf campaign` (issue 15): seeded shards, the same findings on 1 worker, 2 workers and a Dask cluster,
a planted fault found, stopped on and written as a trace that replays to the same failure."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from qlwf.conformance.mutants.manifest import by_name
from qlwf.conformance.traces.format import from_json, load

from qlwf.campaign.executors import ClusterUnavailable, DaskExecutor, PoolExecutor, run_shard_of
from qlwf.campaign.run import (
    LOCK_NAME,
    CampaignConfig,
    Legs,
    UnusableOutput,
    campaign,
    drive,
    owned,
    report,
    summarize,
)
from qlwf.campaign.shards import (
    KINDS,
    Budget,
    Finding,
    Shard,
    ShardResult,
    derived_seed,
    explorer,
    explorer_shapes,
    plan,
    run_shard,
)

REPO = Path(__file__).resolve().parents[3]
TINY = Budget(stateful_examples=2, sqlite_traces=2, postgres_traces=1, oracle_lines=200, explore_max_steps=1,
              explore_max_depth=4)
# An SQLite storage mutant (attempt numbers restart per StepRun): the model is right, the backend diverges.
STORAGE_FAULT = "task-attempt-number-restarts"
PLANTED_KINDS = ("stateful", "conform-sqlite", "oracle")  # its first failing shard is #1, not #0


def without_timing(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "timing"}


def cross_process(diffs: list[str], summary: dict[str, Any]) -> list[str]:
    """The differences between two runs of one campaign in different processes: none may remain (a
    stateful shard's settings descend from Hypothesis's defaults, not from this session's profile)."""
    return diffs


def differences(a: Any, b: Any, at: str = "") -> list[str]:
    """Where two summaries differ, path by path (an assertion message that survives pytest's truncation)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"]


# ---- the shard plan ---------------------------------------------------------------------------------
def test_shards_follow_from_the_seed_alone() -> None:
    dag_shapes = explorer().dag_shapes
    first = list(itertools.islice(plan(11, KINDS, TINY), 12))
    assert first == list(itertools.islice(plan(11, KINDS, TINY), 12))
    assert [s.seeds for s in first if s.seeds] != [s.seeds for s in itertools.islice(plan(12, KINDS, TINY), 12)
                                                   if s.seeds]
    assert [s.index for s in first] == list(range(12))
    # round robin until the explorer's shapes (1 step: one shape) run out
    assert [s.kind for s in first[:5]] == list(KINDS)
    assert [s.kind for s in first[5:9]] == [k for k in KINDS if k != "explore"]
    assert [s.shape for s in first if s.kind == "explore"] == dag_shapes(1)
    sqlite = [s for s in first if s.kind == "conform-sqlite"]
    assert [len(s.seeds) for s in sqlite] == [TINY.sqlite_traces] * len(sqlite)
    assert sqlite[1].seeds == (derived_seed(11, "conform-sqlite", 1, 0), derived_seed(11, "conform-sqlite", 1, 1))
    assert len({seed for s in first for seed in s.seeds}) == sum(len(s.seeds) for s in first)  # no seed twice


# ---- the campaign loop, with completion orders no real executor guarantees ---------------------------
class ScriptedExecutor:
    """Completes its in-flight shards newest first (the order a fast later shard would produce), or all of
    them at once."""

    def __init__(self, workers: int, failing: set[int], at_once: bool = False) -> None:
        self.workers = workers
        self.at_once = at_once
        self.where = f"scripted x{workers}"
        self.failing = failing
        self.started: list[int] = []
        self.cancelled: list[int] = []

    def submit(self, shard: Shard) -> Shard:
        self.started.append(shard.index)
        return shard

    def wait_any(self, handles: Iterable[Shard], timeout: float) -> set[Shard]:
        return set(handles) if self.at_once else {max(handles, key=lambda s: s.index)}

    def result(self, shard: Shard) -> ShardResult:
        r = ShardResult(shard.index, shard.name, shard.kind, shard.seeds, examples=1, steps=shard.index + 1)
        if shard.index in self.failing:
            r.findings.append(Finding(shard.name, shard.kind, f"planted at {shard.index}",
                                      f"{shard.kind}-{shard.number}.json", "{}", "qlwf replay TRACE --backend model"))
        return r

    def cancel(self, handles: Iterable[Shard]) -> None:
        self.cancelled += [s.index for s in handles]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("failing", [set(), {5}, {4, 5}, {3, 9}])
def test_the_first_failing_shard_in_order_whatever_the_completion_order(failing: set[int], tmp_path: Path) -> None:
    cfg = CampaignConfig(minutes=1, seed=3, out=tmp_path, kinds=("stateful", "oracle"), budget=TINY, max_shards=8)
    legs = Legs(cfg.kinds, {})
    summaries = []
    for workers, at_once in ((1, False), (2, False), (4, False), (4, True)):
        executor = ScriptedExecutor(workers, failing, at_once)
        outcome = drive(cfg, legs, executor)
        summaries.append(without_timing(summarize(cfg, legs, outcome, executor.where, workers)))
        if failing:
            assert outcome.stopped == "counterexample" and outcome.first_failing == min(failing)
            assert max(executor.started) <= min(failing) + workers - 1  # nothing submitted past the stop
        else:
            assert outcome.stopped == "max-shards" and executor.started == list(range(8))
    assert not [d for other in summaries[1:] for d in differences(other, summaries[0])]
    s = summaries[0]
    assert s["verdict"] == ("failed" if failing else "passed")
    assert s["shards"]["run"] == (min(failing) + 1 if failing else 8)
    assert [f["shard"] for f in s["findings"]] == [s["shards"]["list"][-1]["name"]] * bool(failing)


def test_at_the_deadline_running_shards_are_cancelled_and_nothing_ran_is_unknown(tmp_path: Path) -> None:
    cfg = CampaignConfig(minutes=1, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY)
    legs = Legs(cfg.kinds, {})
    ticks = iter([0.0] * 4)  # start, two submissions, the wait's timeout; then past the deadline

    class Stuck(ScriptedExecutor):
        def wait_any(self, handles: Iterable[Shard], timeout: float) -> set[Shard]:
            return set()

    executor = Stuck(2, set())
    outcome = drive(cfg, legs, executor, clock=lambda: next(ticks, 61.0))
    assert executor.started == [0, 1] and executor.cancelled == [0, 1]
    assert outcome.stopped == "deadline" and outcome.cancelled == 2 and not outcome.results
    summary = summarize(cfg, legs, outcome, executor.where, 2)
    assert summary["verdict"] == "unknown" and "no shard completed" in summary["reasons"]


def test_a_skipped_leg_makes_the_verdict_unknown(tmp_path: Path) -> None:
    cfg = CampaignConfig(minutes=1, seed=3, out=tmp_path, kinds=("oracle", "conform-postgres"), budget=TINY,
                         max_shards=2)
    legs = Legs(("oracle",), {"conform-postgres": "PostgreSQL unavailable: no binaries"})
    executor = ScriptedExecutor(2, set())
    summary = summarize(cfg, legs, drive(cfg, legs, executor), executor.where, 2)
    assert summary["verdict"] == "unknown"
    assert summary["kinds"]["conform-postgres"]["status"] == "skipped"
    assert summary["kinds"]["oracle"]["shards"] == 2
    assert summary["kinds"]["explore"]["status"] == "not selected"


# ---- the output directory: this campaign's results or nothing (decisions Q-125) -------------------------
def scripted_campaign(out: Path, failing: set[int]) -> dict[str, Any]:
    cfg = CampaignConfig(minutes=1, seed=3, out=out, kinds=("stateful", "oracle"), budget=TINY, max_shards=8)
    with contextlib.redirect_stderr(io.StringIO()):
        _, summary = campaign(cfg, lambda: ScriptedExecutor(2, failing), out=io.StringIO(), live=False)
    return summary


def test_a_rerun_into_the_same_directory_leaves_only_its_own_results(tmp_path: Path) -> None:
    first = scripted_campaign(tmp_path, {5})
    assert [f["trace"] for f in first["findings"]] == ["traces/oracle-2.json"]
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["oracle-2.json"]
    second = scripted_campaign(tmp_path, {2})
    assert [f["trace"] for f in second["findings"]] == ["traces/stateful-1.json"]
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["stateful-1.json"]
    passed = scripted_campaign(tmp_path, set())
    assert passed["verdict"] == "passed" and not (tmp_path / "traces").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME, "summary.json"]


def test_a_campaign_that_dies_leaves_no_earlier_verdict_behind(tmp_path: Path) -> None:
    scripted_campaign(tmp_path, {5})

    class Dying(ScriptedExecutor):
        def result(self, shard: Shard) -> ShardResult:
            raise RuntimeError("the executor broke")

    cfg = CampaignConfig(minutes=1, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY, max_shards=2)
    with pytest.raises(RuntimeError, match="the executor broke"):
        campaign(cfg, lambda: Dying(1, set()), out=io.StringIO(), live=False)
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_NAME]


@pytest.mark.parametrize("plant", ["traces/notes.txt", "traces/stateful-1.json/", "traces/keep/stateful-1.json",
                                   "summary.json/", "traces->elsewhere", "traces/stateful-1.json->elsewhere",
                                   "summary.json->elsewhere"])
def test_what_a_campaign_does_not_write_is_refused_before_any_work(plant: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from qlwf.cli.entry import main

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "stateful-1.json").write_text("{}")
    (out / "traces").mkdir(parents=True)
    (out / "traces" / "stateful-0.json").write_text("{}")  # a previous campaign's, which stays as well
    name, _, target = plant.partition("->")
    path = out / name.rstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if target:
        if path.is_dir():
            (path / "stateful-0.json").unlink()
            path.rmdir()
        path.symlink_to(tmp_path / target)
    elif name.endswith("/"):
        path.mkdir()
    else:
        path.write_text("mine")
    (out / LOCK_NAME).touch()
    before = sorted(str(p) for p in out.rglob("*"))
    made: list[str] = []

    def executor() -> ScriptedExecutor:
        made.append("executor")
        return ScriptedExecutor(1, set())

    cfg = CampaignConfig(minutes=1, seed=3, out=out, kinds=("oracle",), budget=TINY, max_shards=1)
    with pytest.raises(UnusableOutput, match="which a campaign does not write; choose another --out"):
        campaign(cfg, executor, out=io.StringIO(), live=False)
    assert made == [] and sorted(str(p) for p in out.rglob("*")) == before
    assert (elsewhere / "stateful-1.json").read_text() == "{}"
    code = main(["campaign", "--minutes", "1", "--kinds", "oracle", "--max-shards", "1", "--out", str(out)])
    err = capsys.readouterr().err
    stray = out.joinpath(*name.rstrip("/").split("/")[:2])  # the entry of out/ or out/traces/ that holds it
    assert code == 2 and f"qlwf campaign: {out} holds {stray}, which" in err, err
    assert sorted(str(p) for p in out.rglob("*")) == before


def test_a_second_campaign_on_the_same_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qlwf.cli.entry import main

    first = scripted_campaign(tmp_path, {5})
    with owned(tmp_path):  # a campaign running there now
        with pytest.raises(UnusableOutput, match=rf"another campaign \(pid {os.getpid()}\) is writing to"):
            scripted_campaign(tmp_path, set())
        code = main(["campaign", "--minutes", "1", "--kinds", "oracle", "--max-shards", "1", "--out", str(tmp_path)])
        assert code == 2 and "another campaign" in capsys.readouterr().err
        assert json.loads((tmp_path / "summary.json").read_text()) == first  # the first one's results untouched
    assert scripted_campaign(tmp_path, set())["verdict"] == "passed"  # once it has ended


def test_a_cluster_refused_at_the_start_leaves_the_previous_results(tmp_path: Path) -> None:
    first = scripted_campaign(tmp_path, {5})

    def unusable() -> ScriptedExecutor:
        raise ClusterUnavailable("no Dask scheduler answers at tcp://127.0.0.1:1")

    cfg = CampaignConfig(minutes=1, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY, max_shards=1)
    with pytest.raises(ClusterUnavailable):
        campaign(cfg, unusable, out=io.StringIO(), live=False)
    assert json.loads((tmp_path / "summary.json").read_text()) == first
    assert [p.name for p in (tmp_path / "traces").iterdir()] == ["oracle-2.json"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_lock_file_that_is_not_a_regular_file_is_not_used(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    if kind == "symlink":
        lock.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    with pytest.raises(UnusableOutput, match=r"campaign's lock|not a regular file"):
        scripted_campaign(out, set())
    assert target.read_text() == "precious" and not (out / "summary.json").exists()


# ---- real shards: the process pool and a Dask cluster --------------------------------------------------
def run_planted(out: Path, *where: str) -> dict[str, Any]:
    """The planted campaign through the CLI, in a fresh process (as a nightly job runs it): its pool forks
    from a process no earlier test has touched. TINY's budgets, spelled as options."""
    argv = ["campaign", "--minutes", "2", "--seed", "2026", "--kinds", ",".join(PLANTED_KINDS), "--max-shards", "6",
            "--plant", STORAGE_FAULT, "--stateful-examples", "2", "--traces-per-shard", "2", "--oracle-lines", "200",
            "--explore-max-steps", "1", "--explore-max-depth", "4", "--out", str(out), *where]
    done = subprocess.run([sys.executable, "-m", "qlwf.cli", *argv], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "CI": "true"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "COUNTEREXAMPLE" in done.stdout and "campaign: " in done.stderr  # the report and the progress
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return summary


@pytest.fixture(scope="module")
def planted_by_one_worker(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("one")
    return out, run_planted(out, "--workers", "1")


def test_a_planted_fault_is_found_stopped_on_and_replays(planted_by_one_worker: tuple[Path, dict[str, Any]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from qlwf.conformance.lockstep import runner

    out, summary = planted_by_one_worker
    assert summary["verdict"] == "failed" and summary["stopped"] == "counterexample"
    assert [s["name"] for s in summary["shards"]["list"]] == ["stateful#0", "conform-sqlite#0"]
    assert summary["kinds"]["oracle"]["status"] == "not reached"
    (finding,) = summary["findings"]
    assert finding["shard"] == "conform-sqlite#0" and "divergence on sqlite" in finding["message"]
    path = out / finding["trace"]
    assert json.loads((out / "summary.json").read_text()) == summary
    # `qlwf traces check` accepts it (the model's own expectations hold: the fault is in the storage) ...
    checked = subprocess.run([sys.executable, "-m", "qlwf.cli", "traces", "check", str(path)], capture_output=True,
                             text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # ... `qlwf replay` on the correct SQLite backend passes, and with the fault planted it fails again
    # at the same step, the same way.
    step = int(finding["message"].split(" at step ")[1].split()[0])
    assert runner.replay(path, "sqlite", as_json=True, out=io.StringIO()) == 0
    plant = by_name(STORAGE_FAULT).plant
    assert plant is not None
    plant(monkeypatch)
    summary_again = runner.run_traces("sqlite", [load(path)])
    (result,) = summary_again.results
    assert result.divergence is not None and result.divergence.step_index == step
    assert result.divergence.kind in finding["message"]


def test_two_workers_find_the_same_as_one(planted_by_one_worker: tuple[Path, dict[str, Any]],
                                          tmp_path: Path) -> None:
    out_one, one = planted_by_one_worker
    two = run_planted(tmp_path, "--workers", "2")
    assert not cross_process(differences(without_timing(two), without_timing(one)), one)
    assert two["timing"]["workers"] == 2
    for f in one["findings"]:
        assert (tmp_path / f["trace"]).read_bytes() == (out_one / f["trace"]).read_bytes()


DASK_MISSING = "dask[distributed] is not installed: pip install -e '.[cluster]' (qlwfw installs it)"


def needs_dask() -> None:
    """Skip the calling test without the optional `cluster` extra, saying so; under CI=true fail instead:
    CI installs the extra, and a skip there would hide the Dask path."""
    if os.environ.get("CI") == "true":
        try:
            import dask.distributed  # noqa: F401  (whether it imports)
        except ImportError:
            pytest.fail(DASK_MISSING)
    pytest.importorskip("dask.distributed", reason=DASK_MISSING)


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    needs_dask()
    with local_cluster(tmp_path_factory.mktemp("dask"), n_workers=2) as cluster:
        yield cluster.scheduler_address


@contextlib.contextmanager
def local_cluster(scratch: Path, n_workers: int, **config: Any) -> Iterator[Any]:
    """A LocalCluster of `n_workers` one-thread worker processes on the loopback interface.

    Its scratch space in `scratch`: Dask's default, /tmp/dask-scratch-space, would outlive the session (its
    lock files stay). Its scheduler's HTTP server (health and metrics routes, there even without a
    dashboard) on a free loopback port: by default it binds every interface at 8787, and when another
    process holds that port Dask moves elsewhere but leaks the socket it tried, which this suite's
    warnings-as-errors turns into an error of the test (decisions Q-106)."""
    import dask
    import dask.distributed as distributed

    with dask.config.set({"temporary-directory": str(scratch), **config}):
        cluster = distributed.LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1,
                                           host="127.0.0.1", dashboard_address=None,
                                           scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"})
        try:
            yield cluster
        finally:
            cluster.close()


def test_a_dask_cluster_runs_the_same_shards(dask_cluster: str, planted_by_one_worker: tuple[Path, dict[str, Any]],
                                             tmp_path: Path) -> None:
    out_one, one = planted_by_one_worker
    executor = DaskExecutor(dask_cluster)
    assert executor.workers == 2
    executor.close()
    on_dask = run_planted(tmp_path, "--scheduler", dask_cluster)
    assert not cross_process(differences(without_timing(on_dask), without_timing(one)), one)
    assert on_dask["timing"]["where"].startswith("the Dask cluster at tcp://127.0.0.1:")
    for f in one["findings"]:
        assert (tmp_path / f["trace"]).read_bytes() == (out_one / f["trace"]).read_bytes()


def test_a_passing_campaign_counts_every_kind(tmp_path: Path) -> None:
    """Every kind but PostgreSQL (tests/test_campaign_postgres.py) runs and the verdict rests on the counts."""
    kinds = tuple(k for k in KINDS if k != "conform-postgres")
    cfg = CampaignConfig(minutes=2, seed=7, out=tmp_path, kinds=kinds, budget=TINY, max_shards=4)
    code, summary = campaign(cfg, lambda: PoolExecutor(2), out=io.StringIO(), live=False)
    assert (code, summary["verdict"], summary["reasons"]) == (0, "passed", [])
    k = summary["kinds"]
    assert k["stateful"]["examples"] >= TINY.stateful_examples and k["stateful"]["steps"] > 0
    assert k["conform-sqlite"]["examples"] == TINY.sqlite_traces and k["conform-sqlite"]["steps"] > 0
    assert k["oracle"]["examples"] == TINY.oracle_lines
    assert k["explore"]["states"] > 0 and k["explore"]["transitions"] > k["explore"]["states"]
    assert k["conform-postgres"]["status"] == "not selected"
    assert not (tmp_path / "traces").exists()


def test_sigint_stops_the_pool_and_its_workers(tmp_path: Path) -> None:
    env = {**os.environ, "CI": "true"}  # plain progress lines
    proc = subprocess.Popen([sys.executable, "-m", "qlwf.cli", "campaign", "--minutes", "5", "--workers", "2",
                             "--kinds", "stateful", "--stateful-examples", "50", "--seed", "1", "--out",
                             str(tmp_path)], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stderr is not None
        proc.stderr.readline()  # the seed line: the pool starts next
        deadline = time.monotonic() + 30
        children: list[int] = []
        while time.monotonic() < deadline and len(children) < 2:
            children = _children(proc.pid)
            time.sleep(0.1)
        assert len(children) >= 2, "the pool's workers did not start"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "interrupted (SIGINT)" in err
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_the_cli_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from qlwf.cli.entry import main

    with pytest.raises(SystemExit) as bad:
        main(["campaign", "--minutes", "1", "--plant", "no-such-mutant"])
    assert bad.value.code == 2 and "no plantable manifest mutant" in capsys.readouterr().err
    # a deadline no shard can meet: nothing ran, so nothing passed
    assert main(["campaign", "--minutes", "0.00001", "--kinds", "oracle", "--seed", "1", "--out", str(tmp_path)]) == 3
    out = capsys.readouterr().out
    assert "qlwf campaign: UNKNOWN (no shard completed" in out
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == "unknown"


@pytest.mark.parametrize("minutes", ["nan", "inf", "-inf", "1e308", "0", "-1", "43201", "soon"])
def test_a_deadline_a_json_summary_cannot_carry_or_no_run_can_reach_is_bad_usage(
        minutes: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """NaN and infinity ran, and wrote `"minutes": NaN` into summary.json, which no strict JSON reader
    (this project's own included) accepts; NaN minutes also made the verdict unknown (exit 3)."""
    from qlwf.cli.entry import main

    with pytest.raises(SystemExit) as bad:
        main(["campaign", f"--minutes={minutes}", "--kinds", "oracle", "--max-shards", "1", "--out", str(tmp_path)])
    assert bad.value.code == 2 and "argument --minutes:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_scheduler_is_one_clear_error() -> None:
    needs_dask()  # without Dask the refusal is "needs dask.distributed", which this test is not about
    with pytest.raises(ClusterUnavailable, match=r"[Dd]ask scheduler .*tcp://127\.0\.0\.1:9"):
        DaskExecutor("tcp://127.0.0.1:9", timeout_s=1)


def test_a_malformed_scheduler_address_is_refused_before_a_client_exists() -> None:
    # Before Q-105: a ValueError traceback with exit 1 (the code of a counterexample), then a 20 s wait
    # while the half-built Client was collected.
    for address in ("not an address", "", "foo://127.0.0.1:8786", "tcp://127.0.0.1"):
        with pytest.raises(ClusterUnavailable, match="not a Dask scheduler address"):
            DaskExecutor(address, timeout_s=1)


def without_dask(root: Path) -> dict[str, str]:
    """An environment whose Python cannot import dask or distributed, as one without the `cluster` extra:
    packages of those names first on PYTHONPATH that raise ModuleNotFoundError, as a missing one does."""
    for name in ("dask", "distributed"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            "raise ModuleNotFoundError(f'No module named {__name__!r} (hidden by the test)', name=__name__)\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *os.environ.get("PYTHONPATH", "").split(
        os.pathsep)]).rstrip(os.pathsep)}


@pytest.mark.parametrize("dask", ["installed", "missing"])
def test_the_cli_says_a_malformed_scheduler_address_in_one_line(dask: str, tmp_path: Path) -> None:
    # Missing: "--scheduler needs dask.distributed" until issue 33, as if the address were fine.
    env = without_dask(tmp_path / "hidden") if dask == "missing" else None
    if dask == "installed":
        needs_dask()
    done = subprocess.run([sys.executable, "-m", "qlwf.cli", "campaign", "--minutes", "1", "--seed", "1", "--scheduler",
                           "not an address", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[1:] == [
        "qlwf campaign: not a Dask scheduler address: 'not an address': missing port number in address "
        "'not an address'"]
    assert not (tmp_path / "out").exists()


def test_without_dask_a_wellformed_address_says_what_to_install(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "qlwf.cli", "campaign", "--minutes", "1", "--seed", "1", "--scheduler",
                           "tcp://127.0.0.1:9", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=without_dask(tmp_path / "h"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[1:] == [
        "qlwf campaign: --scheduler needs dask.distributed: pip install 'qlwf[cluster]'"]


ADDRESSES = ("not an address", "", "foo://127.0.0.1:8786", "tcp://127.0.0.1", "tcp://127.0.0.1:8786",
             "127.0.0.1:8786", "localhost:8786", "tcp://", "tcp://:8786", "tcp://host:port", "tcp://host: 86",
             "tcp://host:8_786", "tcp://[::1]:8786", "tcp://[::1]", "tcp://[::1", "tcp://[::1]x", "tcp://::1:8786",
             "tls://h:1", "tls://h", "ws://h:1", "wss://h", "inproc://anything", "ucx://h", "ucx://h:1",
             "tcp://a://b:1", "TCP://h:1", "tcp://h:1:2", "[::1]:8786", ":8786", "h:")


def test_the_address_check_agrees_with_dasks_parser() -> None:
    """check_scheduler_address refuses, without importing Dask, exactly what Dask's own parser refuses,
    in its words."""
    needs_dask()
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    from qlwf.campaign.executors import check_scheduler_address

    for address in ADDRESSES:
        try:
            scheme, location = parse_address(address)
            get_backend(scheme)
            if scheme in ("tcp", "tls", "ws", "wss"):
                parse_host_port(location)
            dask_says = None
        except ValueError as e:
            dask_says = f"not a Dask scheduler address: {address!r}: {e}"
        try:
            check_scheduler_address(address)
            ours = None
        except ClusterUnavailable as e:
            ours = str(e)
        assert ours == dask_says, address


class Failing(ScriptedExecutor):
    """Shards in `errors` end with that error text (the same text for several: one cause)."""

    def __init__(self, workers: int, errors: dict[int, str]) -> None:
        super().__init__(workers, set())
        self.errors = errors

    def result(self, shard: Shard) -> ShardResult:
        r = super().result(shard)
        r.error = self.errors.get(shard.index)
        return r


def test_shards_failing_alike_are_one_reason(tmp_path: Path) -> None:
    cfg = CampaignConfig(minutes=1, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY, max_shards=6)
    legs = Legs(cfg.kinds, {})
    down = "OperationalError: connection refused"
    executor = Failing(2, {1: "ValueError: once", 2: down, 3: down, 5: down})
    summary = summarize(cfg, legs, drive(cfg, legs, executor), executor.where, 2)
    assert summary["verdict"] == "unknown"
    assert summary["reasons"] == ["oracle#1: ValueError: once", f"3 shards, oracle#2 … oracle#5: {down}"]
    assert [e["shard"] for e in summary["errors"]] == ["oracle#1", "oracle#2", "oracle#3", "oracle#5"]
    report(summary, tmp_path / "summary.json", out := io.StringIO())
    assert f"  ERROR 3 shards, oracle#2 … oracle#5: {down}" in out.getvalue().splitlines()


def test_a_pool_worker_killed_under_a_shard_loses_that_shard_not_the_campaign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's OOM killer or an operator's SIGKILL: before Q-105 the campaign ended in a WorkerDied
    traceback with exit 1 and wrote no summary."""
    import qlwf.campaign.executors as executors

    def killed_on_the_second(shard: Shard) -> ShardResult:
        if shard.index == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return run_shard(shard)

    monkeypatch.setattr(executors, "run_shard", killed_on_the_second)  # the pool's workers fork from here
    cfg = CampaignConfig(minutes=5, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY, max_shards=4)
    code, summary = campaign(cfg, lambda: PoolExecutor(2), out=io.StringIO())
    assert code == 3 and summary["verdict"] == "unknown" and summary["stopped"] == "max-shards"
    assert [s["name"] for s in summary["shards"]["list"]] == ["oracle#0", "oracle#1", "oracle#2", "oracle#3"]
    (lost,) = summary["errors"]
    assert lost["shard"] == "oracle#1"
    assert lost["error"].startswith("lost: WorkerDied: the worker (pid ") and "exit code -9" in lost["error"]
    assert [s["examples"] for s in summary["shards"]["list"]] == [200, 0, 200, 200]
    assert json.loads((tmp_path / "summary.json").read_text(encoding="utf-8")) == summary


@pytest.fixture
def fragile_dask_cluster(dask_cluster: str, tmp_path: Path) -> Iterator[Any]:
    """A cluster of one worker of its own, which this test may kill: no retries of a task whose worker dies.
    (Depends on dask_cluster only for its check that Dask is installed.)"""
    with local_cluster(tmp_path, n_workers=1, **{"distributed.scheduler.allowed-failures": 0}) as cluster:
        yield cluster


def test_dask_losing_a_worker_or_the_scheduler_loses_shards_not_the_campaign(
        fragile_dask_cluster: Any, tmp_path: Path) -> None:
    """Before Q-105 both ended the campaign in a traceback (KilledWorker, FutureCancelledError) with exit 1
    and no summary."""
    cluster = fragile_dask_cluster

    class Killing(DaskExecutor):
        """Shard 1's task kills its worker; shard 3's closes the cluster under the campaign."""

        def submit(self, shard: Shard) -> Any:
            if shard.index == 1:
                return self._client.submit(os._exit, 9, pure=False)
            if shard.index == 3:
                cluster.close()
            return super().submit(shard)

    cfg = CampaignConfig(minutes=5, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY, max_shards=6,
                         on_cluster=True)
    executor = Killing(cluster.scheduler_address)
    assert executor.workers == 1
    code, summary = campaign(cfg, lambda: executor, out=io.StringIO())
    assert code == 3 and summary["verdict"] == "unknown" and summary["stopped"] == "executor-lost"
    errors = {e["shard"]: e["error"] for e in summary["errors"]}
    assert errors["oracle#1"].startswith("lost: KilledWorker: ")
    assert errors["oracle#3"].startswith("lost: FutureCancelledError: ")  # no scheduler left to run it
    assert [s["name"] for s in summary["shards"]["list"]] == ["oracle#0", "oracle#1", "oracle#2", "oracle#3"]
    assert summary["shards"]["list"][0]["examples"] == summary["shards"]["list"][2]["examples"] == 200


# Worker start-up scripts (Dask's preload) that give a worker another qlwf than this checkout's.
NO_QLWF = """import sys
for name in [m for m in sys.modules if m == "qlwf" or m.startswith("qlwf.")]:
    del sys.modules[name]


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "qlwf" or name.startswith("qlwf."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, Refuse())
"""
OTHER_QLWF = """import qlwf.campaign.code_digest as source
source.code_digest = lambda: "0" * 64
"""


@pytest.mark.parametrize(("preload", "said"), [
    (NO_QLWF, "cannot run qlwf: Exception: ModuleNotFoundError(\"No module named 'qlwf"),
    (OTHER_QLWF, "run another qlwf than this checkout (source digest 000000000000, here "),
])
def test_dask_workers_without_this_checkouts_qlwf_are_refused_at_once(
        preload: str, said: str, dask_cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Decisions Q-120: a worker that cannot import qlwf never answered for its shards, so the campaign waited
    out its deadline and said only "no shard completed"; one with another qlwf answered for another model."""
    from qlwf.cli.entry import main

    script = tmp_path / "preload.py"
    script.write_text(preload, encoding="utf-8")
    with local_cluster(tmp_path / "scratch", n_workers=1, **{"distributed.worker.preload": [str(script)]}) as cluster:
        started = time.monotonic()
        code = main(["campaign", "--minutes", "5", "--scheduler", cluster.scheduler_address, "--kinds", "oracle",
                     "--seed", "1", "--out", str(tmp_path / "out")])
        assert time.monotonic() - started < 60, "refused at once, not at the deadline"
    assert code == 2
    assert said in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_shard_sent_to_a_worker_with_another_qlwf_is_lost(fragile_dask_cluster: Any, tmp_path: Path) -> None:
    """A worker that joins after the start is held to the campaign's source digest by each shard it runs."""

    class Stale(DaskExecutor):
        def submit(self, shard: Shard) -> Any:
            if shard.index == 1:  # as if shard 1 went to a worker with another qlwf
                return self._client.submit(run_shard_of, shard, "0" * 64, pure=False)
            return super().submit(shard)

    cfg = CampaignConfig(minutes=5, seed=3, out=tmp_path, kinds=("oracle",), budget=TINY, max_shards=3,
                         on_cluster=True)
    code, summary = campaign(cfg, lambda: Stale(fragile_dask_cluster.scheduler_address), out=io.StringIO())
    assert code == 3 and summary["verdict"] == "unknown"
    errors = {e["shard"]: e["error"] for e in summary["errors"]}
    assert list(errors) == ["oracle#1"]
    assert errors["oracle#1"].startswith("lost: OtherCode: this worker runs another qlwf (source digest ")
    assert errors["oracle#1"].endswith("the campaign's 000000000000): install the campaign's checkout on every worker")


@pytest.mark.postgres
def test_the_postgres_leg_on_the_pool_and_on_dask(pg_server: Any, dask_cluster: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Forked pool workers share the session's server; Dask workers reach it through QLWF_PG_DSN.
    Seed 19: its one PostgreSQL trace is a short random one (27 steps), so the test stays quick."""
    cfg = CampaignConfig(minutes=2, seed=19, out=tmp_path / "pool", kinds=("conform-postgres",), budget=TINY,
                         max_shards=1)
    code, pool = campaign(cfg, lambda: PoolExecutor(1), out=io.StringIO(), live=False)
    assert (code, pool["verdict"]) == (0, "passed"), pool
    assert pool["kinds"]["conform-postgres"]["examples"] == TINY.postgres_traces
    assert pool["kinds"]["conform-postgres"]["steps"] > 0
    on_dask = CampaignConfig(minutes=2, seed=19, out=tmp_path / "dask", kinds=("conform-postgres",), budget=TINY,
                             max_shards=1, on_cluster=True)
    monkeypatch.delenv("QLWF_PG_DSN", raising=False)
    code, skipped = campaign(on_dask, lambda: DaskExecutor(dask_cluster), out=io.StringIO(), live=False)
    assert (code, skipped["kinds"]["conform-postgres"]["status"]) == (3, "skipped")
    assert any("QLWF_PG_DSN" in r for r in skipped["reasons"])
    monkeypatch.setenv("QLWF_PG_DSN", pg_server.dsn())
    code, dask = campaign(on_dask, lambda: DaskExecutor(dask_cluster), out=io.StringIO(), live=False)
    assert code == 0 and not differences(without_timing(dask), without_timing(pool))
    assert pg_server.dsn().split("password=")[-1] not in json.dumps(dask)  # never in the summary


def test_explorer_shards_take_the_largest_size_from_a_seeded_offset() -> None:
    """Smaller sizes in order, then every shape of the largest size exactly once, rotated by the seed,
    so that campaigns ending within that size cover different parts of it."""
    dag_shapes = explorer().dag_shapes
    smaller, largest = dag_shapes(1) + dag_shapes(2), dag_shapes(3)
    firsts = set()
    for seed in range(12):
        shapes = explorer_shapes(seed, 3)
        assert shapes == explorer_shapes(seed, 3) and shapes[:len(smaller)] == smaller
        rest = shapes[len(smaller):]
        start = largest.index(rest[0])
        assert rest == largest[start:] + largest[:start]
        firsts.add(rest[0])
        assert [s.shape for s in plan(seed, ("explore",), Budget(explore_max_steps=3))] == shapes
    assert len(firsts) > 1
    assert explorer_shapes(7, 0) == []


def test_plans_end_when_nothing_is_left_to_run() -> None:
    dag_shapes = explorer().dag_shapes
    assert list(plan(1, (), TINY)) == []
    assert [s.kind for s in plan(1, ("explore",), TINY)] == ["explore"] * len(dag_shapes(1))


def test_the_shards_import_nothing_from_tests(tmp_path: Path) -> None:
    """The installed qlwf runs every kind of shard: the machine, the fuzzer and the harness are package code."""
    code = ("import sys, qlwf.cli.campaign, qlwf.campaign.shards as s\n"
            "import qlwf.conformance.stateful.machine, qlwf.conformance.checkers.oracle_fuzz\n"
            f"bad = [n for n, m in sys.modules.items() if (getattr(m, '__file__', None) or '').startswith("
            f"{str(REPO / 'tests')!r})]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_stateful_shard_reproduces_in_any_process() -> None:
    """The same stateful shard in this process (whose Hypothesis profile the test session loaded) and in
    a freshly forked pool worker: same examples and steps."""
    shard = next(plan(2026, ("stateful",), TINY))
    here = run_shard(shard)
    pool = PoolExecutor(1)
    try:
        there = pool.result(pool.submit(shard))
    finally:
        pool.close()
    assert (there.examples, there.steps) == (here.examples, here.steps)


def test_a_stateful_shard_does_not_depend_on_the_shards_its_process_ran_before() -> None:
    """Hypothesis draws constants from the checkout's modules the process has imported; before Q-113 the
    same stateful shard (#2 of seed 7) took 89, 84 or 79 steps after no shard, a SQLite shard or an
    oracle shard in its process."""
    kinds = ("stateful", "conform-sqlite", "oracle", "explore")
    program = ("import itertools, json, sys; from qlwf.campaign.shards import Budget, plan, run_shard; "
               f"shards = list(itertools.islice(plan(7, {kinds!r}, Budget(), None, None), 9)); "
               "results = [run_shard(shards[int(i)]) for i in sys.argv[1:]]; r = results[-1]; "
               "print(json.dumps([r.name, r.examples, r.steps, len(r.findings), r.error]))")
    first = list(itertools.islice(plan(7, kinds, Budget()), 9))
    assert [first[i].kind for i in (1, 2, 8)] == ["conform-sqlite", "oracle", "stateful"]
    seen = {}
    for history in (["8"], ["1", "8"], ["2", "8"]):
        done = subprocess.run([sys.executable, "-c", program, *history], capture_output=True, text=True,
                              timeout=300, check=True)
        seen[" then ".join(history)] = json.loads(done.stdout)
    assert len({json.dumps(v) for v in seen.values()}) == 1, seen


def test_sigterm_on_the_dask_path_cancels_the_campaigns_tasks_and_leaves_the_cluster_up(
        dask_cluster: str, tmp_path: Path) -> None:
    """The cluster is not the campaign's: on SIGTERM the client cancels what it submitted (nothing of
    it stays queued on the scheduler), exits 128 + 15 with one line, and the workers stay up."""
    from dask.distributed import Client

    def ours(dask_scheduler: Any = None) -> list[str]:
        return sorted(str(k) for k in dask_scheduler.tasks if str(k).startswith("qlwf-campaign-"))

    env = {**os.environ, "CI": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "qlwf.cli", "campaign", "--minutes", "5", "--scheduler",
                             dask_cluster, "--kinds", "stateful", "--stateful-examples", "20", "--seed", "3",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    with Client(dask_cluster, set_as_default=False, timeout=10) as observer:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not observer.run_on_scheduler(ours):
                time.sleep(0.1)
            assert observer.run_on_scheduler(ours), "the campaign submitted nothing to the cluster"
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "interrupted (SIGTERM)" in err
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and observer.run_on_scheduler(ours):
            time.sleep(0.1)
        assert observer.run_on_scheduler(ours) == []  # cancelled (a running shard ends in its worker, unheard)
        assert len(observer.scheduler_info()["workers"]) == 2


def test_a_stateful_shard_makes_no_scratch_directory_unless_it_finds_something(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard the campaign kills at its end (default SIGTERM: no finally runs) must leave nothing in the
    temporary directory: the counterexample's directory is made at the first counterexample only, and
    removed once the finding is read."""
    import tempfile

    from qlwf.conformance.stateful import machine
    from qlwf.model.system import Outcome, apply

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    shard = next(plan(2026, ("stateful",), TINY))
    clean = run_shard(shard)
    assert clean.examples > 0 and not clean.findings and made == []

    def crashing(state: Any, command: dict[str, Any]) -> Outcome:
        if command["name"] == "admit_workflow":  # the first step of every example: a quick shrink
            raise RuntimeError("planted crash")
        return apply(state, command)

    monkeypatch.setattr(machine, "apply", crashing)
    found = run_shard(shard)
    assert [f.message.split(":")[0] for f in found.findings] == ["admit_workflow crashed the model"]
    assert from_json(json.loads(found.findings[0].trace_text)).steps[0]["name"] == "admit_workflow"
    assert len(made) == 1 and not Path(made[0]).exists() and list(tmp_path.iterdir()) == []
