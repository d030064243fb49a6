#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""docs/MEASUREMENTS.md's tables from the measurement files under docs/measurements/, and the file a
run of the test command leaves.

    python3 scripts/measurements.py table [--root docs/measurements] [--update docs/MEASUREMENTS.md] [--readme README.md]
    python3 scripts/measurements.py record-test-run --stages FILE --seconds S --status RC --out FILE ...

A measurement is a file, one per run, named by date and CPU kind (DATE-CPU[-what].json):
  cold-runs/*.json   what scripts/test.sh writes to build/test-run.json (record-test-run): each
                     stage's seconds, the total, the result, the CPU, the commit
  bench/*.json       `kvscope bench --json`
  **/report.json     `kvscope report --format json` of a study run (and compare.json's runs)
`table` makes one table per CPU kind of each (medians and ranges where a kind has several runs) and
--update replaces the text between the "<!-- NAME: begin/end -->" lines of that file (cold-runs,
bench, studies); --readme the README's small table of the demo and SmolLM2 studies
(readme-demo-table). So the docs never hold a hand-typed figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_markers import replace_between  # noqa: E402

# The extensions that pick kvscope's kernels (and so its bits), as core/util/version.cpp lists them.
VECTOR_FEATURES = ["avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16",
                   "amx_fp16"]
# Short names for the file names of CPU kinds met so far: (vendor, family, model) -> name.
CPU_NAMES = {("AuthenticAMD", 25, 1): "zen3", ("AuthenticAMD", 25, 33): "zen3", ("AuthenticAMD", 25, 17): "zen4",
             ("AuthenticAMD", 25, 97): "zen4", ("AuthenticAMD", 26, 2): "zen5", ("AuthenticAMD", 26, 17): "zen5",
             ("GenuineIntel", 6, 143): "sapphire-rapids", ("GenuineIntel", 6, 207): "emerald-rapids",
             ("GenuineIntel", 6, 106): "ice-lake", ("GenuineIntel", 6, 85): "skylake-x"}


# ---- what this machine is -------------------------------------------------------------------------

def cpu_fields():
    """The first processor's block of /proc/cpuinfo as {key: value}."""
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_identity():
    """cpu_model as kvscope prints it ("AMD EPYC (family 25, model 17)"), cpu_features as kvscope
    lists them, and the file-name slug of the kind."""
    f = cpu_fields()
    name, family, model = f.get("model name", "unknown CPU"), f.get("cpu family", "?"), f.get("model", "?")
    flags = set(f.get("flags", "").split())
    try:
        slug = CPU_NAMES.get((f.get("vendor_id"), int(family), int(model)))
    except ValueError:
        slug = None
    vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(f.get("vendor_id"), "cpu")
    return {"cpu_model": f"{name} (family {family}, model {model})",
            "cpu_features": " ".join(x for x in VECTOR_FEATURES if x in flags) or "no AVX2/AVX-512/AMX",
            "cpu_slug": slug or f"{vendor}-f{family}-m{model}"}


def git_commit(root):
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def record_test_run(args):
    """The test command's own measurement: written at its exit, passed or not."""
    stages = []
    for line in Path(args.stages).read_text().splitlines():
        name, result, seconds = line.split("\t")
        stages.append({"name": name, "result": result, "seconds": int(seconds)})
    failed = [s["name"] for s in stages if s["result"] != "passed"]
    debian = Path("/etc/debian_version")
    identity = cpu_identity()
    record = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "kvscope_commit": git_commit(args.root),
              "where": args.where, "presets": args.presets.split(), "fresh_build_folders": args.fresh == "yes",
              "cpu_model": identity["cpu_model"], "cpu_features": identity["cpu_features"],
              "cores": os.cpu_count(), "debian": debian.read_text().strip() if debian.exists() else None,
              "result": "passed" if args.status == 0 and not failed else
              "failed" + (f" at {failed[0]}" if failed else f" (exit {args.status})"),
              "seconds": args.seconds, "stages": stages}
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(out)
    print(f"test.sh: timings in {out}; keep them as "
          f"docs/measurements/cold-runs/{record['date']}-{identity['cpu_slug']}.json")


# ---- the tables -----------------------------------------------------------------------------------

def span(values, fmt, unit=""):
    """The median, then the range where there are several: "81% (77-84%)"."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    median = fmt(statistics.median(values)) + unit
    return median if len(values) == 1 else f"{median} ({fmt(min(values))}-{fmt(max(values))}{unit})"


def number(x):
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def percent(x):
    return f"{100 * x:.0f}"


def kind_of(record):
    model, features = record.get("cpu_model"), record.get("cpu_features")
    if not model and not features and str(record.get("where", "")).startswith("CI"):
        return "CI's machines (CI does not report their CPU)"
    return f"{model or 'CPU model not recorded'}; {features or 'features not recorded'}"


def by_kind(records):
    kinds = {}
    for path, record in sorted(records, key=lambda pr: (pr[1].get("date", ""), str(pr[0]))):
        kinds.setdefault(kind_of(record), []).append((path, record))
    return kinds


def load_dir(directory):
    return [(p, json.loads(p.read_text())) for p in sorted(Path(directory).glob("*.json"))]


def cold_run_tables(root):
    runs = load_dir(root / "cold-runs")
    if not runs:
        return "No cold run recorded yet.\n"
    out = []
    for kind, records in by_kind(runs).items():
        out += [f"#### {kind}", "",
                "| date | kvscope | where | result | total | slowest stages |",
                "|---|---|---|---|---|---|"]
        for path, r in records:
            slowest = sorted(r.get("stages", []), key=lambda s: -s["seconds"])[:3]
            # A stage's name without what it leaves out: "testing asan (core, ...)" -> "testing asan".
            stages = ", ".join(f"{s['name'].split(' (')[0]} {s['seconds']:,} s" for s in slowest) or "not recorded"
            out.append(f"| {r['date']} | {r.get('kvscope_commit') or '?'} | {r.get('where', '?')} | {r['result']} "
                       f"| {r['seconds']:,} s ({r['seconds'] / 60:.0f} min) | {stages} |")
        passed = [r["seconds"] for _, r in records if r["result"] == "passed"]
        out += ["", f"Passed runs: {len(passed)}, total {span(passed, lambda s: f'{s:,.0f}', ' s')}.", ""]
    return "\n".join(out)


BENCH_COLUMNS = [("prefill tok/s", "prefill_tokens_per_s", number, ""),
                 ("decode tok/s", "decode_tokens_per_s", number, ""),
                 ("decode, of the bound", "decode_fraction_of_bound", percent, "%"),
                 ("prefill / rebuild", "prefill_over_rebuild", lambda x: f"{x:.1f}", "x")]


def bench_tables(root):
    runs = load_dir(root / "bench")
    if not runs:
        return "No bench run recorded yet.\n"
    out = []
    for kind, records in by_kind(runs).items():
        groups = {}
        for _, r in records:
            for row in r["rows"]:
                libtorch = r.get("libtorch", "?").split(" ")[0]  # "1.13.0 (/lib/.../libtorch_cpu.so.1.13)"
                key = (os.path.basename(r.get("model", "")) or "generated", r["threads"], libtorch, row["dtype"],
                       row["kernels"])
                groups.setdefault(key, []).append(row)
        dates = sorted({r.get("date", "?") for _, r in records})
        versions = sorted({r.get("kvscope", "?") for _, r in records})
        when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
        out += [f"#### {kind}", "",
                f"{len(records)} run{'s' if len(records) > 1 else ''}, {when}; kvscope {', '.join(versions)}.", "",
                "| model | threads | libtorch | dtype, kernels | runs | " + " | ".join(c[0] for c in BENCH_COLUMNS) + " |",
                "|---|---|---|---|---|" + "---|" * len(BENCH_COLUMNS)]
        for (model, threads, libtorch, dtype, kernels), rows in groups.items():
            cells = " | ".join(span([row.get(key) for row in rows], fmt, unit) for _, key, fmt, unit in BENCH_COLUMNS)
            out.append(f"| {model} | {threads} | {libtorch} | {dtype}, {kernels} | {len(rows)} | {cells} |")
        out.append("")
    return "\n".join(out)


def study_reports(root):
    """Every study report under root: report.json files and compare.json's runs, with their CPU."""
    found = []
    # A run's own report.json before a compare.json that repeats it, so the table names the former.
    for path in sorted(root.rglob("*.json"), key=lambda p: (p.name == "compare.json", str(p))):
        if path.parent.name in ("bench", "cold-runs", "llamacpp"):
            continue
        data = json.loads(path.read_text())
        reports = data.get("runs", []) if path.name == "compare.json" else [data] if "matched" in data else []
        for report in reports:
            found.append((path, report))
    return found


def sibling_cpu_model(path):
    """A report written before reports named their CPU: the CPU of a `run --timing` file of its study."""
    for folder in (path.parent, path.parent.parent):
        for timing in sorted(folder.rglob("timing*.json")):
            model = json.loads(timing.read_text()).get("cpu_model")
            if model:
                return model
    return None


def count_of(obj, key):
    """ "k / n" of a report's table, "-" where the protocol did not run."""
    return f"{obj[key]} / {obj['n']}" if obj and obj.get("n") and key in obj else "-"


def study_tables(root):
    reports = study_reports(root)
    if not reports:
        return "No study report recorded yet.\n"
    records = []
    seen = set()
    for path, r in reports:
        key = (r.get("run"), r.get("matched", {}).get("n"), json.dumps(r.get("time")))
        if key in seen:  # compare.json repeats a run's own report
            continue
        seen.add(key)
        env = r.get("environment") or {}
        records.append((path, dict(r, cpu_model=r.get("cpu_model") or sibling_cpu_model(path),
                                   cpu_features=env.get("cpu"), date=path.relative_to(root).parts[0][:10])))
    out = []
    for kind, rows in by_kind(records).items():
        out += [f"#### {kind}", "",
                "| date | experiment | kernels | libtorch | items | suffixes differ | labels differ "
                "| 2x2 bf16 / fp32 | bridge | audit | transplant follows donor | s/item | file |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for path, r in rows:
            m = r.get("matched", {})
            cells = r.get("fixed_prefix_2x2", {})
            two = " / ".join(f"{cells[p]['disagree']}" if cells.get(p, {}).get("n") else "-" for p in ("bf16", "fp32"))
            t = r.get("time") or {}
            per_item = t.get("mean_seconds_per_item")
            out.append(
                f"| {r['date']} | {r.get('experiment', '?')} | {r.get('kernels', '?')} "
                f"| {(r.get('environment') or {}).get('libtorch', '?')} | {m.get('n') or '-'} "
                f"| {count_of(m, 'suffix_differ')} | {count_of(m, 'label_differ')} | {two} "
                f"| {count_of(r.get('bridge'), 'exact')} | {count_of(r.get('audit'), 'reproduced')} "
                f"| {count_of(r.get('transplant'), 'follows_donor')} "
                f"| {number(per_item) if per_item else '-'} | {path.relative_to(root)} |")
        out.append("")
    return "\n".join(out)


# The README's columns: (experiment, heading).
README_COLUMNS = [("demo", "demo model, torch kernels"), ("demo-invariant", "demo model, invariant"),
                  ("smollm2", "SmolLM2-135M, torch kernels"), ("smollm2-invariant", "SmolLM2-135M, invariant")]


def readme_table(root):
    """The README's small table: for each of its experiments the report with the most items (the
    newest of equals)."""
    best = {}
    for path, r in study_reports(root):
        name = r.get("experiment")
        key = ((r.get("matched") or {}).get("n", 0), path.relative_to(root).parts[0][:10])
        if name and (name not in best or key > best[name][0]):
            best[name] = (key, path, r)
    columns = [(heading, best.get(name)) for name, heading in README_COLUMNS]
    rows = [
        ("continuations split, live vs prefill", lambda r: count_of(r.get("matched"), "suffix_differ")),
        ("correctness labels differ", lambda r: count_of(r.get("matched"), "label_differ")),
        ("the same in fp32", lambda r: count_of((r.get("fixed_prefix_2x2") or {}).get("fp32"), "disagree")),
        ("transplanted caches: continuation follows the donor",
         lambda r: count_of(r.get("transplant"), "follows_donor") if (r.get("transplant") or {}).get("n") else "none split"),
        ("libtorch", lambda r: (r.get("environment") or {}).get("libtorch", "?")),
    ]
    out = ["| | " + " | ".join(heading for heading, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    for label, cell in rows:
        out.append(f"| {label} | " + " | ".join(cell(c[2]) if c else "-" for _, c in columns) + " |")
    cpus = sorted({(c[2].get("cpu_model") or sibling_cpu_model(c[1]) or "?", c[1].relative_to(root).parts[0][:10])
                   for _, c in columns if c})
    out += ["", "Measured on " + "; ".join(f"{cpu}, {date}" for cpu, date in cpus) + " ([data](docs/measurements/))."]
    return "\n".join(out) + "\n"


def table(args):
    root = Path(args.root)
    sections = {"cold-runs": cold_run_tables(root), "bench": bench_tables(root), "studies": study_tables(root)}
    if args.update:
        for marker, text in sections.items():
            replace_between(args.update, marker, text, "measurements.py", args.check)
    if args.readme:
        replace_between(args.readme, "readme-demo-table", readme_table(root), "measurements.py", args.check)
    if not args.update and not args.readme:
        for marker, text in sections.items():
            print(f"<!-- {marker} -->\n{text}", end="")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("table", help="the tables, printed or put into a document")
    t.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "docs" / "measurements"))
    t.add_argument("--update", metavar="DOC", help="replace the cold-runs, bench and studies tables in DOC")
    t.add_argument("--readme", metavar="README", help="replace its readme-demo-table")
    t.add_argument("--check", action="store_true", help="write nothing; fail where a table differs (a test)")
    r = commands.add_parser("record-test-run", help="scripts/test.sh's measurement file")
    r.add_argument("--stages", required=True, help="lines NAME<TAB>passed|failed<TAB>SECONDS")
    r.add_argument("--seconds", type=int, required=True)
    r.add_argument("--status", type=int, required=True)
    r.add_argument("--presets", default="")
    r.add_argument("--fresh", choices=["yes", "no"], default="no")
    r.add_argument("--where", default="local")
    r.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    r.add_argument("--out", required=True)
    args = parser.parse_args()
    {"table": table, "record-test-run": record_test_run}[args.command](args)


if __name__ == "__main__":
    main()
