"""The Markdown report of `qlwf diff`, fit for a pull-request comment: summary first, then the
behaviour groups (each with one witness as a step table), then tables, proofs and oracle."""

from __future__ import annotations

import json
from typing import Any

from qlwf.review.model_diff import DiffReport, Group

MAX_TABLE_ROWS = 40
MAX_ORACLE_ROWS = 20
MAX_GROUPS = 20  # a pull-request comment stays readable; --json has every group


def _cell(value: Any, limit: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary_lines(r: DiffReport) -> list[str]:
    b = r.behaviour
    o = r.options
    scope = f"K = {o.max_steps}" + (f", shapes {', '.join(o.shapes)}" if o.shapes else "")
    if o.workflow_scopes:
        scope += (f", several Runs {', '.join(o.workflow_scopes)} "
                  f"({'up to permutations of the Runs' if o.swap_runs else 'Runs kept apart'})")
    verdict = "**No behaviour change**" if r.identical else "**Behaviour differs**"
    only_b = sum(len(v) for v in b.only_base.values())
    only_h = sum(len(v) for v in b.only_head.values())
    lines = [f"{verdict}: base {r.base.label} → head {r.head.label} ({scope}).", ""]
    lines.append(f"* behaviour: {len(b.groups)} group(s), {sum(len(g.members) for g in b.groups)} differing "
                 f"transition(s) of {b.compared_transitions} compared over {b.compared_states} common states; "
                 f"{only_b} state(s) only in base, {only_h} only in head ({b.states_base} / {b.states_head} reached)")
    lines.append(f"* tables: {len(r.tables)} row change(s)")
    if r.proofs is None:
        lines.append("* proofs: not run")
    else:
        def counts(side: dict[str, int]) -> str:
            return ", ".join(f"{n} {result}" for result, n in side.items()) or "none"
        lines.append(f"* proofs (bound {o.proofs_bound}): {len(r.proofs)} of {r.proof_count[1]} propert(ies) changed "
                     f"status (base: {counts(r.proof_results[0])}; head: {counts(r.proof_results[1])})")
    if r.oracle is None:
        lines.append("* oracle: not run")
    else:
        lines.append(f"* oracle: {len(r.oracle)} of {r.oracle_count} answers differ (examples/ and corpus snapshots)")
    if r.corpus is None:
        lines.append("* corpus traces: not run")
    else:
        lines.append(f"* corpus traces: {len(r.corpus)} of {r.corpus_count} traces differ step by step")
    return lines


def group_lines(n: int, g: Group) -> list[str]:
    shapes = sorted({m.shape for m in g.members})
    lines = [f"### {n}. {g.title()}", "",
             f"{len(g.members)} transition(s) in shape(s) {', '.join(shapes)}; leads to {g.states_only_base} state(s) "
             f"only in base and {g.states_only_head} only in head.", ""]
    w = g.witness
    if w is None:
        return lines
    lines += [f"Witness (shape {w['shape']}, {len(w['steps'])} steps): `{w['show']}` "
              f"(replay: `{w['replay']}`)", "",
              "| # | step | base | head | rules fired (head) |", "|---|---|---|---|---|"]
    for row in w["steps"]:
        mark = "**" if row["differs"] else ""
        rules = ", ".join(row["headRules"])
        if row["differs"] and sorted(row["baseRules"]) != sorted(row["headRules"]):
            gone = [f"−{r}" for r in row["baseRules"] if r not in row["headRules"]]
            new = [f"+{r}" for r in row["headRules"] if r not in row["baseRules"]]
            rules = "vs base: " + ", ".join(gone + new)
        lines.append(f"| {mark}{row['step']}{mark} | {_cell(row['command'], 80)} | {mark}{_cell(row['base'])}{mark} "
                     f"| {mark}{_cell(row['head'])}{mark} | {_cell(rules, 160)} |")
    lines.append("")
    return lines


def render_markdown(r: DiffReport) -> str:
    lines = ["## qlwf diff", "", *summary_lines(r), ""]
    if r.behaviour.groups:
        lines += ["## Behaviour", ""]
        for n, g in enumerate(r.behaviour.groups[:MAX_GROUPS], 1):
            lines += group_lines(n, g)
        if len(r.behaviour.groups) > MAX_GROUPS:
            lines += [f"… {len(r.behaviour.groups) - MAX_GROUPS} more group(s) (see --json)", ""]
    if r.tables:
        lines += ["## Tables (model/tables.py)", "", "| table | row | change | base | head |", "|---|---|---|---|---|"]
        for c in r.tables[:MAX_TABLE_ROWS]:
            lines.append(f"| {c.table} | {_cell(c.key)} | {c.change} | {_cell(c.base) if c.base is not None else ''} "
                         f"| {_cell(c.head) if c.head is not None else ''} |")
        if len(r.tables) > MAX_TABLE_ROWS:
            lines.append(f"| … | {len(r.tables) - MAX_TABLE_ROWS} more (see --json) | | | |")
        lines.append("")
    if r.proofs:
        lines += ["## Proofs", "", "| property | base | head |", "|---|---|---|"]
        lines += [f"| {p['property']} | {p['base']} | {p['head']} |" for p in r.proofs]
        lines.append("")
    if r.oracle:
        lines += ["## Oracle answers", "", "| input | base | head | first differing fields |", "|---|---|---|---|"]
        for a in r.oracle[:MAX_ORACLE_ROWS]:
            fields = "; ".join(f"{f['path']}: {_cell(f['base'], 30)} → {_cell(f['head'], 30)}" for f in a["fields"][:3])
            lines.append(f"| {_cell(a['input'], 80)} | {_cell(a['base'])} | {_cell(a['head'])} "
                         f"| {_cell(fields, 200)} |")
        if len(r.oracle) > MAX_ORACLE_ROWS:
            lines.append(f"| … {len(r.oracle) - MAX_ORACLE_ROWS} more (see --json) | | | |")
        lines.append("")
    if r.corpus:
        lines += ["## Corpus traces", "", "| trace | first differing step | differs | base | head | steps differing |",
                  "|---|---|---|---|---|---|"]
        for t in r.corpus:
            lines.append(f"| {t['trace']} | {t['step']}: {_cell(t['command'], 80)} | {', '.join(t['differs'])} "
                         f"| {_cell(t['base'])} | {_cell(t['head'])} | {t['differingSteps']} |")
        lines.append("")
    lines.append(f"_{r.seconds:.1f} s; exit {0 if r.identical else 1}._")
    return "\n".join(lines) + "\n"
