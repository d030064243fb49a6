// SPDX-License-Identifier: MIT
#pragma once
// The frozen manifest of a run: the resolved configuration and the SHA-256 of every input file
// (model files, tokenizer, dataset) plus the kvscope version. Its "identity" part (no absolute
// paths, so shards on other machines agree) determines the run id; "paths" says where the inputs
// were, for audits and resumes.
#include "experiments/experiment_config.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kvscope::experiments {

nlohmann::json buildManifest(const ExperimentConfig& config);
std::string runIdOf(const nlohmann::json& manifest);  // first 16 hex digits of sha256(identity)
// Names the first input whose hash differs between two manifests, or "" when identical.
std::string describeManifestChange(const nlohmann::json& before, const nlohmann::json& after);
std::string sha256File(const std::string& path);

}  // namespace kvscope::experiments
