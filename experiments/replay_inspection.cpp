// SPDX-License-Identifier: MIT
#include "experiments/replay_inspection.h"

#include "core/decode/teacher_forced.h"
#include "core/util/error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>

namespace kvscope::experiments {

bool isImportedRun(const nlohmann::json& manifest) {
    const nlohmann::json::json_pointer source("/identity/config/source");
    return manifest.contains(source) && manifest[source] == "external";
}

std::vector<std::string> replayLabels(const std::vector<ItemRecord>& items) {
    std::set<std::string> labels;
    for (const ItemRecord& item : items)
        for (const auto& [label, replay] : item.results.replays) labels.insert(label);
    return {labels.begin(), labels.end()};
}

ReplayLabel parseReplayLabel(const std::string& label) {
    const std::size_t first = label.find('/'), second = label.find('/', first == std::string::npos ? 0 : first + 1);
    if (first == std::string::npos || second == std::string::npos)
        throw UsageError("replay label '" + label + "': expected REFERENCE/KERNELS/PRECISION, e.g. prefill/torch/bf16");
    try {  // the parsers `kvscope replay` reads its options with, so a label means what its options did
        return {ForcedReference::parse(label.substr(0, first)).name(),
                parseKernels(label.substr(first + 1, second - first - 1)), parsePrecision(label.substr(second + 1))};
    } catch (const UsageError& e) {
        throw UsageError("replay label '" + label + "': " + e.what());
    }
}

std::string DeltaBasis::name() const { return label + " vs " + (against.empty() ? std::string("engine") : against); }

namespace {

// The log-probabilities `basis` compares `label`'s replay with: the engine's, or another replay's.
const std::vector<double>* comparedLogprobs(const ItemRecord& item, const std::string& against) {
    if (against.empty())
        return item.results.engine && item.results.engine->logprobs ? &*item.results.engine->logprobs : nullptr;
    const auto other = item.results.replays.find(against);
    return other == item.results.replays.end() ? nullptr : &other->second.logprobs;
}

// Bins' lower edges past the zero bin: (0, 1e-6), then a decade each from 1e-6 to 10, and >= 10.
constexpr std::array<int, 8> kDecades = {-6, -5, -4, -3, -2, -1, 0, 1};

}  // namespace

std::vector<std::optional<double>> absDeltas(const ItemRecord& item, const DeltaBasis& basis) {
    const auto replay = item.results.replays.find(basis.label);
    if (replay == item.results.replays.end()) return {};
    const std::vector<double>& mine = replay->second.logprobs;
    const std::vector<double>* theirs = comparedLogprobs(item, basis.against);
    std::vector<std::optional<double>> deltas(mine.size());
    if (!theirs) return deltas;
    for (std::size_t i = 0; i < std::min(mine.size(), theirs->size()); ++i)
        deltas[i] = std::abs(mine[i] - (*theirs)[i]);
    return deltas;
}

ItemMismatch itemMismatch(const ItemRecord& item, const DeltaBasis& basis) {
    ItemMismatch m;
    const auto replay = item.results.replays.find(basis.label);
    const std::optional<std::vector<int64_t>>& output = item.trajectories.output;
    if (replay == item.results.replays.end() || !output) return m;
    m.replayed = true;
    const std::vector<int64_t>& argmaxes = replay->second.argmaxes;
    for (std::size_t i = 0; i < std::min(argmaxes.size(), output->size()) && !m.firstArgmaxMismatch; ++i)
        if (argmaxes[i] != (*output)[i]) m.firstArgmaxMismatch = static_cast<int64_t>(i);
    double sum = 0;
    int64_t n = 0;
    for (const std::optional<double>& d : absDeltas(item, basis)) {
        if (!d) continue;
        m.maxAbsDelta = std::max(m.maxAbsDelta.value_or(0.0), *d);
        sum += *d;
        ++n;
    }
    if (n > 0) m.meanAbsDelta = sum / static_cast<double>(n);
    return m;
}

std::size_t deltaBinOf(double absDelta) {
    if (absDelta == 0) return 0;
    std::size_t bin = 1;  // (0, 1e-6)
    for (const int decade : kDecades)
        if (absDelta >= std::pow(10.0, decade)) ++bin;
    return bin;
}

std::vector<DeltaBin> absDeltaHistogram(const std::vector<ItemRecord>& items, const DeltaBasis& basis) {
    std::vector<DeltaBin> bins = {{"0", 0, 0, 0}, {"<1e-6", 0, 1e-6, 0}};
    for (std::size_t k = 0; k < kDecades.size(); ++k) {
        const double lower = std::pow(10.0, kDecades[k]);
        const bool last = k + 1 == kDecades.size();
        const std::string edge =
            kDecades[k] >= 0 ? std::to_string(static_cast<int>(lower)) : "1e" + std::to_string(kDecades[k]);
        bins.push_back({last ? ">=" + edge : edge, lower,
                        last ? std::numeric_limits<double>::infinity() : std::pow(10.0, kDecades[k + 1]), 0});
    }
    for (const ItemRecord& item : items)
        for (const std::optional<double>& d : absDeltas(item, basis))
            if (d) ++bins[deltaBinOf(*d)].tokens;
    return bins;
}

std::pair<std::string, std::string> referencesToLocate(const DeltaBasis& basis) {
    const std::string a = parseReplayLabel(basis.label).reference;
    const std::string other = a == "live" ? "prefill" : "live";
    if (basis.against.empty()) return {a, other};
    const std::string b = parseReplayLabel(basis.against).reference;
    return {a, b == a ? other : b};
}

}  // namespace kvscope::experiments
