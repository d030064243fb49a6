// SPDX-License-Identifier: MIT
#include "experiments/manifest.h"

#include "core/cache/fingerprint.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"
#include "core/util/version.h"

#include <filesystem>

namespace kvscope::experiments {
namespace fs = std::filesystem;

std::string sha256File(const std::string& path) {
    MappedFile f(path);
    return sha256Hex(f.data(), f.size());
}

nlohmann::json buildManifest(const ExperimentConfig& config) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& entry : fs::directory_iterator(config.modelDir)) {
        const std::string name = entry.path().filename().string();
        // Weights, configs, the tokenizer and the chat template (chat_template.jinja): what decides the ids.
        const auto extension = entry.path().extension();
        const bool relevant =
            entry.is_regular_file() && (extension == ".safetensors" || extension == ".json" || extension == ".jinja");
        if (relevant) files["model/" + name] = sha256File(entry.path().string());
    }
    if (!files.contains("model/config.json")) throw ConfigError(config.modelDir + ": no config.json");
    files["dataset/" + fs::path(config.datasetPath).filename().string()] = sha256File(config.datasetPath);
    nlohmann::json resolved = config.toJson();
    resolved["model"]["dir"] = fs::path(config.modelDir).filename().string();
    resolved["dataset"]["path"] = fs::path(config.datasetPath).filename().string();
    resolved.erase("source");
    return {
        {"identity", {{"config", resolved}, {"files", files}, {"kvscope_version", kvscopeVersion()}}},
        {"paths", {{"experiment", config.sourcePath}, {"model", config.modelDir}, {"dataset", config.datasetPath}}}};
}

std::string runIdOf(const nlohmann::json& manifest) {
    const std::string text = manifest.at("identity").dump();
    return sha256Hex(text.data(), text.size()).substr(0, 16);
}

std::string describeManifestChange(const nlohmann::json& before, const nlohmann::json& after) {
    const auto& a = before.at("identity");
    const auto& b = after.at("identity");
    if (a == b) return "";
    for (auto it = b["files"].begin(); it != b["files"].end(); ++it)
        if (!a["files"].contains(it.key()) || a["files"][it.key()] != it.value())
            return "file " + it.key() + " changed";
    for (auto it = a["files"].begin(); it != a["files"].end(); ++it)
        if (!b["files"].contains(it.key())) return "file " + it.key() + " is gone";
    if (a["kvscope_version"] != b["kvscope_version"]) return "kvscope version changed";
    return "the configuration changed";
}

}  // namespace kvscope::experiments
