#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The figures of scripts/bench-vs-llamacpp.sh: ratios within one run, and the docs table from its files.

  bench_vs_llamacpp.py collate DIR --rounds N --threads N --model M --kvscope-version V --llamacpp-package P
                       --llamacpp-commit C --out FILE
      reads DIR/llamacpp-R.json (llama-bench -o json) and DIR/kvscope-R.json (kvscope bench --json)
      of rounds 1..N, prints each round's ratios and their median and range, writes FILE (JSON).
  bench_vs_llamacpp.py show FILE
      prints a collated FILE's rounds and summary again.
  bench_vs_llamacpp.py table FILE... [--update DOC] [--readme README]
      one Markdown table per CPU kind met (model and instruction sets), a row per file and kernel set;
      --update replaces DOC's text between <!-- llamacpp-table: begin --> and <!-- llamacpp-table: end
      -->, --readme README's between <!-- llamacpp-latest: begin/end --> with the newest file's
      bf16 invariant-kernel row. Without either, prints the tables.

A ratio is kvscope's tokens per second over llama.cpp's, the same dtype, both measured in the same round.
"Of the bound" is tokens per second over what the round's bandwidth probe allows for one decode step's
weight bytes (kvscope bench's figure for that dtype; llama.cpp reads the same weights).
"""
import argparse
import json
import re
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_markers import replace_between  # noqa: E402
from measurements import cpu_fields  # noqa: E402

MODELS = {"qwen-shape": "random Qwen2.5-0.5B shape (kvscope bench's), F32 and BF16 GGUFs of the same values",
          "smollm2": "SmolLM2-135M-Instruct (tests/data/smollm2-135m-instruct), F32 and BF16 GGUFs of the same values"}
DTYPES = {"F32": "fp32", "BF16": "bf16"}  # the GGUF type in llama-bench's model file name -> kvscope's
# The targets (2 threads, Qwen2.5-0.5B shape), checked in every round.
TARGETS = {
    "invariant": [("decode_vs_llamacpp", 1.0), ("decode_of_bound", 0.8), ("prefill_vs_llamacpp", 1.5)],
    "torch": [("decode_vs_llamacpp", 0.8)],
}
RATIOS = ["prefill_vs_llamacpp", "decode_vs_llamacpp", "decode_of_bound", "llamacpp_decode_of_bound"]
INSTRUCTION_SETS = ["avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"]


def cpu_identity():
    """The model name, family/model numbers and the instruction sets that decide either engine's kernels."""
    fields = cpu_fields()
    flags = set(fields.get("flags", "").split())
    return {"cpu_model": fields.get("model name", "unknown"), "cpu_family": fields.get("cpu family"),
            "cpu_model_number": fields.get("model"),
            "instruction_sets": [f for f in INSTRUCTION_SETS if f in flags]}


def llamacpp_figures(path):
    """{dtype: {prefill_tokens_per_s, decode_tokens_per_s}} from one llama-bench JSON file."""
    figures = {}
    for test in json.loads(path.read_text()):
        match = re.search(r"\.(F32|BF16)\.gguf$", test["model_filename"])
        if not match:
            sys.exit(f"{path}: model_filename {test['model_filename']!r}: expected a .F32.gguf or .BF16.gguf file")
        key = "prefill_tokens_per_s" if test["n_gen"] == 0 else "decode_tokens_per_s"
        figures.setdefault(DTYPES[match.group(1)], {})[key] = test["avg_ts"]
    return figures


def round_figures(directory, number):
    llamacpp = llamacpp_figures(directory / f"llamacpp-{number}.json")
    bench = json.loads((directory / f"kvscope-{number}.json").read_text())
    rows, ratios = [], []
    for row in bench["rows"]:
        theirs = llamacpp[row["dtype"]]
        bound = row["bandwidth_bound_tokens_per_s"]
        rows.append({k: row[k] for k in ("dtype", "kernels", "prefill_tokens_per_s", "decode_tokens_per_s",
                                         "bandwidth_bound_tokens_per_s")})
        ratios.append({"dtype": row["dtype"], "kernels": row["kernels"],
                       "prefill_vs_llamacpp": row["prefill_tokens_per_s"] / theirs["prefill_tokens_per_s"],
                       "decode_vs_llamacpp": row["decode_tokens_per_s"] / theirs["decode_tokens_per_s"],
                       "decode_of_bound": row["decode_tokens_per_s"] / bound,
                       "llamacpp_decode_of_bound": theirs["decode_tokens_per_s"] / bound})
    return {"round": number, "order": "llama.cpp first" if number % 2 else "kvscope first",
            "bandwidth": {k: bench[k] for k in ("read_bandwidth_gb_per_s", "triad_bandwidth_gb_per_s",
                                                 "bound_bandwidth_gb_per_s")},
            "llamacpp": llamacpp, "kvscope": rows, "ratios": ratios}, bench


def summarize(rounds):
    """Per dtype and kernel set: each ratio's median and range over the rounds, and the targets."""
    summary = []
    for first in rounds[0]["ratios"]:
        dtype, kernels = first["dtype"], first["kernels"]
        values = {name: [r[name] for rnd in rounds for r in rnd["ratios"]
                         if r["dtype"] == dtype and r["kernels"] == kernels] for name in RATIOS}
        entry = {"dtype": dtype, "kernels": kernels}
        for name, series in values.items():
            entry[name] = {"median": statistics.median(series), "min": min(series), "max": max(series)}
        entry["targets"] = [{"ratio": name, "at_least": floor, "every_round": True,
                             "met": min(values[name]) >= floor} for name, floor in TARGETS.get(kernels, [])]
        summary.append(entry)
    return summary


def span(figure, percent=False):
    if percent:
        return f"{100 * figure['median']:.0f}% ({100 * figure['min']:.0f}-{100 * figure['max']:.0f}%)"
    return f"{figure['median']:.2f}x ({figure['min']:.2f}-{figure['max']:.2f})"


def print_run(result):
    print(f"# kvscope vs llama.cpp: {result['cpu_model']} ({' '.join(result['instruction_sets'])}), "
          f"{result['threads']} threads")
    print(f"{result['model']}; {result['kvscope_version']}, libtorch {result['libtorch']}; llama.cpp "
          f"{result['llamacpp_commit']} ({result['llamacpp_package']})\n")
    for rnd in result["rounds"]:
        bw = rnd["bandwidth"]
        print(f"round {rnd['round']} ({rnd['order']}; bound {bw['bound_bandwidth_gb_per_s']:.1f} GB/s): " + "; ".join(
            f"{r['dtype']} {r['kernels']} prefill {r['prefill_vs_llamacpp']:.2f}x decode "
            f"{r['decode_vs_llamacpp']:.2f}x ({100 * r['decode_of_bound']:.0f}% of bound)" for r in rnd["ratios"]))
    print("\n| | prefill / llama.cpp | decode / llama.cpp | decode, of the bound | llama.cpp decode, of the bound "
          "| targets |\n|---|---|---|---|---|---|")
    for s in result["summary"]:
        targets = ", ".join(f"{t['ratio']} >= {t['at_least']}: {'met' if t['met'] else 'NOT met'}"
                            for t in s["targets"])
        print(f"| {s['dtype']}, {s['kernels']} kernels | {span(s['prefill_vs_llamacpp'])} "
              f"| {span(s['decode_vs_llamacpp'])} | {span(s['decode_of_bound'], True)} "
              f"| {span(s['llamacpp_decode_of_bound'], True)} | {targets} |")


def collate(args):
    rounds, benches = zip(*(round_figures(args.dir, n) for n in range(1, args.rounds + 1)))
    bench = benches[0]
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), **cpu_identity(),
              "cpu_features": bench["cpu_features"], "threads": args.threads,
              "kvscope_version": args.kvscope_version, "libtorch": bench["libtorch"],
              "llamacpp_package": args.llamacpp_package, "llamacpp_commit": args.llamacpp_commit,
              "model_name": args.model, "model": MODELS[args.model],
              "prompt_tokens": 512, "llamacpp_decode_tokens": 64, "kvscope_decode_tokens": 32,
              "rounds": list(rounds), "summary": summarize(rounds)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print_run(result)


def cpu_kind(result):
    return f"{result['cpu_model']} (family {result['cpu_family']} model {result['cpu_model_number']}; " \
           f"{' '.join(result['instruction_sets'])})"


def tables(results):
    """One Markdown table per CPU kind, oldest file first."""
    kinds = {}
    for result in sorted(results, key=lambda r: (r["date"], r.get("model_name", "qwen-shape"))):
        kinds.setdefault(cpu_kind(result), []).append(result)
    out = []
    for kind, runs in kinds.items():
        out += [f"#### {kind}", "",
                "| date | model | kvscope | llama.cpp | threads | dtype, kernels | prefill / llama.cpp "
                "| decode / llama.cpp | decode, of the bound | llama.cpp decode, of the bound |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for result in runs:
            for s in result["summary"]:
                out.append(f"| {result['date']} | {result.get('model_name', 'qwen-shape')} | {result['kvscope_version']} "
                           f"| {result['llamacpp_commit']} "
                           f"| {result['threads']} | {s['dtype']}, {s['kernels']} | {span(s['prefill_vs_llamacpp'])} "
                           f"| {span(s['decode_vs_llamacpp'])} | {span(s['decode_of_bound'], True)} "
                           f"| {span(s['llamacpp_decode_of_bound'], True)} |")
        out.append("")
    return "\n".join(out)


def latest_row(results):
    newest = max((r for r in results if r.get("model_name", "qwen-shape") == "qwen-shape"), key=lambda r: r["date"])
    row = next(s for s in newest["summary"] if s["dtype"] == "bf16" and s["kernels"] == "invariant")
    return (f"Against llama.cpp {newest['llamacpp_commit']} ({newest['date']}, {newest['cpu_model']}, "
            f"{newest['threads']} threads, Qwen2.5-0.5B shape, bf16, invariant kernels): prefill "
            f"{span(row['prefill_vs_llamacpp'])}, decode {span(row['decode_vs_llamacpp'])}, decode at "
            f"{span(row['decode_of_bound'], True)} of the memory bound (llama.cpp "
            f"{span(row['llamacpp_decode_of_bound'], True)}).")


def table(args):
    results = [json.loads(f.read_text()) for f in args.files]
    if args.update:
        replace_between(args.update, "llamacpp-table", tables(results), "bench_vs_llamacpp", args.check)
    if args.readme:
        replace_between(args.readme, "llamacpp-latest", latest_row(results), "bench_vs_llamacpp", args.check)
    if not args.update and not args.readme:
        print(tables(results), end="")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("collate")
    c.add_argument("dir", type=Path)
    c.add_argument("--rounds", type=int, required=True)
    c.add_argument("--threads", type=int, required=True)
    c.add_argument("--model", choices=list(MODELS), required=True)
    c.add_argument("--kvscope-version", required=True)
    c.add_argument("--llamacpp-package", required=True)
    c.add_argument("--llamacpp-commit", required=True)
    c.add_argument("--out", type=Path, required=True)
    commands.add_parser("show").add_argument("file", type=Path)
    t = commands.add_parser("table")
    t.add_argument("files", type=Path, nargs="+")
    t.add_argument("--update", type=Path)
    t.add_argument("--readme", type=Path)
    t.add_argument("--check", action="store_true", help="write nothing; fail where a table differs (a test)")
    args = parser.parse_args()
    if args.command == "collate":
        collate(args)
    elif args.command == "show":
        print_run(json.loads(args.file.read_text()))
    else:
        table(args)


if __name__ == "__main__":
    main()
