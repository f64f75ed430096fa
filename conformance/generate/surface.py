"""A driver's declared surface: what of the command port it implements, and traces that stay inside it.

A store such as ql3's Edge adapter implements part of the port (docs/ql3-adapters.md): some commands,
some optional arguments (no page cursor), some result keys (a convergence page's five counters), an
error detail (class, code or reason), some executor types, and it may derive a task attempt's binding
from ql3 evidence instead of taking it. `Surface` is that declaration (the `surface` of a driver's
`hello`, docs/protocol.md); `missing_piece` says what a trace needs beyond it (the trace is then not
applicable, never a pass or a failure), `view` cuts an outcome down to what the surface lets one
compare, and `generate_within` draws traces that stay inside it yet reach the states the spec's
decisions are about: cancel intent, a drifted workflow at the head of the cancellation order, full
pages without a cursor. For a store that derives the binding from ql3 evidence they also probe that it
does: before some admissions that would succeed, the same admission with a foreign binding, marked
`"probe": "foreign-binding"`, which such a store refuses (conformance/traces/format.py).

It lives with the generators because both the generators and the lockstep runner read it; the exec
client builds it from a driver's `hello` (conformance/exec/connection.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from qlwf.conformance.generate.base import Generator, GeneratorConfig, RandomChooser
from qlwf.conformance.generate.pages import DRIFT_PATCH, PAGE_CONFIG, PageGenerator
from qlwf.conformance.generate.plans import binding as placeholder_binding
from qlwf.conformance.generate.sequences import family, generate
from qlwf.conformance.traces.format import EVIDENCE_COMMAND, FOREIGN_BINDING, Trace, command, corruption
from qlwf.model import arguments
from qlwf.model import tables as T
from qlwf.model.errors import Invalid
from qlwf.model.memo import trusting_record_identity
from qlwf.model.records import Record
from qlwf.model.system import Outcome, apply

# How much of a typed error a store reports, from least to most (commands.md §2.3).
ERROR_DETAILS: Final = ("class", "code", "reason")
ERROR_FIELDS: Final = {"class": ("class",), "code": ("class", "code"), "reason": ("class", "code", "reason")}
ALL_COMMANDS: Final = tuple(T.COMMAND_FAMILY)


@dataclass(frozen=True)
class Surface:
    """What a driver implements. The default is the whole port, compared at reason level."""

    commands: frozenset[str] = frozenset(ALL_COMMANDS)
    omitted_arguments: Mapping[str, frozenset[str]] = field(default_factory=dict)  # command → keys it lacks
    # command → argument key → the only values it takes (an enum the store narrows: Edge cancels for `user`)
    argument_values: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)
    result_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # command → the keys it returns
    error_detail: str = "reason"
    executor_types: frozenset[str] = frozenset(T.EXECUTOR_TYPES)
    admission_evidence: bool = False  # admit_task_attempt derives its binding from the step's evidence
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.error_detail not in ERROR_DETAILS:
            raise ValueError(f"error detail must be one of {list(ERROR_DETAILS)}, not {self.error_detail!r}")

    @property
    def full(self) -> bool:
        """The whole port at reason level: what the built-in backends are held to."""
        return (self.commands == set(ALL_COMMANDS) and not self.omitted_arguments and not self.argument_values
                and not self.result_keys
                and self.error_detail == "reason" and self.executor_types == set(T.EXECUTOR_TYPES)
                and not self.admission_evidence)

    # ---- the hello form (conformance/exec/schema/hello.response.json, capabilities.surface) -------------
    @classmethod
    def from_hello(cls, commands: Iterable[str], surface: Mapping[str, Any] | None) -> Surface:
        """The declared surface of a driver whose hello lists `commands` and maybe a `surface` object
        (an old hello has none: the listed commands, everything else in full)."""
        s = surface or {}
        return cls(commands=frozenset(commands),
                   omitted_arguments={c: frozenset(keys) for c, keys in s.get("omittedArguments", {}).items()},
                   argument_values={c: {k: frozenset(v) for k, v in keys.items()}
                                    for c, keys in s.get("argumentValues", {}).items()},
                   result_keys={c: tuple(keys) for c, keys in s.get("resultKeys", {}).items()},
                   error_detail=s.get("errorDetail", "reason"),
                   executor_types=frozenset(s.get("executorTypes", T.EXECUTOR_TYPES)),
                   admission_evidence=bool(s.get("admissionEvidence", False)), profile=s.get("profile"))

    def to_hello(self) -> Record:
        """The `surface` object of a hello (without the command list, which is `capabilities.commands`)."""
        out: Record = {"omittedArguments": {c: sorted(k) for c, k in sorted(self.omitted_arguments.items())},
                       "argumentValues": {c: {k: sorted(v) for k, v in sorted(keys.items())}
                                          for c, keys in sorted(self.argument_values.items())},
                       "resultKeys": {c: list(k) for c, k in sorted(self.result_keys.items())},
                       "errorDetail": self.error_detail, "executorTypes": sorted(self.executor_types),
                       "admissionEvidence": self.admission_evidence}
        return out | ({"profile": self.profile} if self.profile else {})

    # ---- applicability ----------------------------------------------------------------------------------
    def missing_piece(self, trace: Trace) -> str | None:
        """The first thing `trace` needs that the surface lacks (`command claim_lease`, `argument after`,
        `value reason=timeout`, `executor remote_worker`, `evidence`, `probe foreign-binding`: a store
        that takes the binding as given cannot refuse a foreign one), or None when it fits."""
        if self.full:  # the whole port lacks nothing but the refusal of a binding it is given
            return next((f"probe {s['probe']}" for s in trace.steps if "probe" in s), None)
        for step in trace.steps:
            if step["op"] == "command":
                piece = self.step_missing(step)
                if piece is not None:
                    return piece
        return None

    def step_missing(self, step: Record) -> str | None:
        name, args = step["name"], step["args"]
        if "probe" in step and not self.admission_evidence:
            return f"probe {step['probe']}"
        if name not in self.commands:
            return f"command {name}"
        if isinstance(args, dict):
            lacked = sorted(self.omitted_arguments.get(name, frozenset()) & set(args))
            if lacked:
                return f"argument {lacked[0]}"
            for key, value in self.narrowed(name, args):
                return f"value {key}={value}"
            if name == "admit_task_attempt":
                binding = args.get("binding")
                executor = binding.get("executorType") if isinstance(binding, dict) else None
                # a malformed executor type is a wrong argument the store refuses like any other, not a gap
                if executor in T.EXECUTOR_TYPES and executor not in self.executor_types:
                    return f"executor {executor}"
                if self.admission_evidence and step_evidence(step) is None:
                    return "evidence"
        return None

    def narrowed(self, name: str, args: Record) -> list[tuple[str, Any]]:
        """The (key, value) pairs of `args` whose value is well-formed but one the surface does not take;
        a malformed value is a wrong argument the store refuses like any other, not a gap."""
        narrowed = self.argument_values.get(name)
        if not narrowed:
            return []
        shapes = dict(arguments.ARGUMENTS.get(name, ()))
        out = []
        for key, allowed in sorted(narrowed.items()):
            shape = shapes.get(key)
            value = args.get(key)
            if key in args and value not in allowed and shape is not None and shape.problem(value) is None:
                out.append((key, value))
        return out

    # ---- comparison -------------------------------------------------------------------------------------
    def view(self, command: str, outcome: Record) -> Record:
        """The part of an outcome this surface compares: the declared result keys of `command` (a
        declared key the result lacks stays missing, so it differs), the error at the declared detail."""
        if "ok" in outcome:
            keys = self.result_keys.get(command)
            result = outcome["ok"]
            if keys is None or not isinstance(result, dict):
                return outcome
            return {"ok": {k: result[k] for k in keys if k in result}}
        error = outcome.get("error")
        if not isinstance(error, dict):
            return outcome
        return {"error": {k: error[k] for k in ERROR_FIELDS[self.error_detail] if k in error}}

    def describe(self) -> str:
        """One phrase for every report line: what was compared."""
        name = f"surface {self.profile}" if self.profile else ("full surface" if self.full else "declared surface")
        parts = [name, f"errors by {'+'.join(ERROR_FIELDS[self.error_detail])}"]
        if self.result_keys:
            parts.append("result keys of " + ", ".join(sorted(self.result_keys)) + " as declared")
        return "; ".join(parts)


FULL: Final = Surface()


def step_evidence(step: Record) -> Any:
    """The ql3 evidence an admit_task_attempt step carries ({taskReconciliation, execution}), or None."""
    evidence = step.get("evidence")
    if evidence is None and isinstance(step.get("args"), dict):
        evidence = step["args"].get("evidence")
    return evidence


# ---- generation inside a surface -------------------------------------------------------------------------
class _Within:
    """Mixin of a generator whose commands stay inside `surface`: an argument the surface lacks is left
    out, a binding takes an executor type the surface stores, and a step the surface cannot take is
    not emitted (the caller sees a refusal, as it would for any refused command)."""

    surface: Surface
    steps: list[Record]

    def run_command(self, name: str, args: Any, *evidence: Record | None) -> Outcome:
        before = self._snapshot_generator()
        if name not in self.surface.commands:
            return self._refused(name)
        if isinstance(args, dict):
            args = {k: v for k, v in args.items() if k not in self.surface.omitted_arguments.get(name, frozenset())}
            for key, _ in self.surface.narrowed(name, args):  # a value the store takes instead
                args[key] = sorted(self.surface.argument_values[name][key])[0]
        out: Outcome = super().run_command(name, args, *evidence)  # type: ignore[misc]
        if self.surface.step_missing(self.steps[-1]) is not None:  # e.g. a placeholder binding without evidence
            self._restore_generator(before)
            return self._refused(name)
        return out

    def admission(self, run_id: str, step_key: str, executor_type: str = "remote_worker", revision: int = 1,
                  task_key: str | None = None) -> tuple[Record, Record | None]:
        """(binding, evidence) as the generator's, with an executor type the surface stores."""
        if executor_type not in self.surface.executor_types:
            executor_type = sorted(self.surface.executor_types)[0]
        pair: tuple[Record, Record | None] = super().admission(  # type: ignore[misc]
            run_id, step_key, executor_type, revision, task_key)
        return pair

    def admit_task(self, run_id: str, step_run_id: str, binding: Record, evidence: Record | None) -> Outcome:
        """For a store that derives the binding, probe first, at about a third of the admissions that
        would succeed: the same step with a foreign binding beside its real evidence, marked as a probe,
        which such a store refuses without writing (so the admission itself still follows)."""
        if self.surface.admission_evidence and evidence is not None:
            self._probe_foreign_binding(run_id, step_run_id, binding, evidence)
        out: Outcome = super().admit_task(run_id, step_run_id, binding, evidence)  # type: ignore[misc]
        return out

    def _probe_foreign_binding(self, run_id: str, step_run_id: str, binding: Record, evidence: Record) -> None:
        g: Any = self
        args = {"runId": run_id, "stepRunId": step_run_id, "binding": binding}
        # only where the derived binding is admitted: a refusal for another reason would make the expected
        # answer depend on which check a store runs first (conformance/traces/check.py `probe_problem`)
        if not apply(g.state, {"name": EVIDENCE_COMMAND, "args": args}, g.state.clock).ok or g.c.integer(0, 2):
            return
        key, executor = g.state.step_runs[step_run_id]["stepKey"], binding["executorType"]
        foreign = [
            placeholder_binding(key, executor),  # invented digests, as traces had before they carried evidence
            g.admission(run_id, key, executor, 3)[0],  # real, but derived from other evidence (another revision)
            {**binding, "executionDigest": placeholder_binding(key)["executionDigest"]},  # one digest off
        ]
        probe = g.pick([b for b in foreign if b != binding])
        g.emit(command(EVIDENCE_COMMAND, {**args, "binding": probe}, evidence, probe=FOREIGN_BINDING))

    def _snapshot_generator(self) -> tuple[Any, ...]:
        g: Any = self
        return g.state, len(g.steps), len(g.done), {k: list(v) for k, v in g.cursors.items()}

    def _restore_generator(self, saved: tuple[Any, ...]) -> None:
        g: Any = self
        g.state, steps, done, g.cursors = saved
        del g.steps[steps:], g.done[done:]

    def _refused(self, name: str) -> Outcome:
        g: Any = self
        return Outcome(None, Invalid("", "outside_surface", f"{name} is outside the declared surface"), g.state, ())


class SurfaceGenerator(_Within, Generator):
    def __init__(self, surface: Surface, chooser: RandomChooser, config: GeneratorConfig, description: str) -> None:
        self.surface = surface
        super().__init__(chooser, config, description)


class SurfacePageGenerator(_Within, PageGenerator):
    """Page traces inside the surface. Without a cursor every page starts again at the head of the
    cancellation order, so the drift goes to the head: the Run that sorts first (cancellation.md §8, D-6)."""

    def __init__(self, surface: Surface, chooser: RandomChooser, config: GeneratorConfig, description: str) -> None:
        self.surface = surface
        super().__init__(chooser, config, description)

    def lease_some(self) -> None:
        """Without dispatch leases (Edge), admit attempts on about half of the ready steps: claimed,
        never leased, which convergence settles (D-13); otherwise as the page generator does."""
        if "claim_lease" in self.surface.commands:
            super().lease_some()
            return
        for c in list(self.peek("task_candidates")):
            if self.c.integer(0, 1):
                key = self.state.step_runs[c["stepRunId"]]["stepKey"]
                self.admit_task(c["runId"], c["stepRunId"], *self.admission(c["runId"], key))

    def drift_one(self) -> bool:
        cursorless = "after" in self.surface.omitted_arguments.get("converge_cancellation_page", frozenset())
        if not cursorless:
            return super().drift_one()
        heads = [c["runId"] for c in self.peek("cancellation_candidates")]
        if len(heads) < 2:
            return False
        step = self.pick(sorted(s["id"] for s in self.state.steps_of_run(heads[0])))
        self.emit(corruption("stepRuns", [step], DRIFT_PATCH))
        return True

    def sweep(self, limit: int) -> None:
        if "after" not in self.surface.omitted_arguments.get("converge_cancellation_page", frozenset()):
            super().sweep(limit)
            return
        # no cursor: repeat the page while it says there is more, as a ql3 caller would; a full page
        # that makes no progress (a blocked or drifted head) repeats itself, so the sweep is bounded
        for _ in range(4):
            out = self.run_command("converge_cancellation_page", {"limit": limit})
            if not out.ok or out.result is None or not out.result["hasMore"]:
                return
            self.between_pages()


def generate_within(seed: int, surface: Surface, config: GeneratorConfig | None = None) -> Trace:
    """A reproducible trace of the seed's family that stays inside `surface` (the whole port: `generate`'s
    trace). The boundary family needs the whole port; within a restricted surface its seeds draw page
    traces instead, so that drifted heads and full pages come up more often."""
    if surface.full:
        return generate(seed, config)
    base = config or GeneratorConfig()
    with trusting_record_identity():
        if family(seed) == "random":
            return SurfaceGenerator(surface, RandomChooser(seed), base, f"generated-{seed}").run(str(seed))
        cfg = GeneratorConfig(steps=base.steps, workflows=PAGE_CONFIG.workflows, plan_steps=PAGE_CONFIG.plan_steps,
                              wrong_permille=base.wrong_permille, initial_clock=base.initial_clock)
        return SurfacePageGenerator(surface, RandomChooser(seed), cfg, f"generated-pages-{seed}").run(str(seed))
