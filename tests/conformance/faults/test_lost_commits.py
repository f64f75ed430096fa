"""Lost commit responses: retries answer from durable state (commands.md §2.7) on the model and SQLite."""

from __future__ import annotations

from qlwf.conformance.faults.lost_commits import REPLAY_OUTCOMES, replay_violations, with_lost_commits
from qlwf.conformance.generate.sequences import generate
from qlwf.conformance.lockstep.compare import run_lockstep
from qlwf.conformance.lockstep.runner import corpus_traces
from qlwf.model import tables as T


def test_replay_outcomes_are_declared_outcomes() -> None:
    for name, outcomes in REPLAY_OUTCOMES.items():
        assert outcomes <= set(T.COMMAND_OUTCOMES[name]), name


def test_model_answers_every_retry_from_durable_state() -> None:
    traces = corpus_traces() + [generate(seed) for seed in range(40)]
    problems = {t.name or t.description: v for t in traces if (v := replay_violations(t))}
    assert not problems, problems


def test_sqlite_answers_retries_like_the_model() -> None:
    from qlwf.conformance import backends

    factory = backends.get("sqlite").create()
    try:
        for trace in [*corpus_traces()[:6], *(generate(seed) for seed in range(100, 110))]:
            doubled = with_lost_commits(trace)
            assert doubled.command_count > trace.command_count
            port = factory.open()
            try:
                result = run_lockstep(doubled, port)
            finally:
                port.close()
            assert result.passed, result.divergence.render() if result.divergence else trace.name
    finally:
        factory.shutdown()


def test_a_retry_that_writes_again_is_reported() -> None:
    """The check can fail: a model whose request_cancel forgets its replay answer is caught."""
    import qlwf.model.system as system

    original = system.COMMANDS["request_cancel"]

    def forgetful(state, ctx, args):  # type: ignore[no-untyped-def]
        run = state.runs.get(args.get("runId"))
        if run is not None and "cancelRequestedAtMs" in run:  # answer as if no intent had been recorded
            stripped = {k: v for k, v in run.items() if k not in ("cancelRequestedAtMs", "cancelReason")}
            state = state.__class__(**{**state.__dict__, "runs": {**state.runs, run["id"]: stripped}})
        return original(state, ctx, args)

    system.COMMANDS["request_cancel"] = forgetful
    try:
        found = [v for seed in range(60) if (v := replay_violations(generate(seed)))]
    finally:
        system.COMMANDS["request_cancel"] = original
    assert any("request_cancel" in line for v in found for line in v)
