// SPDX-License-Identifier: MIT
#pragma once
// An experiment file (TOML), resolved: every path absolute, every default filled in. Unknown keys
// anywhere are errors (a typo must not silently change a study).
//
//   name = "smoke"
//   [model]      dir (a model folder or .gguf file) | catalog (a fetched model: "smollm2"), dtypes = ["bf16"] (first = main precision), device = "cpu", threads = 0,
//                kernels = "torch" | "invariant" (batch-invariant kernels: the remedy, CPU only)
//   [model.generate]  arch, seed, hidden_size, layers, heads, kv_heads, intermediate_size: when
//                present and `dir` has no config.json, a deterministic test model is written there
//   [dataset]    path (JSONL: id, prompt | messages, answer, optional prefix_ids), chat_template =
//                "auto" (the checkpoint's own template; the text as is where it has none) | "plain" | "chatml" | "llama3"
//   [generation] max_new_tokens, stop = [...], ignore_eos = false, temperature, top_k, top_p, seed
//   [boundary]   rule = "marker" | "offset" | "fraction", marker, offset, fraction
//   [answer]     extract = "last_number" | "regex" | "boxed", regex
//   [protocols]  run = ["matched", "fixed_prefix_2x2", "bridge", "audit", "transplant", "localize"] (the
//                default; "batch" runs only when named), precisions = ["bf16", "fp32"] (the 2x2's)
//   [transplant] layers = "all", kv = "kv", selection = "all" | "sample", sample_fraction, seed
//   [batch]      sizes = [1, 2, 8], padding = "left"
#include "experiments/dataset.h"

#include "core/cache/kv_parts.h"
#include "core/decode/sampler.h"
#include "core/model/numerics.h"
#include "core/text/chat_template.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

namespace kvscope::experiments {

// The closed choices of an experiment file, with their spelling there and in manifests.
enum class BoundaryRule { Marker, Offset, Fraction };
enum class TransplantSelection { All, Sample };  // Sample: an outcome-blind seeded fraction of items
// What an item runs ([protocols] run); protocols.h says what each one does.
enum class Protocol { Matched, FixedPrefix2x2, Bridge, Audit, Transplant, Localize, Batch };
std::string choiceName(BoundaryRule rule);  // "marker" | "offset" | "fraction"
std::string choiceName(TransplantSelection selection);  // "all" | "sample"
// "matched" | "fixed_prefix_2x2" | "bridge" | "audit" | "transplant" | "localize" | "batch"; also the
// names of their results in ledgers and reports
std::string choiceName(Protocol protocol);
std::string choiceName(ChatTemplate chatTemplate);  // "auto" | "plain" | "chatml" | "llama3", as core spells them
std::string choiceName(KvParts parts);  // "k" | "v" | "kv", as core spells them

struct ExperimentConfig {
    std::string name;
    std::string sourcePath;  // the .toml file
    std::string modelDir;  // a model folder or .gguf file
    std::string modelCatalog;  // [model] catalog = NAME: modelDir is where `kvscope fetch NAME` puts it
    std::vector<std::string> dtypes = {"bf16"};
    std::string device = "cpu";
    Kernels kernels = Kernels::Torch;
    int threads = 0;
    bool generateModel = false;  // [model.generate] present
    nlohmann::json generateSpec;  // its keys, for the manifest
    std::string datasetPath;
    ChatTemplate chatTemplate = ChatTemplate::Auto;  // the checkpoint's own; the text as is where it has none
    int64_t maxNewTokens = 64;
    std::vector<std::string> stopStrings;
    bool ignoreEos = false;
    SamplingParams sampling;
    BoundaryRule boundaryRule = BoundaryRule::Marker;
    std::string boundaryMarker = "\nAnswer:";
    int64_t boundaryOffset = 16;
    double boundaryFraction = 0.5;
    AnswerExtraction answerExtract = AnswerExtraction::LastNumber;
    std::string answerRegex;
    std::set<Protocol> protocols;
    // fixed_prefix_2x2's precisions (parsePrecision names): the study's bf16 x fp32 unless told.
    std::vector<std::string> precisions = {"bf16", "fp32"};
    // The batch protocol's batch sizes (sorted, 1 among them: the item alone) and padding side.
    std::vector<int64_t> batchSizes = {1, 2, 8};
    std::string batchPadding = "left";
    std::string transplantLayers = "all";
    KvParts transplantParts = KvParts::Both;
    TransplantSelection transplantSelection = TransplantSelection::All;
    double transplantSampleFraction = 1.0;
    std::uint64_t transplantSeed = 0;

    static ExperimentConfig load(const std::string& path);  // throws ConfigError naming file and key
    // Writes the [model.generate] test model into modelDir unless it already holds one.
    void generateModelIfMissing() const;
    bool runs(Protocol protocol) const { return protocols.count(protocol) != 0; }
    // The protocols' names in alphabetical order, as manifests list them (a run's id hashes them).
    std::vector<std::string> protocolNames() const;
    Numerics numerics() const {
        Numerics n;
        n.kernels = kernels;
        return n;
    }
    nlohmann::json toJson() const;  // the resolved configuration, for the manifest
};

const std::vector<Protocol>& allProtocols();  // the default `run`: the study's protocols
const std::vector<Protocol>& knownProtocols();  // those and the ones run only when named (batch)

}  // namespace kvscope::experiments
