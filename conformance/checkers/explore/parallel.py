"""The breadth-first search of one scope in several forked processes, level by level.

`explore(cfg, jobs=J)` with one scope to explore (`qlwf explore --shape '3:-' --full`) has nothing
to hand out shape by shape; this search splits the one scope instead, as parallel Murphi splits a
state space (Stern and Dill, 1997): partition p owns the explored identities whose key hashes to p
(`owner`) and keeps their visited set and the detailed identities already checked. A state is
expanded by the process that generated it; only the keys of its successors travel to their owners,
and a state itself travels only to even out the partitions' work (`_balance`).

It is the sequential search (search.py) run level by level, and gives the same report. The
sequential search takes the arrivals at level d + 1 in the order of their paths (the choice indexes
from the root), since it expands level d in that order; so the first arrival at an identity is the
one with the least path. Here each owner takes the arrivals offered for its identities in path
order too, across every process, and so picks the same representative and checks the same detailed
variants, with the same counterexample paths; findings are reported in the sequential search's
order. Two things differ: `drains` (each process has its own LIVE-1 memo), and, under
`stop_on_violation`, the counts, which are those of the whole level in which the first finding
was made (the findings are the sequential search's: those of the first state or transition with
any). The sleep-set reductions are not split this way (search.py explores them in one process).
The tests hold this search equal to the sequential one (tests/conformance/checkers/test_explore_parallel.py).
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from qlwf.conformance.processes.fork_pool import RemoteTraceback, WorkerDied, portable
from qlwf.model.invariants import reusing_record_checks
from qlwf.model.state import State

from .abstraction import abstract_state
from .alphabet import Action, TraceStep, actions, take
from .report import Finding, ShapeReport
from .search import (
    NO_WRITE,
    Checker,
    Config,
    Identities,
    LivenessMemo,
    Observer,
    _check_reduction,
    _check_state,
    _invariants,
    _report_name,
    admit_scope,
)
from .shapes import Shape

Path = tuple[int, ...]  # the index of each choice in `actions(...)`, from the root
# Where a finding falls in the sequential search's order: the state's own checks (len, path, 0, -1)
# come before the transitions out of it (len, parent path, 1, choice index).
Order = tuple[int, Path, int, int]
Found = tuple[Order, str, str, Path, list[TraceStep]]  # order, kind, message, path, the drain's steps
# One arrival offered to the owner of its identity: (offer id, explored key, detailed key, path).
Offer = tuple[int, bytes, bytes, Path]
REPRESENTATIVE, VARIANT = 0, 1
COUNTERS = ("transitions", "refusals", "checked_variants", "cross_checked", "drains")
# Shipping states to even out the partitions only pays past this many (and 2 % of the level).
BALANCE_SLACK = 16


def owner(key: bytes, parts: int) -> int:
    """The partition that owns an explored identity (a stable hash: every process agrees)."""
    return zlib.crc32(key) % parts


@dataclass
class _Level:
    """What a partition did in one phase, for the coordinator to add up."""

    counts: dict[str, int] = field(default_factory=dict)
    found: list[Found] = field(default_factory=list)
    rules: set[str] = field(default_factory=set)
    observed: set[str] = field(default_factory=set)


class _Partition:
    """One process's share of the search: its frontier, the identities it owns, its offers in flight."""

    def __init__(self, index: int, parts: int, shape: Shape, cfg: Config, state0: State,
                 observer: Observer | None, checker: Checker | None) -> None:
        self.index, self.parts, self.cfg = index, parts, cfg
        self.observer, self.checker = observer, checker
        self.alphabet = cfg.alphabet(shape[0] * cfg.workflows)
        self.identities = Identities(shape, cfg)
        symmetry = self.identities.symmetry
        # LIVE-1 verdicts by the starting identity's bytes, as the visited sets keep identities
        self.liveness = LivenessMemo(lambda s: repr(symmetry.canonical(abstract_state(s))).encode())
        self.report = ShapeReport(_report_name(shape, cfg))  # the counters this process adds to
        self.seen: set[bytes] = set()
        self.checked: set[bytes] = set()
        root = self.identities(state0)
        if owner(root[3], parts) == index:
            self.seen.add(root[3])
            self.checked.add(root[4])
        self.frontier: list[tuple[Path, State]] = [((), state0)] if index == 0 else []
        # this level's offers, by offer id: the frontier state and the choice that reach the arrival (a
        # chosen arrival is reached again at `settle`, so that the unchosen ones need not be kept)
        self.pending: dict[int, tuple[int, int, Action]] = {}
        self.own: list[tuple[int, Offer]] = []  # offers for identities this partition owns: (source, offer)

    def _counted(self, level: _Level) -> _Level:
        level.counts = {k: getattr(self.report, k) for k in COUNTERS}
        for k in COUNTERS:
            setattr(self.report, k, 0)
        return level

    def expand(self, further: bool) -> tuple[list[bytes | None], _Level]:
        """Check every frontier state and, if `further`, take every choice in it; the offers for
        other partitions' identities, pickled per owner."""
        level = _Level()
        report, cfg = self.report, self.cfg
        offers: list[list[Offer]] = [[] for _ in range(self.parts)]
        first: set[bytes] = set()  # detailed keys offered this level: later arrivals cannot matter
        self.pending, self.own = {}, []
        for at, (path, state) in enumerate(self.frontier):  # in path order: a first arrival here has the least path
            for kind, message, extra in _check_state(state, cfg, report, self.liveness):
                level.found.append(((len(path), path, 0, -1), kind, message, path, extra))
            if not further:
                continue
            for i, action in enumerate(actions(state, self.alphabet, cfg.lease_ms, cfg.timeout_ms)):
                new, outcome = take(state, action)
                report.transitions += 1
                order: Order = (len(path), path, 1, i)
                to = (*path, i)
                if outcome is not None:
                    if self.checker is not None:
                        level.found += [(order, "postcondition", p, to, [])
                                        for p in self.checker(state, action.step, outcome)]
                    if outcome.error is not None:
                        report.refusals += 1
                        if new is not state:
                            level.found.append((order, "no-write", f"error {outcome.error} changed the state",
                                                to, []))
                        continue
                    level.rules |= set(outcome.rules)
                    if self.observer is not None:
                        level.observed.update(self.observer(state, action.step, outcome))
                    status = outcome.result.get("status") if outcome.result else None
                    if status in NO_WRITE and new is not state:
                        level.found.append((order, "no-write", f"{status} changed the state", to, []))
                if new is state:  # a refusal or replay: nothing new (search.py)
                    continue
                _, _, _, key, detail = self.identities(new)
                if detail in first:
                    continue
                first.add(detail)
                to_owner = owner(key, self.parts)
                if to_owner == self.index and detail in self.checked:
                    continue  # known here already
                offer_id = len(self.pending)
                self.pending[offer_id] = (at, i, action)
                offers[to_owner].append((offer_id, key, detail, to))
        self.own = [(self.index, offer) for offer in offers[self.index]]
        blobs = [None if o == self.index else pickle.dumps(offers[o], pickle.HIGHEST_PROTOCOL)
                 for o in range(self.parts)]
        return blobs, self._counted(level)

    def decide(self, blobs: list[bytes | None]) -> list[list[tuple[int, int]]]:
        """Take every offer for an identity this partition owns, in path order: the first arrival at
        a new identity is its representative, the first at a new detailed identity a variant to
        check. The decisions, per source partition."""
        offers = list(self.own)
        for source, blob in enumerate(blobs):
            if blob is not None:
                offers += [(source, offer) for offer in pickle.loads(blob)]
        offers.sort(key=lambda o: o[1][3])
        decisions: list[list[tuple[int, int]]] = [[] for _ in range(self.parts)]
        for source, (offer_id, key, detail, _) in offers:
            if key not in self.seen:
                self.seen.add(key)
                self.checked.add(detail)
                decisions[source].append((offer_id, REPRESENTATIVE))
            elif detail not in self.checked:
                self.checked.add(detail)
                decisions[source].append((offer_id, VARIANT))
        self.own = []
        return decisions

    def settle(self, decisions: list[tuple[int, int]]) -> tuple[int, _Level]:
        """Keep the representatives as the next frontier and check the variants; drop the rest."""
        level = _Level()
        frontier: list[tuple[Path, State]] = []
        for offer_id, role in decisions:
            at, i, action = self.pending[offer_id]
            parent, state = self.frontier[at]
            state = take(state, action)[0]
            path = (*parent, i)
            if role == REPRESENTATIVE:
                frontier.append((path, state))
                continue
            self.report.checked_variants += 1
            violations, disagreement = _invariants(state, self.cfg, self.report)
            order: Order = (len(path) - 1, path[:-1], 1, path[-1])
            level.found += [(order, "invariant", str(v), path, []) for v in violations]
            if disagreement is not None:
                level.found.append((order, "incremental", disagreement, path, []))
        self.pending = {}
        frontier.sort(key=lambda entry: entry[0])
        self.frontier = frontier
        return len(frontier), self._counted(level)

    def ship(self, count: int) -> bytes:
        """Hand `count` frontier states, spread evenly over it, to another partition. Spread, because
        of two arrivals at one identity the one with the lesser path wins: a partition left with only
        the least paths would win most identities of the next level, and have most of its work."""
        n = len(self.frontier)
        chosen = {n * j // count for j in range(count)}
        shipped = [entry for i, entry in enumerate(self.frontier) if i in chosen]
        self.frontier = [entry for i, entry in enumerate(self.frontier) if i not in chosen]
        return pickle.dumps(shipped, pickle.HIGHEST_PROTOCOL)

    def adopt(self, blob: bytes) -> int:
        self.frontier = sorted(self.frontier + pickle.loads(blob), key=lambda entry: entry[0])
        return len(self.frontier)


def _serve(partition: Callable[[], _Partition], conn: Connection, others: list[Connection]) -> None:
    """A partition's process: answer each request until told to stop or the coordinator is gone."""
    for end in others:  # held here, the coordinator's ends would hide its death
        end.close()
    try:
        part = partition()
        with reusing_record_checks(part.cfg.incremental):  # the search never mutates a record it holds
            while True:
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    return
                if request is None:
                    return
                method, args = request
                # What the search keeps (visited sets, frontier) is not scanned again: collected once here,
                # after the phase that made it, then frozen. Collected first, so that no garbage cycle
                # (a refused command's exception and its frames) is frozen with it.
                gc.collect()
                gc.freeze()
                try:
                    reply: tuple[bool, Any, str] = (True, getattr(part, method)(*args), "")
                except Exception as e:  # raised again in the coordinator, with this traceback as its cause
                    reply = (False, portable(e), traceback.format_exc())
                conn.send(reply)
    except (BrokenPipeError, EOFError, OSError):
        return


class _Processes:
    """The partitions' processes, forked, one pipe each; leaving the `with` kills and reaps them all."""

    def __init__(self, partition: Callable[[int], _Partition], parts: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conns: list[Connection] = []
        self.processes: list[BaseProcess] = []
        for index in range(parts):
            mine, child = ctx.Pipe(duplex=True)
            process = ctx.Process(target=_serve, args=(lambda i=index: partition(i), child, [*self.conns, mine]),
                                  daemon=True)
            process.start()
            child.close()
            self.conns.append(mine)
            self.processes.append(process)

    def __enter__(self) -> _Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join()
        for conn in self.conns:
            conn.close()

    def call(self, requests: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Send one request to each partition, then collect the replies in partition order."""
        return list(self.some(dict(enumerate(requests))).values())

    def some(self, requests: dict[int, tuple[str, tuple[Any, ...]]]) -> dict[int, Any]:
        """Send each partition named its request, then collect their replies."""
        for index, request in requests.items():
            self.conns[index].send(request)
        return {index: self._reply(index) for index in requests}

    def _reply(self, index: int) -> Any:
        try:
            ok, value, remote = self.conns[index].recv()
        except (EOFError, OSError):
            process = self.processes[index]
            process.join()
            raise WorkerDied(f"the explorer's partition {index} (pid {process.pid}) ended with exit code "
                             f"{process.exitcode} before replying", process.exitcode) from None
        if not ok:
            raise value from RemoteTraceback(remote)
        return value


def _balance(processes: _Processes, sizes: list[int]) -> int:
    """Move frontier states from the fullest partitions to the emptiest until every one is within
    the slack of an even share; the states moved."""
    total, parts = sum(sizes), len(sizes)
    if max(sizes) - min(sizes) <= max(BALANCE_SLACK, total // 50):
        return 0
    share = [total // parts + (i < total % parts) for i in range(parts)]
    surplus = [(i, sizes[i] - share[i]) for i in range(parts) if sizes[i] > share[i]]
    deficit = [(i, share[i] - sizes[i]) for i in range(parts) if sizes[i] < share[i]]
    moved = 0
    while surplus and deficit:
        (give, extra), (get, need) = surplus[0], deficit[0]
        count = min(extra, need)
        blob = processes.some({give: ("ship", (count,))})[give]
        processes.some({get: ("adopt", (blob,))})
        moved += count
        surplus[0], deficit[0] = (give, extra - count), (get, need - count)
        surplus = [s for s in surplus if s[1]]
        deficit = [d for d in deficit if d[1]]
    return moved


def _trace(state0: State, admissions: list[TraceStep], cfg: Config, shape: Shape, path: Path,
           extra: list[TraceStep]) -> list[TraceStep]:
    """The trace steps of a path: the admissions, then each choice taken again from the root."""
    alphabet = cfg.alphabet(shape[0] * cfg.workflows)
    steps, state = list(admissions), state0
    for i in path:
        action = actions(state, alphabet, cfg.lease_ms, cfg.timeout_ms)[i]
        steps.append(action.step)
        state = take(state, action)[0]
    return steps + extra


def explore_shape_partitioned(shape: Shape, cfg: Config, parts: int, observer: Observer | None = None,
                              checker: Checker | None = None) -> ShapeReport:
    """The search of `explore_shape` (search.py) over one scope, split across `parts` processes."""
    start = time.perf_counter()
    _check_reduction(cfg)
    if "sleep" in cfg.reduction.split("+") and cfg.workflows > 1:
        raise ValueError("the sleep-set reductions are searched in one process (search.py explore_shape)")
    report = ShapeReport(_report_name(shape, cfg))
    with reusing_record_checks(cfg.incremental):
        state0, admissions = admit_scope(shape, cfg, report, observer)
    found: list[Found] = []
    depth = 0
    sizes = [1] + [0] * (parts - 1)
    with _Processes(lambda i: _Partition(i, parts, shape, cfg, state0, observer, checker), parts) as processes:
        while sum(sizes):
            report.distinct_states += sum(sizes)
            report.depth = depth
            further = cfg.max_depth is None or depth < cfg.max_depth
            expanded = processes.call([("expand", (further,))] * parts)
            level = [done for _, done in expanded]
            # partition o decides the offers every other partition made for its identities
            decisions = processes.call([("decide", ([blobs[o] for blobs, _ in expanded],))
                                        for o in range(parts)])
            settled = processes.call([("settle", ([d for ds in decisions for d in ds[s]],)) for s in range(parts)])
            level += [done for _, done in settled]
            for done in level:
                for k, v in done.counts.items():
                    setattr(report, k, getattr(report, k) + v)
                report.rules |= done.rules
                report.observed |= done.observed
                found += done.found
            if found and cfg.stop_on_violation:
                first = min(f[0] for f in found)
                found = [f for f in found if f[0] == first]
                break
            sizes = [size for size, _ in settled]
            if sum(sizes):
                _balance(processes, sizes)
            depth += 1
    found.sort(key=lambda f: f[0])  # stable: within one order, as the sequential search finds them
    report.findings = [Finding(report.shape, kind, message, _trace(state0, admissions, cfg, shape, path, extra))
                       for _, kind, message, path, extra in found]
    report.seconds = time.perf_counter() - start
    return report
