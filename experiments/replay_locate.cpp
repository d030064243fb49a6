// SPDX-License-Identifier: MIT
#include "experiments/replay_locate.h"

#include "experiments/protocols.h"

#include "core/cache/constructions.h"
#include "core/decode/teacher_forced.h"
#include "core/util/error.h"

#include <optional>

namespace kvscope::experiments {

namespace {
Construction constructionOf(const ForcedReference& r, int64_t promptLength) {
    switch (r.kind) {
    case ForcedReference::Kind::Prefill: return {Construction::Kind::Prefill, -1};
    case ForcedReference::Kind::Live: return {Construction::Kind::Incremental, promptLength};
    case ForcedReference::Kind::Chunked: return {Construction::Kind::Chunked, r.chunk};
    }
    return {};
}
}  // namespace

LocatorReport locateReplayStep(const Transformer& model, const ItemRecord& item, int64_t step, const std::string& a,
                               const std::string& b) {
    const std::vector<int64_t>& prompt = storedTrajectory(item, "prompt", "the ledger");
    const std::vector<int64_t>& output = storedTrajectory(item, "output", "the ledger");
    if (step < 0 || step >= static_cast<int64_t>(output.size()))
        throw UsageError("item '" + item.itemId + "': step " + std::to_string(step) + " is outside its " +
                         std::to_string(output.size()) + " output tokens");
    const std::vector<int64_t> ids = concat(prompt, {output.begin(), output.begin() + step});
    const auto P = static_cast<int64_t>(prompt.size());
    return locateDivergence(model, ids, P, constructionOf(ForcedReference::parse(a), P),
                            constructionOf(ForcedReference::parse(b), P));
}

LocatedStep locateReplayStep(const StepLocateRequest& request) {
    const ReplayRequest& replay = request.replay;
    const Ledger ledger(replay.ledgerPath, LedgerAccess::ReadOnly);
    const RunInfo run = ledger.run(replay.runId);
    if (!isImportedRun(run.manifest))
        throw UsageError(replay.ledgerPath + ": run " + replay.runId + " is a study, not imported trajectories");
    std::optional<ItemRecord> item;
    for (ItemRecord& r : ledger.items(replay.runId))
        if (r.itemId == request.itemId) item = std::move(r);
    if (!item) throw UsageError(replay.ledgerPath + ": run " + replay.runId + " has no item '" + request.itemId + "'");
    const auto [a, b] = referencesToLocate({replay.label(), request.against});
    const Transformer model = loadReplayModel(importedModelPath(run, replay.modelPath), replay);
    return {request.itemId, a, b, request.step, locateReplayStep(model, *item, request.step, a, b)};
}

}  // namespace kvscope::experiments
