// SPDX-License-Identifier: MIT
#pragma once
// The frozen manifest of a run: the resolved configuration, the SHA-256 of every input file (model
// files, tokenizer, dataset), the kvscope version and the environment that decides the run's bits
// (runEnvironment). Its "identity" part (no absolute paths, so shards on other machines agree)
// determines the run id; "paths" says where the inputs were, for audits and resumes; "machine" what
// ran it, for readers (not part of the identity).
#include "experiments/experiment_config.h"

#include "core/model/numerics.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kvscope::experiments {

nlohmann::json buildManifest(const ExperimentConfig& config);

// What decides a run's bits beside its inputs, as this process runs: the libtorch and the libraries
// its products run on (BLAS for fp32, oneDNN for bf16), the CPU's vector extensions (they pick those
// libraries' kernels and kvscope's), the settings that override their choice (MKL_CBWR,
// ONEDNN_MAX_CPU_ISA, OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY) and, with torch kernels, the thread
// count (it splits their reductions; invariant kernels give the same bits on any count).
nlohmann::json runEnvironment(Kernels kernels);
// One line for messages and reports: "libtorch 2.13.0, fp32 on MKL, bf16 on oneDNN (built in), CPU avx2 ..., 2 threads".
std::string environmentText(const nlohmann::json& environment);
// The environment a manifest records (null for a run from before kvscope recorded it).
nlohmann::json environmentOf(const nlohmann::json& manifest);
// Whether two manifests describe the same experiment on the same inputs, whatever environment ran them.
bool sameInputs(const nlohmann::json& a, const nlohmann::json& b);
std::string runIdOf(const nlohmann::json& manifest);  // first 16 hex digits of sha256(identity)
// Names the first input whose hash differs between two manifests (or the environment, naming both
// sides), or "" when identical.
std::string describeManifestChange(const nlohmann::json& before, const nlohmann::json& after);
std::string sha256File(const std::string& path);
// {"model/NAME": sha256} of what decides a model's ids and bits: a GGUF file, or a directory's
// weights, configs, tokenizer and chat template. ConfigError for anything else.
nlohmann::json modelFileHashes(const std::string& model);

}  // namespace kvscope::experiments
