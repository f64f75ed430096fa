"""Record one benchmark figure in bench/results/figures.json, stamped with today's date and the commit.

    python bench/record.py ID "FIGURE"        # replace the figure of an existing row

docs/benchmarks.md is generated from that file (`qlwf regenerate`); the row's other fields (what is
measured, the command) are edited in the file itself.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

FIGURES = Path(__file__).resolve().parent / "results" / "figures.json"


def record(figure_id: str, figure: str, path: Path = FIGURES) -> None:
    """Replace the figure of row `figure_id`, stamped with today's date and the checkout's commit."""
    data = json.loads(path.read_text(encoding="utf-8"))
    row = next((r for r in data["figures"] if r["id"] == figure_id), None)
    if row is None:
        known = ", ".join(r["id"] for r in data["figures"])
        raise SystemExit(f"record: no figure {figure_id!r} in {path} (known: {known})")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=FIGURES.parent, capture_output=True,
                            text=True, check=False).stdout.strip()
    row.update(figure=figure, measured=datetime.date.today().isoformat(), commit=commit)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    record(sys.argv[1], sys.argv[2])
