// SPDX-License-Identifier: MIT
// kvscope logits: one forward over given ids (a one-shot prefill) and the logits of every position,
// saved as safetensors, so that another implementation (Hugging Face transformers, say) can be
// compared with kvscope bit for bit.
#include "cli_common.h"

#include "core/cache/cache_io.h"
#include "core/model/safetensors.h"
#include "core/util/error.h"

#include <iostream>

namespace kvscope::cli {
namespace {

struct LogitsOptions {
    ModelOptions model;
    std::string ids, idsFrom, out;
};

std::vector<int64_t> idsFor(const LogitsOptions& o) {
    if (o.ids.empty() == o.idsFrom.empty()) throw UsageError("give exactly one of --ids and --ids-from");
    return o.ids.empty() ? loadCache(o.idsFrom).ids() : parseIdList(o.ids, "--ids");
}

void run(const LogitsOptions& o) {
    const std::vector<int64_t> ids = idsFor(o);
    Transformer model = loadModel(o.model);
    torch::NoGradGuard noGrad;
    KvCache cache = model.newCache(static_cast<int64_t>(ids.size()));
    torch::Tensor logits = model.forward(ids, cache, Logits::All);                       // [S, V] fp32
    torch::Tensor idTensor = torch::tensor(ids, torch::TensorOptions().dtype(torch::kInt64));
    writeSafetensors(o.out, {{"logits", logits}, {"ids", idTensor}},
                     {{"model_fingerprint", model.fingerprint()}, {"dtype", dtypeName(model.dtype())}});
    std::cout << "wrote logits [" << logits.size(0) << ", " << logits.size(1) << "] of a " << dtypeName(model.dtype())
              << " forward over " << ids.size() << " ids to " << o.out << "\n";
}

}  // namespace

void addLogitsCommand(CLI::App& app) {
    auto o = std::make_shared<LogitsOptions>();
    CLI::App* cmd = app.add_subcommand("logits", "One forward over ids; save the fp32 logits of every position");
    addModelOptions(cmd, o->model);
    cmd->add_option("--ids", o->ids, "Token ids: 1,2,3");
    cmd->add_option("--ids-from", o->idsFrom, "Use the token ids of this cache file")->check(CLI::ExistingFile);
    cmd->add_option("--out", o->out, "Output .safetensors file (tensors 'logits' [S, V] F32 and 'ids' [S] I64)")
        ->required();
    cmd->callback([o] { run(*o); });
}

}  // namespace kvscope::cli
