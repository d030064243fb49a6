#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A study's speed as a Markdown table, from the JSON `kvscope run --timing FILE` writes.

    python3 scripts/study-speed-table.py docs/measurements/RUN/timing-*.json
    python3 scripts/study-speed-table.py FILES... --update docs/SMOLLM2.md

Files of one run with the same kernels and threads (the shards of a run, or a run resumed) make one
row, their items together; a file that times items of that row again makes a row of its own. --update replaces the text between the lines
"<!-- study-speed-table: begin -->" and "<!-- study-speed-table: end -->" of that file (both must be
there) with the table, so the docs never hold a hand-typed figure.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_markers import replace_between  # noqa: E402


def load(paths):
    """Rows keyed by (run, kernels, threads, libtorch, CPU, n): a file joins the first row of its key
    whose items it does not repeat (a shard, a resumed run); a file that times the same items again
    (a separate measurement) starts a row of its own."""
    rows = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        env = t.get("environment") or {}
        ids = {i["id"] for i in t["items"]}
        for n in range(len(paths)):
            key = (t["run"], t["kernels"], t["threads"], env.get("libtorch", "?"), t.get("cpu_model", "?"), n)
            row = rows.setdefault(key, {"experiment": t["experiment"], "items": [], "files": []})
            if not ids & {i["id"] for i in row["items"]}:
                break
        row["items"].extend(t["items"])
        row["files"].append(path)
    return {key: row for key, row in rows.items() if row["items"]}


def mean_of(items):
    return statistics.fmean(i["seconds"] for i in items) if items else None


def seconds(x):
    return "-" if x is None else f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def table(rows):
    lines = [
        "| experiment | kernels | threads | libtorch | CPU | items | s/item mean (median) | split items | "
        "other items | tokens/s | where the time went | timing files |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (run, kernels, threads, libtorch, cpu, _), row in sorted(rows.items(), key=lambda kv: (-len(kv[1]["items"]),) + kv[0][1:]):
        items = row["items"]
        split = [i for i in items if i["divergent"]]
        other = [i for i in items if not i["divergent"]]
        total = sum(i["seconds"] for i in items)
        tokens = sum(i["tokens"] for i in items)
        by_step = {}
        for i in items:
            for step, s in i["seconds_by_step"].items():
                by_step[step] = by_step.get(step, 0.0) + s
        shares = ", ".join(f"{step} {100 * s / total:.0f}%"
                           for step, s in sorted(by_step.items(), key=lambda kv: -kv[1]) if total > 0)
        median = statistics.median(i["seconds"] for i in items) if items else None
        lines.append(
            f"| {row['experiment']} (run {run}) | {kernels} | {threads} | {libtorch} | {cpu} | {len(items)} | "
            f"{seconds(mean_of(items))} ({seconds(median)}) | {seconds(mean_of(split))} ({len(split)}) | "
            f"{seconds(mean_of(other))} ({len(other)}) | {tokens / total if total else 0:.1f} | {shares} | "
            f"{', '.join(os.path.basename(f) for f in row['files'])} |")
    lines.append("")
    lines.append("Seconds per item: each item's own wall time; "
                 "tokens/s counts tokens as the progress line of `kvscope run` does (the trace, both "
                 "continuations and the prefilled prefix) per second of item time.")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timing", nargs="+", help="JSON files of kvscope run --timing")
    parser.add_argument("--update", metavar="DOC", help="replace the table between the markers in DOC")
    parser.add_argument("--check", action="store_true", help="with --update: write nothing, fail where it differs")
    args = parser.parse_args()
    text = table(load(args.timing))
    if args.update:
        replace_between(args.update, "study-speed-table", text, "study-speed-table", args.check)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
