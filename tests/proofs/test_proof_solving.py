"""How `qlwf prove` solves (issue 36): the process pool, fresh BMC solvers, the split inductive step
and BMC-invariants beyond its lemma-free depth. Each test compares the fast path with the plain
one it replaced, at a bound small enough to run both."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import z3
from qlwf.proofs import bmc, parallel, properties, runner
from qlwf.proofs.invariants import INVARIANTS
from qlwf.proofs.moves import STEP_PROPERTIES
from qlwf.proofs.results import PROVED, UNKNOWN, VIOLATED, Result
from qlwf.proofs.transitions import COMMANDS

N = 2


def _fingerprint(results: list[Result]) -> list[tuple[str, str, int, str, int]]:
    """Everything of a result but its time (details carry no times)."""
    return [(r.name, r.result, r.bound, r.detail, r.queries) for r in results]


# ---- the pool ---------------------------------------------------------------------------------------
def _sleep_then_echo(item: tuple[int, float]) -> tuple[int, int]:
    value, pause = item
    time.sleep(pause)
    return value, os.getpid()


def test_ordered_map_returns_values_in_item_order_whoever_finishes_first() -> None:
    items = [(0, 0.6), (1, 0.0), (2, 0.3), (3, 0.0)]  # the first item finishes last
    got = parallel.ordered_map(_sleep_then_echo, items, jobs=2)
    assert [v for v, _ in got] == [0, 1, 2, 3]
    assert len({pid for _, pid in got}) == 4 and os.getpid() not in {pid for _, pid in got}  # a process per task
    assert [v for v, _ in parallel.ordered_map(_sleep_then_echo, items, jobs=1)] == [0, 1, 2, 3]


def _fail_on_two(item: int) -> int:
    if item == 2:
        raise ValueError("task two fails")
    time.sleep(0.2)
    return item


def test_a_failing_task_fails_the_map_and_leaves_no_process() -> None:
    with pytest.raises(parallel.WorkerFailed, match="task two fails"):
        parallel.ordered_map(_fail_on_two, [0, 1, 2, 3, 4], jobs=2)
    assert multiprocessing.active_children() == []


def _record_pid_and_hang(item: tuple[int, str]) -> int:
    _, folder = item
    Path(folder, str(os.getpid())).write_text("", encoding="utf-8")
    time.sleep(60)
    return 0


def test_an_interrupt_kills_and_reaps_every_worker(tmp_path: Path) -> None:
    def interrupt_once_both_run() -> None:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # to the main thread itself: a signal sent to the process may land on this thread, and the main
        # thread, blocked in its wait for a result, would then run the handler only when a task ends
        main = threading.main_thread().ident
        assert main is not None
        signal.pthread_kill(main, signal.SIGINT)

    # An interrupt as a terminal gives one, whatever an earlier test in this worker process left behind
    # (a SIGINT handler or a blocked SIGINT would keep the map from being interrupted at all).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    interrupter = threading.Thread(target=interrupt_once_both_run)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            parallel.ordered_map(_record_pid_and_hang, [(k, str(tmp_path)) for k in range(4)], jobs=2)
    finally:
        interrupter.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2  # two started, two never did
    for pid in pids:
        # killed and reaped: no longer a child of this process, not even a zombie. (Not os.kill(pid, 0): with
        # other tests forking beside this one, the pid may already belong to some other process.)
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    assert multiprocessing.active_children() == []


def _dies(item: int) -> int:
    if item == 1:
        os._exit(3)
    return item


def test_a_worker_that_dies_is_reported() -> None:
    with pytest.raises(parallel.WorkerFailed, match="exit code 3"):
        parallel.ordered_map(_dies, [0, 1, 2], jobs=2)


# ---- the runner on both cores -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def sequential() -> list[Result]:
    return runner.run(runner.Options(bound=N, depth=3, lemma_free_depth=1, jobs=1))


def test_two_jobs_give_the_results_of_one(sequential: list[Result]) -> None:
    parallel_results = runner.run(runner.Options(bound=N, depth=3, lemma_free_depth=1, jobs=2))
    assert [r.name for r in sequential] == list(runner.ALL_PROPERTIES)
    assert _fingerprint(parallel_results) == _fingerprint(sequential)
    assert all(r.result == PROVED for r in sequential)


def test_the_split_inductive_step_equals_the_sequential_proof(sequential: list[Result]) -> None:
    enc, sem, _ = runner.build(runner.Options(bound=N))
    names = {*properties.inductive_names(None), properties.VACUITY}
    assert _fingerprint(properties.prove_invariants(enc, sem)) == [f for f in _fingerprint(sequential)
                                                                   if f[0] in names]


def test_a_mutant_is_still_violated_on_two_jobs() -> None:
    results = runner.run(runner.Options(bound=N, depth=4, mutant="admission-ignores-intent", jobs=2,
                                        only=["INV-15", "BMC-invariants", "LIVE-*"]))
    verdicts = {r.name: r.result for r in results}
    assert verdicts == {"INV-15": VIOLATED, "BMC-invariants": VIOLATED, "LIVE-1-rank": PROVED,
                        "LIVE-1-bound": PROVED, "LIVE-1-no-regress": PROVED, "LIVE-1-quiesce": PROVED}
    inv15 = next(r for r in results if r.name == "INV-15")
    assert inv15.counterexample["trace"][0]["command"] == "admit_task_attempt"


# ---- the inductive step: incremental (relevancy off) against a fresh default solver per query ---------
def test_incremental_inductive_answers_equal_fresh_default_solvers() -> None:
    enc, sem, _ = runner.build(runner.Options(bound=1, mutant="admission-ignores-intent"))
    names = properties.inductive_names(None)
    hyp = properties.hypothesis(enc, sem)
    pre, inv = hyp
    for command in COMMANDS:
        got = {a.name: a.answer for a in properties.command_answers(enc, sem, command, names, hyp=hyp)}
        t = getattr(sem, command)(pre, "t")
        want = {properties.VACUITY: z3.Not(enc.equal(pre, t.post))}
        want |= {i.name: z3.Not(i.fn(sem, t.post)) for i in INVARIANTS}
        want |= {p.name: z3.Not(p.fn(sem, pre, t.post, command)) for p in STEP_PROPERTIES}
        for name, negated in want.items():
            s = z3.Solver()
            s.add(inv, t.guard, negated)
            assert got[name] == str(s.check()), (command, name)
    # the mutant breaks INV-15 by admission only
    assert {a.name for a in properties.command_answers(enc, sem, "admit_task_attempt", names, hyp=hyp)
            if a.answer == "sat"} >= {"INV-15"}


def test_all_inductive_needs_every_conjunct_unsat_in_every_batch() -> None:
    enc, sem, _ = runner.build(runner.Options(bound=1))
    names = [i.name for i in INVARIANTS]
    batches = [properties.init_answers(enc, sem, names)]
    batches += [properties.command_answers(enc, sem, c, names) for c in COMMANDS]
    assert properties.all_inductive(batches)
    assert not properties.all_inductive(batches[:-1])  # a command missing
    dropped = [batches[0], [a for a in batches[1] if a.name != "L-roots"], *batches[2:]]
    assert not properties.all_inductive(dropped)  # a lemma not answered for one command
    unknown = [batches[0], [properties.Answer(a.name, UNKNOWN if a.name == "INV-1" else a.answer, 0.0)
                            for a in batches[1]], *batches[2:]]
    assert not properties.all_inductive(unknown)


# ---- BMC: fresh solvers per query against the incremental unrolling they replaced ---------------------
def _incremental_first_violation(mutant: str | None, depth: int) -> int | None:
    enc, sem, _ = runner.build(runner.Options(bound=N, mutant=mutant))
    invs = [i for i in INVARIANTS if not i.lemma]
    s = z3.Solver()
    x = enc.fresh("r0")
    s.add(enc.init(x))
    for t in range(depth + 1):
        if t:
            y = enc.fresh(f"r{t}")
            s.add(sem.relation(x, y, f"r{t}")[0])
            x = y
        holds = z3.And([i.fn(sem, x) for i in invs])
        if s.check(z3.Not(holds)) == z3.sat:
            return t
        s.add(holds)
    return None


@pytest.mark.parametrize(("mutant", "violated"), [(None, False), ("admission-ignores-intent", True),
                                                 ("converge-leased-claim", False)])  # deeper than 3 at N=2
def test_fresh_bmc_finds_the_first_violation_of_the_incremental_one(mutant: str | None, violated: bool) -> None:
    enc, sem, _ = runner.build(runner.Options(bound=N, mutant=mutant))
    res = bmc.check_invariants(enc, sem, 3)
    first = _incremental_first_violation(mutant, 3)
    assert (res.result == VIOLATED) == (first is not None) == violated
    if first is not None:
        assert len(res.counterexample["trace"]) == first == res.queries - 1
        trace = {"dag": res.counterexample["dag"], "init": res.counterexample["trace"][0]["pre"],
                 "trace": res.counterexample["trace"]}
        assert runner.replay(enc, sem, trace)
    else:
        assert res.result == PROVED and res.queries == 4


def test_bmc_split_over_depths_equals_one_check() -> None:
    enc, sem, _ = runner.build(runner.Options(bound=N, mutant="admission-ignores-intent"))
    whole = bmc.check_invariants(enc, sem, 4)
    head, tail = bmc.check_invariants(enc, sem, 4, 0, 1), bmc.check_invariants(enc, sem, 4, 2)
    joined = bmc.join_invariants(head, tail)
    assert whole.result == VIOLATED and head.result == PROVED and head.queries == 2
    assert (joined.result, joined.queries, joined.bound) == (whole.result, whole.queries, whole.bound)
    assert len(joined.counterexample["trace"]) == len(whole.counterexample["trace"]) == whole.queries - 1


def test_cover_first_depths_equal_per_command_incremental_search() -> None:
    enc, sem, _ = runner.build(runner.Options(bound=1))
    res = bmc.check_cover(enc, sem, 6)
    s = z3.Solver()
    x = enc.fresh("c0")
    s.add(enc.init(x))
    want: dict[str, int] = {}
    for t in range(1, 6):
        y = enc.fresh(f"c{t}")
        rel, cmd, _ = sem.relation(x, y, f"c{t}")
        s.add(rel)
        for k, name in enumerate(COMMANDS):
            if name not in want and s.check(z3.Not(enc.equal(x, y)), cmd == k) == z3.sat:
                want[name] = t
        x = y
    assert res.result == PROVED and res.extra["firstDepth"] == dict(
        sorted(want.items(), key=lambda kv: (kv[1], COMMANDS.index(kv[0]))))


# ---- BMC-invariants beyond the lemma-free depth ------------------------------------------------------
def test_deeper_paths_are_proved_by_induction_when_everything_is_inductive(sequential: list[Result]) -> None:
    res = next(r for r in sequential if r.name == "BMC-invariants")
    assert res.result == PROVED and res.bound == 3 and res.queries == 2  # depths 0..1 lemma-free
    assert "lemma-free to depth 1, every depth by induction" in res.detail


@pytest.mark.parametrize("mutant", ["admission-ignores-intent", "ready-while-need-running", "converge-leased-claim",
                                    "skip-one-level"])
def test_beyond_the_lemma_free_depth_the_verdict_is_the_lemma_free_checks(mutant: str) -> None:
    """A mutant that breaks induction is checked lemma-free to the full depth; one that keeps every
    conjunct inductive at this bound (skip-one-level needs a chain of three) is proved by induction."""
    short = runner.run(runner.Options(bound=N, depth=3, mutant=mutant, lemma_free_depth=1, jobs=1,
                                      only=["BMC-invariants"]))[0]
    full = runner.run(runner.Options(bound=N, depth=3, mutant=mutant, lemma_free_depth=None, jobs=1,
                                     only=["BMC-invariants"]))[0]
    assert short.result == full.result
    if mutant == "skip-one-level":
        assert short.result == PROVED and short.queries == 2 and "by induction" in short.detail
    else:
        assert short.queries == full.queries and "induction" not in short.detail


def test_the_fallback_continues_past_the_lemma_free_depth() -> None:
    enc, sem, _ = runner.build(runner.Options(bound=N))
    head = bmc.check_invariants(enc, sem, 3, 0, 1)
    res = runner.bmc_invariants(enc, sem, 3, 1, head, inductive=False)
    assert res.result == PROVED and res.queries == 4 and "induction" not in res.detail
