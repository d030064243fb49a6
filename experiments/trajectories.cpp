// SPDX-License-Identifier: MIT
#include "experiments/trajectories.h"

#include "experiments/manifest.h"
#include "experiments/report.h"

#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/stats/stats.h"
#include "core/util/error.h"
#include "core/util/json_ids.h"
#include "core/util/version.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace kvscope::experiments {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kDeltaThresholds[3] = {0.01, 0.1, 1.0};
constexpr int kBootstrapResamples = 2000;
constexpr std::uint64_t kBootstrapSeed = 52;

// One line's fields, read with errors that name the file, the line and the field.
class LineFields {
public:
    LineFields(const json& object, std::string where, int64_t vocabSize)
        : object_(object), where_(std::move(where)), vocabSize_(vocabSize) {}

    [[noreturn]] void fail(const std::string& field, const std::string& message) const {
        throw FormatError(where_ + ": field '" + field + "' " + message);
    }
    const json* optional(const char* key) const {
        const auto it = object_.find(key);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }
    const json& required(const char* key) const {
        const json* v = optional(key);
        if (!v) fail(key, "is missing");
        return *v;
    }
    std::string text(const char* key) const {
        const json& v = required(key);
        if (!v.is_string() || v.get<std::string>().empty()) fail(key, "must be a non-empty string");
        return v.get<std::string>();
    }
    std::vector<int64_t> ids(const char* key) const {
        const json& list = required(key);
        std::vector<int64_t> out = tokenIdsFromJson(list, where_ + ": field '" + key + "'");
        if (out.empty()) fail(key, "must hold at least one token id");
        for (std::size_t k = 0; k < out.size(); ++k) checkId(key, "entry " + std::to_string(k), out[k]);
        return out;
    }
    void checkId(const std::string& field, const std::string& entry, int64_t id) const {
        if (id >= vocabSize_)
            fail(field, entry + " is " + std::to_string(id) + ", outside the model's " + std::to_string(vocabSize_) +
                            "-token vocabulary");
    }
    // A log-probability: a finite number <= 0 (JSON null is how Python's and nlohmann's writers
    // spell NaN).
    double logprob(const std::string& field, const std::string& entry, const json& v) const {
        if (v.is_null()) fail(field, entry + " is null: NaN is not a log-probability");
        if (!v.is_number()) fail(field, entry + " must be a number, got " + v.dump().substr(0, 40));
        const double x = v.get<double>();
        if (!std::isfinite(x)) fail(field, entry + " must be finite");
        if (x > 0) fail(field, entry + " is " + v.dump() + ": a log-probability is never positive");
        return x;
    }
    std::optional<std::vector<double>> logprobs(std::size_t tokens) const {
        const json* list = optional("logprobs");
        if (!list) return std::nullopt;
        if (!list->is_array()) fail("logprobs", "must be null or a list of numbers");
        checkLength("logprobs", *list, tokens);
        std::vector<double> out;
        for (std::size_t k = 0; k < list->size(); ++k)
            out.push_back(logprob("logprobs", "entry " + std::to_string(k), (*list)[k]));
        return out;
    }
    std::optional<std::vector<EngineRecord::TopEntries>> topLogprobs(std::size_t tokens) const {
        const json* list = optional("top_logprobs");
        if (!list) return std::nullopt;
        if (!list->is_array()) fail("top_logprobs", "must be null or a list (per token) of [[id, logprob], ...]");
        checkLength("top_logprobs", *list, tokens);
        std::vector<EngineRecord::TopEntries> out;
        for (std::size_t k = 0; k < list->size(); ++k) {
            const std::string entry = "entry " + std::to_string(k);
            if (!(*list)[k].is_array()) fail("top_logprobs", entry + " must be a list of [id, logprob] pairs");
            auto& entries = out.emplace_back();
            for (const json& pair : (*list)[k]) {
                if (!pair.is_array() || pair.size() != 2)
                    fail("top_logprobs", entry + " must be a list of [id, logprob] pairs");
                const int64_t id = tokenIdFromJson(pair[0], where_ + ": field 'top_logprobs' " + entry);
                checkId("top_logprobs", entry + "'s id", id);
                entries.emplace_back(id, logprob("top_logprobs", entry, pair[1]));
            }
        }
        return out;
    }
    void checkLength(const char* field, const json& list, std::size_t tokens) const {
        if (list.size() != tokens)
            fail(field, "has " + std::to_string(list.size()) + " entries; output_ids has " + std::to_string(tokens));
    }
    std::optional<int64_t> batchSize() const {
        const json* v = optional("batch_size");
        if (!v) return std::nullopt;
        if (!v->is_number_integer() || v->get<int64_t>() < 1) fail("batch_size", "must be null or an integer >= 1");
        return v->get<int64_t>();
    }
    std::optional<double> temperature() const {
        const json* v = optional("temperature");
        if (!v) return std::nullopt;
        if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0)
            fail("temperature", "must be null or a finite number >= 0");
        return v->get<double>();
    }
    std::optional<std::string> answer() const {
        const json* v = optional("answer");
        if (!v) return std::nullopt;
        if (!v->is_string()) fail("answer", "must be null or a string");
        return v->get<std::string>();
    }

private:
    const json& object_;
    std::string where_;
    int64_t vocabSize_;
};

ImportedTrajectory parseLine(const std::string& text, const std::string& where, int64_t vocabSize) {
    json object;
    try {
        object = json::parse(text);
    } catch (const json::exception& e) {  // parse errors, and numbers beyond a double's range
        const bool nonFinite = text.find("NaN") != std::string::npos || text.find("Infinity") != std::string::npos;
        throw FormatError(where + ": not valid JSON (" +
                          (nonFinite ? std::string("NaN and Infinity are not JSON numbers; a log-probability must "
                                                   "be finite")
                                     : std::string(e.what())) +
                          ")");
    }
    if (!object.is_object()) throw FormatError(where + ": expected one JSON object per line");
    const LineFields f(object, where, vocabSize);
    ImportedTrajectory t;
    t.id = f.text("id");
    t.promptIds = f.ids("prompt_ids");
    t.outputIds = f.ids("output_ids");
    t.engine.engine = f.text("engine");
    t.engine.dtype = f.text("dtype");
    t.engine.logprobs = f.logprobs(t.outputIds.size());
    t.engine.topLogprobs = f.topLogprobs(t.outputIds.size());
    t.engine.batchSize = f.batchSize();
    t.engine.temperature = f.temperature();
    t.engine.answer = f.answer();
    return t;
}

json engineMetadata(const ImportedTrajectory& t) {
    const EngineRecord& e = t.engine;
    return {{"line", t.line},
            {"id", t.id},
            {"engine", e.engine},
            {"dtype", e.dtype},
            {"batch_size", e.batchSize ? json(*e.batchSize) : json(nullptr)},
            {"temperature", e.temperature ? json(*e.temperature) : json(nullptr)},
            {"logprobs", e.logprobs.has_value()},
            {"top_logprobs", e.topLogprobs.has_value()}};
}

json importManifest(const ImportRequest& request, const std::vector<ImportedTrajectory>& trajectories) {
    json files = modelFileHashes(request.modelPath);
    files["trajectories/" + fs::path(request.trajectoriesPath).filename().string()] =
        sha256File(request.trajectoriesPath);
    json engines = json::array();
    for (const auto& t : trajectories) engines.push_back(engineMetadata(t));
    const std::string name = request.name.empty() ? fs::path(request.trajectoriesPath).stem().string() : request.name;
    return {{"identity",
             {{"config", {{"name", name}, {"source", "external"}}},
              {"files", files},
              {"kvscope_version", kvscopeVersion()}}},
            {"paths", {{"model", request.modelPath}, {"trajectories", request.trajectoriesPath}}},
            {"engines", engines}};
}

ItemRecord itemOf(const ImportedTrajectory& t, int64_t index) {
    ItemRecord item;
    item.itemId = t.id;
    item.index = index;
    item.results.engine = t.engine;
    item.trajectories.prompt = t.promptIds;
    item.trajectories.output = t.outputIds;
    item.tokens = static_cast<int64_t>(t.outputIds.size());
    return item;
}

json nullableNumber(bool present, double value) { return present ? json(value) : json(nullptr); }

// The summary of a set of trajectories' mismatches.
json summaryOf(const std::vector<TrajectoryMismatch>& all) {
    int64_t tokens = 0, mismatches = 0, withMismatch = 0, withLogprobs = 0, tokensWithLogprobs = 0;
    int64_t above[3] = {0, 0, 0};
    double maxAbs = 0, sumAbs = 0, sumK3 = 0;
    std::vector<double> mismatchSums, tokenCounts, absSums, k3Sums, logprobTokens;
    for (const auto& t : all) {
        tokens += t.tokens;
        mismatches += t.argmaxMismatches;
        withMismatch += t.firstArgmaxMismatch.has_value();
        mismatchSums.push_back(static_cast<double>(t.argmaxMismatches));
        tokenCounts.push_back(static_cast<double>(t.tokens));
        if (!t.hasEngineLogprobs) continue;
        ++withLogprobs;
        tokensWithLogprobs += t.tokens;
        maxAbs = std::max(maxAbs, t.maxAbsDelta);
        sumAbs += t.sumAbsDelta;
        sumK3 += t.sumK3;
        for (int k = 0; k < 3; ++k) above[k] += t.above[k];
        absSums.push_back(t.sumAbsDelta);
        k3Sums.push_back(t.sumK3);
        logprobTokens.push_back(static_cast<double>(t.tokens));
    }
    auto interval = [](const std::vector<double>& sums, const std::vector<double>& counts) -> json {
        if (sums.empty()) return nullptr;
        const auto ci = stats::clusterBootstrapRatio(sums, counts, kBootstrapResamples, kBootstrapSeed);
        return json::array({ci.lower, ci.upper});
    };
    const bool logprobs = tokensWithLogprobs > 0;
    const double n = static_cast<double>(std::max<int64_t>(tokensWithLogprobs, 1));
    json shares = json::object();
    for (int k = 0; k < 3; ++k) {
        std::ostringstream key;
        key << kDeltaThresholds[k];
        shares[key.str()] = nullableNumber(logprobs, static_cast<double>(above[k]) / n);
    }
    return {{"trajectories", all.size()},
            {"tokens", tokens},
            {"trajectories_with_engine_logprobs", withLogprobs},
            {"argmax_mismatch_tokens", mismatches},
            {"argmax_mismatch_share", tokens ? static_cast<double>(mismatches) / static_cast<double>(tokens) : 0.0},
            {"argmax_mismatch_share_ci95", interval(mismatchSums, tokenCounts)},
            {"trajectories_with_argmax_mismatch", withMismatch},
            {"mean_abs_delta", nullableNumber(logprobs, sumAbs / n)},
            {"mean_abs_delta_ci95", interval(absSums, logprobTokens)},
            {"max_abs_delta", nullableNumber(logprobs, maxAbs)},
            {"k3", nullableNumber(logprobs, sumK3 / n)},
            {"k3_ci95", interval(k3Sums, logprobTokens)},
            {"share_abs_delta_above", shares}};
}

// Each token's figures; "delta_vs": its logprob minus that of each other replay the item holds.
json tokensJson(const EngineRecord& engine, const std::string& label,
                const std::map<std::string, ReplayResult>& replays) {
    const ReplayResult& replay = replays.at(label);
    json tokens = json::array();
    for (std::size_t i = 0; i < replay.logprobs.size(); ++i) {
        const bool given = engine.logprobs.has_value();
        const double theirs = given ? (*engine.logprobs)[i] : 0.0;
        json versus = json::object();
        for (const auto& [other, result] : replays)
            if (other != label && i < result.logprobs.size()) versus[other] = replay.logprobs[i] - result.logprobs[i];
        tokens.push_back({{"logprob", replay.logprobs[i]},
                          {"engine_logprob", nullableNumber(given, theirs)},
                          {"delta", nullableNumber(given, replay.logprobs[i] - theirs)},
                          {"delta_vs", versus},
                          {"argmax", replay.argmaxes[i]},
                          {"margin", replay.margins[i]},
                          {"rank", replay.ranks[i]}});
    }
    return tokens;
}

// The largest |logprob difference| against each other replay of the item, over its tokens.
json maxAbsDeltaVersus(const json& tokens) {
    json out = json::object();
    for (const json& token : tokens)
        for (const auto& [other, delta] : token["delta_vs"].items())
            out[other] = std::max(out.value(other, 0.0), std::abs(delta.get<double>()));
    return out;
}

// One replay against another of the same run, over every token both scored: how far the two
// references part, whether the engine gave logprobs or not.
struct Versus {
    int64_t tokens = 0, argmaxDiffer = 0;
    double maxAbs = 0, sumAbs = 0;
};

void addVersus(std::map<std::string, Versus>& versus, const std::string& label,
               const std::map<std::string, ReplayResult>& replays) {
    const ReplayResult& mine = replays.at(label);
    for (const auto& [other, theirs] : replays) {
        if (other == label) continue;
        Versus& v = versus[other];
        for (std::size_t i = 0; i < std::min(mine.logprobs.size(), theirs.logprobs.size()); ++i) {
            const double delta = std::abs(mine.logprobs[i] - theirs.logprobs[i]);
            ++v.tokens;
            v.argmaxDiffer += mine.argmaxes[i] != theirs.argmaxes[i];
            v.maxAbs = std::max(v.maxAbs, delta);
            v.sumAbs += delta;
        }
    }
}

json versusJson(const std::map<std::string, Versus>& versus) {
    json out = json::object();
    for (const auto& [other, v] : versus)
        out[other] = {{"tokens", v.tokens},
                      {"argmax_differs", v.argmaxDiffer},
                      {"max_abs_delta", v.maxAbs},
                      {"mean_abs_delta", v.tokens ? v.sumAbs / static_cast<double>(v.tokens) : 0.0}};
    return out;
}

// " [lower, upper]" of a 95% interval times `scale`, or nothing where there is none.
std::string intervalText(const json& ci, int digits, double scale = 1) {
    if (ci.is_null()) return "";
    return " [" + fixedText(scale * ci[0].get<double>(), digits) + ", " +
           fixedText(scale * ci[1].get<double>(), digits) + "]";
}

void summaryRow(std::ostringstream& out, const std::string& what, const json& s) {
    const json& above = s["share_abs_delta_above"];
    out << "| " << what << " | " << s["trajectories"] << " | " << s["tokens"] << " | "
        << fixedText(100 * s["argmax_mismatch_share"].get<double>(), 2) << "%"
        << intervalText(s["argmax_mismatch_share_ci95"], 2, 100) << " | " << s["trajectories_with_argmax_mismatch"]
        << " | " << fixedText(s["mean_abs_delta"], 5) << intervalText(s["mean_abs_delta_ci95"], 5) << " | "
        << fixedText(s["max_abs_delta"], 4) << " | " << fixedText(s["k3"], 6) << " | " << fixedText(above["0.01"], 4)
        << " / " << fixedText(above["0.1"], 4) << " / " << fixedText(above["1"], 4) << " |\n";
}

}  // namespace

std::string importedModelPath(const RunInfo& run, const std::string& movedTo) {
    const std::string model = movedTo.empty() ? run.manifest.at("paths").value("model", "") : movedTo;
    const json imported = run.manifest.at("identity").at("files");
    const json now = modelFileHashes(model);
    for (auto it = imported.begin(); it != imported.end(); ++it)
        if (it.key().rfind("model/", 0) == 0 && (!now.contains(it.key()) || now[it.key()] != it.value()))
            throw ConfigError(model + ": not the model run " + run.runId + " was imported with (" + it.key() +
                              (now.contains(it.key()) ? " differs)" : " is missing)"));
    return model;
}

Transformer loadReplayModel(const std::string& modelPath, const ReplayRequest& request) {
    Numerics numerics;
    numerics.kernels = request.kernels;
    numerics.mixed = request.precision.mixed;
    return Transformer::load(modelPath, parseDtype(request.precision.dtype), torch::kCPU, nullptr, numerics);
}

std::vector<ImportedTrajectory> readTrajectories(const std::string& path, int64_t vocabSize) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(path + ": cannot read the trajectories file");
    std::vector<ImportedTrajectory> out;
    std::set<std::string> ids;
    std::string text;
    for (int64_t line = 1; std::getline(in, text); ++line) {
        if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = path + ":" + std::to_string(line);
        ImportedTrajectory t = parseLine(text, where, vocabSize);
        t.line = line;
        if (!ids.insert(t.id).second)
            throw FormatError(where + ": field 'id' repeats '" + t.id + "' of an earlier line");
        out.push_back(std::move(t));
    }
    if (out.empty()) throw FormatError(path + ": no trajectories (expected one JSON object per line)");
    return out;
}

ImportSummary importTrajectories(const ImportRequest& request) {
    const int64_t vocabSize = Checkpoint::open(request.modelPath).config().vocabSize;
    const std::vector<ImportedTrajectory> trajectories = readTrajectories(request.trajectoriesPath, vocabSize);
    const json manifest = importManifest(request, trajectories);
    ImportSummary summary;
    summary.runId = runIdOf(manifest);
    summary.trajectories = static_cast<int64_t>(trajectories.size());
    for (const auto& t : trajectories) summary.outputTokens += static_cast<int64_t>(t.outputIds.size());

    const LedgerWriteLock lock(request.ledgerPath);
    Ledger ledger(request.ledgerPath);
    if (ledger.hasRun(summary.runId)) {
        summary.alreadyImported = true;
        return summary;
    }
    std::vector<ItemRecord> items;
    for (std::size_t k = 0; k < trajectories.size(); ++k)
        items.push_back(itemOf(trajectories[k], static_cast<int64_t>(k)));
    ledger.recordRun(summary.runId, manifest, items);
    return summary;
}

std::string ReplayRequest::label() const {
    return reference.name() + "/" + kernelsName(kernels) + "/" + precision.name();
}

std::string replayRun(const ReplayRequest& request, const std::function<bool(const ReplayProgress&)>& onItem) {
    const LedgerWriteLock lock(request.ledgerPath);
    Ledger ledger(request.ledgerPath);
    const RunInfo run = ledger.run(request.runId);
    if (!isImportedRun(run.manifest))
        throw UsageError(request.ledgerPath + ": run " + request.runId +
                         " is a study, not imported trajectories (kvscope import makes those)");
    const std::string model = importedModelPath(run, request.modelPath);
    const std::string label = request.label();
    const std::set<std::string> done = ledger.itemsWithResult(request.runId, replayProtocol(label));
    std::vector<ItemRecord> todo;
    for (ItemRecord& item : ledger.items(request.runId))
        if (!done.count(item.itemId)) todo.push_back(std::move(item));
    if (todo.empty()) return label;

    const Transformer transformer = loadReplayModel(model, request);
    ReplayProgress progress;
    progress.total = static_cast<int64_t>(todo.size());
    for (const ItemRecord& item : todo) {
        const auto& prompt = storedTrajectory(item, "prompt", request.ledgerPath);
        const auto& output = storedTrajectory(item, "output", request.ledgerPath);
        ItemResults results;
        ReplayResult& replay = results.replays[label];
        for (const ForcedScore& s : scoreContinuation(transformer, prompt, output, request.reference)) {
            replay.logprobs.push_back(s.logprob);
            replay.argmaxes.push_back(s.argmax);
            replay.margins.push_back(s.margin);
            replay.ranks.push_back(s.rank);
        }
        ledger.recordResult(request.runId, item.itemId, replayProtocol(label), toJson(results)[replayProtocol(label)]);
        ++progress.done;
        progress.itemId = item.itemId;
        if (onItem && !onItem(progress)) break;
    }
    return label;
}

TrajectoryMismatch mismatchOf(const std::string& id, const EngineRecord& engine, const std::vector<int64_t>& output,
                              const ReplayResult& replay) {
    TrajectoryMismatch m;
    m.id = id;
    m.batchSize = engine.batchSize;
    m.tokens = static_cast<int64_t>(replay.logprobs.size());
    m.hasEngineLogprobs = engine.logprobs.has_value();
    for (std::size_t i = 0; i < replay.logprobs.size(); ++i) {
        if (replay.argmaxes[i] != output[i]) {
            ++m.argmaxMismatches;
            if (!m.firstArgmaxMismatch) m.firstArgmaxMismatch = static_cast<int64_t>(i);
        }
        if (!m.hasEngineLogprobs) continue;
        const double delta = replay.logprobs[i] - (*engine.logprobs)[i];
        m.maxAbsDelta = std::max(m.maxAbsDelta, std::abs(delta));
        m.sumAbsDelta += std::abs(delta);
        m.sumK3 += std::expm1(delta) - delta;  // r - 1 - log r, r = p_replay / p_engine
        for (int k = 0; k < 3; ++k) m.above[k] += std::abs(delta) > kDeltaThresholds[k];
    }
    return m;
}

json replayReportJson(const std::vector<ItemRecord>& items, const std::string& label) {
    std::vector<TrajectoryMismatch> all;
    std::map<int64_t, std::vector<TrajectoryMismatch>> byBatch;
    std::map<std::string, Versus> versus;
    json trajectories = json::array();
    for (const ItemRecord& item : items) {
        const auto replay = item.results.replays.find(label);
        const std::optional<std::vector<int64_t>>& output = item.trajectories.output;
        if (replay == item.results.replays.end() || !item.results.engine || !output) continue;
        const EngineRecord& engine = *item.results.engine;
        const TrajectoryMismatch m = mismatchOf(item.itemId, engine, *output, replay->second);
        all.push_back(m);
        if (m.batchSize) byBatch[*m.batchSize].push_back(m);
        const double n = static_cast<double>(std::max<int64_t>(m.tokens, 1));
        const json tokens = tokensJson(engine, label, item.results.replays);
        addVersus(versus, label, item.results.replays);
        trajectories.push_back(
            {{"id", m.id},
             {"batch_size", m.batchSize ? json(*m.batchSize) : json(nullptr)},
             {"first_argmax_mismatch", m.firstArgmaxMismatch ? json(*m.firstArgmaxMismatch) : json(nullptr)},
             {"max_abs_delta", nullableNumber(m.hasEngineLogprobs, m.maxAbsDelta)},
             {"mean_abs_delta", nullableNumber(m.hasEngineLogprobs, m.sumAbsDelta / n)},
             {"k3", nullableNumber(m.hasEngineLogprobs, m.sumK3 / n)},
             {"max_abs_delta_vs", maxAbsDeltaVersus(tokens)},
             {"tokens", tokens}});
    }
    json summary = summaryOf(all);
    if (!byBatch.empty()) {
        json perBatch = json::object();
        for (const auto& [size, group] : byBatch) perBatch[std::to_string(size)] = summaryOf(group);
        summary["by_batch_size"] = perBatch;
    }
    summary["versus"] = versusJson(versus);
    return {{"label", label}, {"summary", summary}, {"trajectories", trajectories}};
}

std::string replayReportMarkdown(const json& report) {
    std::ostringstream out;
    const json& s = report["summary"];
    out << "### replay " << report["label"].get<std::string>() << "\n\n"
        << "| | trajectories | tokens | engine token not the replay's argmax (95% CI) | trajectories with one "
           "| mean abs delta logprob (95% CI) | max abs delta | k3 KL | share abs delta > 0.01 / 0.1 / 1 |\n"
        << "|---|---|---|---|---|---|---|---|---|\n";
    summaryRow(out, "all", s);
    if (s.contains("by_batch_size") && s["by_batch_size"].size() > 1)  // one size: the same row again
        for (const auto& [size, group] : s["by_batch_size"].items()) summaryRow(out, "batch size " + size, group);
    out << "\n";
    if (s.contains("versus") && !s["versus"].empty()) {
        out << "| against the replay | tokens | argmax differs | mean abs delta logprob | max abs delta |\n"
            << "|---|---|---|---|---|\n";
        for (const auto& [other, v] : s["versus"].items())
            out << "| " << other << " | " << v["tokens"] << " | " << v["argmax_differs"] << " | "
                << fixedText(v["mean_abs_delta"], 6) << " | " << fixedText(v["max_abs_delta"], 6) << " |\n";
        out << "\n";
    }
    return out.str();
}

nlohmann::json importedRunReport(const std::vector<ItemRecord>& items, const RunInfo& run) {
    std::set<std::string> engines;
    for (const ItemRecord& item : items)
        if (item.results.engine) engines.insert(item.results.engine->engine + " (" + item.results.engine->dtype + ")");
    json replays = json::object();
    for (const std::string& label : replayLabels(items)) {
        json replay = replayReportJson(items, label);
        for (json& t : replay["trajectories"]) t.erase("tokens");
        replays[label] = replay;
    }
    return {{"run", run.runId},     {"name", describeRun(run.manifest).name},
            {"source", "external"}, {"trajectories", items.size()},
            {"engines", engines},   {"replays", replays}};
}

std::string importedRunMarkdown(const nlohmann::json& report) {
    std::ostringstream out;
    out << "# kvscope report: " << report["name"].get<std::string>() << " (run " << report["run"].get<std::string>()
        << ", " << report["trajectories"] << " imported trajectories from";
    for (const auto& engine : report["engines"]) out << " " << engine.get<std::string>();
    out << ")\n\n";
    if (report["replays"].empty())
        out << "No replay yet: `kvscope replay LEDGER --run " << report["run"].get<std::string>() << "`.\n";
    for (const auto& [label, replay] : report["replays"].items()) out << replayReportMarkdown(replay);
    return out.str();
}

std::string importedRunCsv(const nlohmann::json& report) {
    std::ostringstream out;
    out << "replay,id,batch_size,first_argmax_mismatch,max_abs_delta,mean_abs_delta,k3\n";
    auto cell = [](const json& v) { return v.is_null() ? std::string() : v.dump(); };
    for (const auto& [label, replay] : report["replays"].items())
        for (const json& t : replay["trajectories"])
            out << label << "," << t["id"].get<std::string>() << "," << cell(t["batch_size"]) << ","
                << cell(t["first_argmax_mismatch"]) << "," << cell(t["max_abs_delta"]) << ","
                << cell(t["mean_abs_delta"]) << "," << cell(t["k3"]) << "\n";
    return out.str();
}

}  // namespace kvscope::experiments
