// SPDX-License-Identifier: MIT
#include "experiments/manifest.h"

#include "core/cache/fingerprint.h"
#include "core/model/gguf.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"
#include "core/util/version.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <cstdlib>
#include <filesystem>

namespace kvscope::experiments {
namespace fs = std::filesystem;

std::string sha256File(const std::string& path) {
    MappedFile f(path);
    return sha256Hex(f.data(), f.size());
}

namespace {

// Weights, configs, the tokenizer and the chat template (chat_template.jinja): what decides the ids.
nlohmann::json modelDirectoryHashes(const std::string& dir) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& entry : fs::directory_iterator(dir)) {
        const auto extension = entry.path().extension();
        const bool relevant =
            entry.is_regular_file() && (extension == ".safetensors" || extension == ".json" || extension == ".jinja");
        if (relevant) files["model/" + entry.path().filename().string()] = sha256File(entry.path().string());
    }
    if (!files.contains("model/config.json")) throw ConfigError(dir + ": no config.json");
    return files;
}

}  // namespace

nlohmann::json runEnvironment(Kernels kernels) {
    nlohmann::json settings = nlohmann::json::object();
    for (const char* variable :
         {"MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY"})
        if (const char* value = std::getenv(variable); value && *value) settings[variable] = value;
    const OpenBlasCore openBlas = torchOpenBlasCore();
    const std::string blas = at::hasMKL()             ? "MKL"
                             : !openBlas.name.empty() ? "OpenBLAS " + openBlas.name
                                                      : "libtorch's own";
    const OneDnnIsa oneDnn = torchOneDnnIsa();
    nlohmann::json environment = {
        {"libtorch", libtorchVersion()},
        {"fp32_products", blas},
        {"bf16_products", oneDnn.name.empty() ? "oneDNN (built in)" : "oneDNN " + oneDnn.name},
        {"cpu", cpuVectorFeatures()},
        {"settings", settings}};
    if (!isInvariant(kernels)) environment["threads"] = at::get_num_threads();
    return environment;
}

std::string environmentText(const nlohmann::json& e) {
    if (!e.is_object()) return "an environment kvscope did not record (a run of kvscope 0.2 or older)";
    auto field = [&](const char* key) {
        return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : "?";
    };
    std::string text = "libtorch " + field("libtorch") + ", fp32 on " + field("fp32_products") + ", bf16 on " +
                       field("bf16_products") + ", CPU " + field("cpu");
    if (e.contains("threads")) text += ", " + e["threads"].dump() + (e["threads"] == 1 ? " thread" : " threads");
    if (e.contains("settings") && e["settings"].is_object())
        for (const auto& [variable, value] : e["settings"].items()) text += ", " + variable + "=" + value.dump();
    return text;
}

nlohmann::json environmentOf(const nlohmann::json& manifest) {
    const nlohmann::json::json_pointer at("/identity/environment");
    return manifest.contains(at) ? manifest[at] : nlohmann::json();
}

bool sameInputs(const nlohmann::json& a, const nlohmann::json& b) {
    nlohmann::json x = a.at("identity"), y = b.at("identity");
    x.erase("environment");
    y.erase("environment");
    return x == y;
}

nlohmann::json modelFileHashes(const std::string& model) {
    // A GGUF file holds the weights, the tokenizer and the chat template.
    if (isGgufPath(model) && fs::is_regular_file(model))
        return {{"model/" + fs::path(model).filename().string(), sha256File(model)}};
    if (!fs::is_directory(model)) throw ConfigError(model + ": neither a model directory nor a .gguf file");
    return modelDirectoryHashes(model);
}

nlohmann::json buildManifest(const ExperimentConfig& config) {
    nlohmann::json files = modelFileHashes(config.modelDir);
    files["dataset/" + fs::path(config.datasetPath).filename().string()] = sha256File(config.datasetPath);

    nlohmann::json resolved = config.toJson();
    resolved["model"]["dir"] = fs::path(config.modelDir).filename().string();
    resolved["dataset"]["path"] = fs::path(config.datasetPath).filename().string();
    resolved.erase("source");
    return {{"identity",
             {{"config", resolved},
              {"files", files},
              {"kvscope_version", kvscopeVersion()},
              {"environment", runEnvironment(config.kernels)}}},
            {"paths", {{"experiment", config.sourcePath}, {"model", config.modelDir}, {"dataset", config.datasetPath}}},
            {"machine", {{"cpu_model", cpuModelName()}, {"libtorch_library", libtorchLibraryPath()}}}};
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
    if (a.value("environment", nlohmann::json()) != b.value("environment", nlohmann::json()))
        return "the environment that decides its bits changed: the run has " + environmentText(environmentOf(before)) +
               "; this process has " + environmentText(environmentOf(after));
    if (a["kvscope_version"] != b["kvscope_version"]) return "kvscope version changed";
    return "the configuration changed";
}

}  // namespace kvscope::experiments
