"""`qlwf show --html`: one self-contained page (inline CSS and SVG, no script, no external resource)."""

from __future__ import annotations

from html import escape

from qlwf.conformance.report.layout import NODE_H, NODE_W, dag, positions
from qlwf.conformance.report.render import STATUS_COLOURS, UNKNOWN_COLOUR, TraceView, step_heading

PAD = 16.0
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#111827}
table{border-collapse:collapse;width:100%;font-size:12px}
th,td{border:1px solid #d1d5db;padding:4px 6px;vertical-align:top;text-align:left}
td{overflow-wrap:anywhere} th{background:#f3f4f6}
tr.chosen td{background:#fef9c3} tr.failing td.problems{color:#991b1b;font-weight:600}
code{font:12px ui-monospace,monospace} .args{color:#4b5563;word-break:break-all}
ul{margin:0;padding-left:16px} .legend span{display:inline-block;padding:2px 8px;margin:2px;border:1px solid #374151}
figure{margin:12px 0} figcaption{font-weight:600}
"""


def _list(items: list[str] | tuple[str, ...], limit: int = 40) -> str:
    if not items:
        return "–"
    shown = "".join(f"<li>{escape(x)}</li>" for x in items[:limit])
    more = f"<li>… {len(items) - limit} more</li>" if len(items) > limit else ""
    return f"<ul>{shown}{more}</ul>"


def svg(view: TraceView, run_id: str, step: int | None, engine: str = "auto") -> tuple[str, str]:
    """(inline SVG of one Run's DAG coloured by status after `step`, layout engine used)."""
    nodes = [n for n in view.nodes if n.run_id == run_id]
    keys = {n.step_key for n in nodes}
    g = dag(keys, [(need, n.step_key) for n in nodes for need in n.needs if need in keys])
    pos, used = positions(g, engine)
    statuses = view.statuses_at(step)
    width = max((x for x, _ in pos.values()), default=0) + NODE_W / 2 + 2 * PAD
    height = max((y for _, y in pos.values()), default=0) + NODE_H / 2 + 2 * PAD
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" aria-label="DAG of {escape(run_id)}">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#374151"/></marker></defs>']
    for a, b in sorted(g.edges):
        (x1, y1), (x2, y2) = pos[a], pos[b]
        parts.append(f'<line x1="{x1 + PAD:.1f}" y1="{y1 + PAD + NODE_H / 2:.1f}" x2="{x2 + PAD:.1f}" '
                     f'y2="{y2 + PAD - NODE_H / 2:.1f}" stroke="#374151" stroke-width="1.5" marker-end="url(#arrow)"/>')
    for key in sorted(pos):
        x, y = pos[key]
        status = statuses.get((run_id, key), "absent")
        fill, text = STATUS_COLOURS.get(status, UNKNOWN_COLOUR)
        left, top = x + PAD - NODE_W / 2, y + PAD - NODE_H / 2
        parts.append(f'<g class="node" data-step-key="{escape(key)}" data-status="{escape(status)}">'
                     f'<rect x="{left:.1f}" y="{top:.1f}" width="{NODE_W:.0f}" height="{NODE_H:.0f}" rx="6" '
                     f'fill="{fill}" stroke="#374151"/>'
                     f'<text x="{x + PAD:.1f}" y="{y + PAD - 4:.1f}" text-anchor="middle" font-weight="600" '
                     f'fill="{text}">{escape(key)}</text>'
                     f'<text x="{x + PAD:.1f}" y="{y + PAD + 13:.1f}" text-anchor="middle" font-size="11" '
                     f'fill="{text}">{escape(status)}</text></g>')
    parts.append("</svg>")
    return "".join(parts), used


def html(view: TraceView, step: int | None = None, engine: str = "auto") -> str:
    chosen = view.resolve_step(step)
    failing = view.failing_step
    title = f"qlwf show: {view.name or 'trace'}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{escape(title)}</h1>", f"<p>{escape(view.description) or '(no description)'}</p>",
           f"<p>{len(view.steps)} step(s), initial clock {view.initial_clock}; "
           + (f"<strong>first failing step: {failing}</strong>" if failing is not None else "no step fails")
           + f". DAG shown after {escape(step_heading(view, chosen))}.</p>",
           f"<h2>Workflow DAG after step {chosen}</h2>" if chosen is not None else "<h2>Workflow DAG</h2>"]
    if not view.nodes:
        out.append("<p>(no workflow admitted)</p>")
    engines = set()
    for run in view.runs:
        drawing, used = svg(view, run, chosen, engine)
        engines.add(used)
        caption = escape(view.run_label(run, chosen))
        out.append(f'<figure data-run-id="{escape(run)}"><figcaption>{caption}</figcaption>{drawing}</figure>')
    legend = "".join(f'<span style="background:{fill};color:{text}">{escape(status)}</span>'
                     for status, (fill, text) in STATUS_COLOURS.items())
    out.append(f'<p class="legend">{legend}</p>')
    if engines:
        out.append(f"<p><small>layout: {escape(', '.join(sorted(engines)))}</small></p>")
    out += ["<h2>Steps</h2>", "<table><thead><tr><th>#</th><th>command</th><th>outcome</th><th>rules</th>"
            "<th>state diff</th><th>problems</th></tr></thead><tbody>"]
    for s in view.steps:
        problems = [*s.violations, *([f"recorded ≠ model: {s.disagreement}"] if s.disagreement else []),
                    *([f"model crash: {s.crash}"] if s.crash else [])]
        cls = " ".join(c for c, on in (("chosen", s.index == chosen), ("failing", s.failing)) if on)
        args = f'<div class="args"><code>{escape(s.args)}</code></div>' if s.args else ""
        out.append(f'<tr id="step-{s.index}" class="{cls}"><td>{s.index}</td><td><code>{escape(s.command)}</code>'
                   f"{args}</td><td>{escape(s.outcome) or '–'}</td><td>{_list(s.rules)}</td><td>{_list(s.diff)}</td>"
                   f'<td class="problems">{_list(problems)}</td></tr>')
    out += ["</tbody></table>", "</body></html>"]
    return "\n".join(out) + "\n"
