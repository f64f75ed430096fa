"""`qlwf diff --base REF|PATH`: the behaviours a model change adds, removes or alters
(qlwf/review/model_diff.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from qlwf.cli.argtypes import integer, output_dir
from qlwf.review.model_diff import DIFF_WORKFLOW_SCOPES

MAX_K = 4  # K = 3 is the explorer manifest's largest scope; 4 is already a long run


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "diff", help="compare the working tree's model with another revision's: tables, behaviours, proofs, oracle",
        description="Build the model at a git revision (or a directory holding another copy of the repository) "
                    "and compare it with the working tree's over the explorer's small scope: rule tables row by "
                    "row, every reachable (state, command) whose outcome or next state differs, grouped with a "
                    "shortest witness trace each, proof status per property and oracle answers on the examples "
                    "and corpus snapshots. Prints a Markdown report (or --json).",
        epilog="exit codes: 0 no difference; 1 a difference; 2 bad input (not a repository, unknown revision, "
               "bad K, a model that cannot be evaluated)")
    p.add_argument("--base", required=True, metavar="REF|PATH",
                   help="a git revision of the repository, or a directory holding another copy of it")
    p.add_argument("--repo", metavar="DIR", help="the working tree to compare (default: the repository of the "
                   "current directory)")
    p.add_argument("--max-steps", type=integer(1, MAX_K), default=2, metavar="K",
                   help=f"DAG shapes of 1..K steps (default 2, at most {MAX_K})")
    p.add_argument("--shape", type=_shape_name, action="append", metavar="NAME",
                   help="explore only this shape, e.g. '2:a>b' (repeatable; names as `qlwf explore` prints them, "
                        "or any relabelling)")
    p.add_argument("--workflows", action="append", metavar="WxSHAPE", dest="workflow_scopes",
                   help="also explore W Runs of the shape side by side, e.g. '3x1:-' (repeatable; default "
                        f"{', '.join(DIFF_WORKFLOW_SCOPES)}; 'none' for none)")
    p.add_argument("--reduction", choices=("runs", "none"), default="runs",
                   help="'runs' (default) takes the states of several Runs up to permutations of the Runs; 'none' "
                        "keeps them apart (docs/explorer-reduction.md)")
    p.add_argument("--bound", type=integer(1, MAX_K), default=2, metavar="N", help="proof bound N (default 2)")
    p.add_argument("--prove-only", action="append", metavar="NAME",
                   help="only these proof properties (fnmatch pattern as for `qlwf prove --only`; repeatable)")
    p.add_argument("--no-proofs", action="store_true", help="do not run the proofs (reported as not run)")
    p.add_argument("--no-oracle", action="store_true", help="do not compare oracle answers (reported as not run)")
    p.add_argument("--witness-dir", type=output_dir, default="reports/diff", metavar="DIR",
                   help="where witness traces are written (default reports/diff; an earlier run's diff-NN-*.json there "
                        "are replaced)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of Markdown")
    p.set_defaults(func=main)


def _shape_name(text: str) -> str:
    """The explorer's own name for the shape `text` describes (both models are asked by that name)."""
    from qlwf.conformance.checkers.explore import parse_shape, shape_name

    try:
        return shape_name(parse_shape(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _scopes(given: list[str] | None) -> tuple[str, ...]:
    if given is None:
        return DIFF_WORKFLOW_SCOPES
    return tuple(dict.fromkeys(name for name in given if name != "none"))


def main(args: argparse.Namespace) -> int:
    from qlwf.review.model_diff import DumpError, Options, diff
    from qlwf.review.report import render_markdown
    from qlwf.review.sources import DiffInputError, base_tree, head_tree, repository_root

    opts = Options(max_steps=args.max_steps, shapes=args.shape, proofs_bound=None if args.no_proofs else args.bound,
                   proofs_only=args.prove_only, oracle=not args.no_oracle, witness_dir=Path(args.witness_dir),
                   workflow_scopes=_scopes(args.workflow_scopes), swap_runs=args.reduction == "runs")
    try:
        repo: Path | None
        if args.repo is not None:
            repo = Path(args.repo).resolve()
            if not repo.is_dir():
                raise DiffInputError(f"{args.repo}: no such directory")
            git_repo = _git_root_or_none(repo)
        else:
            repo = git_repo = repository_root(Path.cwd())
        head = head_tree(repo)
        with base_tree(git_repo, args.base) as base:
            report = diff(base, head, opts)
    except DiffInputError as e:
        print(f"qlwf diff: {e}", file=sys.stderr)
        return 2
    except DumpError as e:
        print(f"qlwf diff: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        sys.stdout.write(render_markdown(report))
    return 0 if report.identical else 1


def _git_root_or_none(path: Path) -> Path | None:
    from qlwf.review.sources import DiffInputError, repository_root
    try:
        return repository_root(path)
    except DiffInputError:
        return None
