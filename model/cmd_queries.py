"""The candidate queries (commands.md §2.6, §4.2, §4.4, §4.13, §4.16): rows in key order, one page
per command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import tables as T
from .arguments import check_page
from .attempts import lease_is_expired
from .cmd_context import CommandContext
from .frontier import is_frontier_candidate
from .records import Record
from .state import State


def cancellation_candidate_rows(state: State) -> list[tuple[tuple[Any, ...], Record]]:
    rows = [((r["cancelRequestedAtMs"], r["id"]), {"runId": r["id"], "cancelRequestedAtMs": r["cancelRequestedAtMs"]})
            for r in state.runs.values()
            if r["triggerType"] == T.TRIGGER_TYPE and r["executionOwner"] == T.EXECUTION_OWNER
            and r["status"] == "running" and "cancelRequestedAtMs" in r]
    return sorted(rows, key=lambda kv: kv[0])


def frontier_candidate_rows(state: State) -> list[tuple[tuple[Any, ...], Record]]:
    rows = []
    for adm in state.admissions.values():
        run = state.runs.get(adm["plan"]["runId"])
        if run is None:
            continue
        status_by_key = {s["stepKey"]: s["status"] for s in state.steps_of_run(run["id"])}
        if is_frontier_candidate(run, adm["plan"], status_by_key):
            at = adm["receipt"]["admittedAtMs"]
            rows.append(((at, adm["planDigest"]), {"runId": run["id"], "planDigest": adm["planDigest"],
                                                    "admittedAtMs": at}))
    return sorted(rows, key=lambda kv: kv[0])


def task_candidate_rows(state: State) -> list[tuple[tuple[Any, ...], Record]]:
    epochs = {(r["runId"], r["stepRunId"], r["stepRunVersion"]) for r in state.receipts.values()}
    rows = []
    for s in state.step_runs.values():
        run = state.runs.get(s["runId"])
        if (run is None or run["status"] != "running" or "cancelRequestedAtMs" in run or s["kind"] != "task"
                or s["status"] != "ready" or s["readyAtMs"] is None
                or s["attemptCount"] >= T.MAX_STEP_RUN_ATTEMPTS or (s["runId"], s["id"], s["version"]) in epochs):
            continue
        adm = state.admission_of_run(run["id"])
        rows.append(((s["readyAtMs"], s["id"]), {"runId": run["id"], "stepRunId": s["id"],
                                                 "readyAtMs": s["readyAtMs"],
                                                 "planDigest": adm[0]["planDigest"] if adm else None}))
    return sorted(rows, key=lambda kv: kv[0])


def recovery_candidate_rows(state: State, now: int) -> list[tuple[tuple[Any, ...], Record]]:
    rows = []
    for a in state.attempts.values():
        lease = state.leases.get(a["id"])
        if a["status"] in T.ACTIVE_ATTEMPT and lease_is_expired(lease, now):
            assert lease is not None
            rows.append(((lease["expiresAtMs"], a["id"]), {"attemptId": a["id"], "runId": a["runId"],
                                                           "stepRunId": a["stepRunId"], "status": a["status"],
                                                           "leaseExpiresAtMs": lease["expiresAtMs"]}))
    return sorted(rows, key=lambda kv: kv[0])


Rows = list[tuple[tuple[Any, ...], Record]]


def _query(rows_fn: Callable[[State, CommandContext], Rows]) -> Callable[..., tuple[Record, State]]:
    def run(state: State, ctx: CommandContext, args: Any) -> tuple[Record, State]:
        limit, after = check_page(ctx, args, ctx.command)
        rows = [row for key, row in rows_fn(state, ctx) if after is None or key > after]
        page = rows[:limit]
        result: Record = {"candidates": page, "truncated": len(rows) > limit}
        if len(rows) > limit:
            _, cursor_keys = T.QUERY_PAGES[ctx.command]
            result["next"] = {k: page[-1][k] for k, _ in cursor_keys}
        ctx.fire(T.decision(f"query.{ctx.command}").id)
        return result, state
    return run


frontier_candidates = _query(lambda s, _c: frontier_candidate_rows(s))
task_candidates = _query(lambda s, _c: task_candidate_rows(s))
recovery_candidates = _query(lambda s, c: recovery_candidate_rows(s, c.now))
cancellation_candidates = _query(lambda s, _c: cancellation_candidate_rows(s))
