// SPDX-License-Identifier: MIT
#include "core/cache/transplant.h"

#include "core/util/error.h"
#include "core/util/parse.h"

#include <set>
#include <sstream>

namespace kvscope {
namespace {

int64_t parseIndex(const std::string& s, const std::string& context) {
    const auto v = parseNonNegativeInt(s);
    if (!v) throw UsageError(context + ": '" + s + "' is not a non-negative integer");
    return *v;
}

}  // namespace

std::vector<int64_t> TransplantSpec::parseLayers(const std::string& text, int64_t numLayers,
                                                 const std::string& option) {
    std::set<int64_t> layers;
    if (text == "all") {
        for (int64_t l = 0; l < numLayers; ++l) layers.insert(l);
        return {layers.begin(), layers.end()};
    }
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        const auto dash = part.find('-');
        const int64_t lo = parseIndex(part.substr(0, dash), option);
        const int64_t hi = dash == std::string::npos ? lo : parseIndex(part.substr(dash + 1), option);
        if (lo > hi || hi >= numLayers)
            throw UsageError(option + ": '" + part + "' is outside the model's layers 0-" +
                             std::to_string(numLayers - 1));
        for (int64_t l = lo; l <= hi; ++l) layers.insert(l);
    }
    if (layers.empty()) throw UsageError(option + ": no layers in '" + text + "'");
    return {layers.begin(), layers.end()};
}

void TransplantSpec::parsePositions(const std::string& text) {
    const auto colon = text.find(':');
    if (colon == std::string::npos) throw UsageError("--positions must be a:b (got '" + text + "')");
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    positionBegin = a.empty() ? 0 : parseIndex(a, "--positions");
    positionEnd = b.empty() ? -1 : parseIndex(b, "--positions");
    if (positionEnd >= 0 && positionEnd < positionBegin)
        throw UsageError("--positions: end is before begin in '" + text + "'");
}

namespace {

std::string layerList(const std::vector<int64_t>& layers) {
    std::string s;
    for (std::size_t i = 0; i < layers.size(); ++i) s += (i ? "," : "") + std::to_string(layers[i]);
    return s;
}

std::string positionRange(int64_t begin, int64_t end) {
    return std::to_string(begin) + ":" + (end < 0 ? "" : std::to_string(end));
}

// Keys of `keyLayers` and values of `valueLayers` over positions [begin, end) from the donor;
// `label` names the splice in the result's construction.
KvCache splice(const KvCache& recipient, const KvCache& donor, const std::vector<int64_t>& keyLayers,
               const std::vector<int64_t>& valueLayers, int64_t begin, int64_t endOrAll, const std::string& label) {
    auto refuse = [](const std::string& why) { throw UsageError("transplant refused: " + why); };
    if (recipient.modelFingerprint() != donor.modelFingerprint()) refuse("the caches come from different models");
    if (recipient.dtype() != donor.dtype()) refuse("the caches have different dtypes");
    if (recipient.numLayers() != donor.numLayers() || recipient.numKvHeads() != donor.numKvHeads() ||
        recipient.headDim() != donor.headDim())
        refuse("the caches have different shapes");
    if (recipient.length() != donor.length())
        refuse("the caches have different lengths (" + std::to_string(recipient.length()) + " vs " +
               std::to_string(donor.length()) + " tokens)");
    if (recipient.ids() != donor.ids()) refuse("the caches were built from different token ids");
    const int64_t end = endOrAll < 0 ? recipient.length() : endOrAll;
    if (end > recipient.length())
        refuse("position range ends past the cache (" + std::to_string(recipient.length()) + " tokens)");
    if (begin >= end)
        refuse("position range " + std::to_string(begin) + ":" + std::to_string(end) +
               " selects no position of the cache (" + std::to_string(recipient.length()) + " tokens)");
    for (const auto* layers : {&keyLayers, &valueLayers})
        for (int64_t l : *layers)
            if (l < 0 || l >= recipient.numLayers()) refuse("layer " + std::to_string(l) + " does not exist");

    KvCache out = recipient.clone();
    const int64_t count = end - begin;
    for (int64_t l : keyLayers)
        out.layerKeys(l).narrow(1, begin, count).copy_(donor.layerKeys(l).narrow(1, begin, count));
    for (int64_t l : valueLayers)
        out.layerValues(l).narrow(1, begin, count).copy_(donor.layerValues(l).narrow(1, begin, count));
    out.setConstruction(label + " of " + donor.construction() + " into " + recipient.construction());
    // Next-token logits came from a cache's own last forward. A splice that left every K and V bit
    // equal to one of its sources *is* that source, so it keeps that source's logits; any other
    // splice has none, and a continuation re-feeds its last token.
    auto sameKv = [&](const KvCache& other) {
        for (int64_t l = 0; l < out.numLayers(); ++l)
            if (!torch::equal(out.layerKeys(l), other.layerKeys(l)) ||
                !torch::equal(out.layerValues(l), other.layerValues(l)))
                return false;
        return true;
    };
    const KvCache* same = sameKv(donor) ? &donor : sameKv(recipient) ? &recipient : nullptr;
    out.setNextLogits(same && same->nextLogits().defined() ? same->nextLogits().clone() : torch::Tensor());
    return out;
}

}  // namespace

std::string TransplantSpec::describe() const {
    return "transplant(layers=" + layerList(layers) + ",kv=" + kvPartsName(parts) +
           ",positions=" + positionRange(positionBegin, positionEnd) + ")";
}

KvCache transplant(const KvCache& recipient, const KvCache& donor, const TransplantSpec& spec) {
    const std::vector<int64_t> none;
    return splice(recipient, donor, movesKeys(spec.parts) ? spec.layers : none,
                  movesValues(spec.parts) ? spec.layers : none, spec.positionBegin, spec.positionEnd, spec.describe());
}

std::string KvSplice::describe() const {
    // A splice that TransplantSpec can say (one layer set, k, v or kv) is labelled as it would be.
    if (keyLayers == valueLayers)
        return TransplantSpec{keyLayers, KvParts::Both, positionBegin, positionEnd}.describe();
    if (valueLayers.empty()) return TransplantSpec{keyLayers, KvParts::Keys, positionBegin, positionEnd}.describe();
    if (keyLayers.empty()) return TransplantSpec{valueLayers, KvParts::Values, positionBegin, positionEnd}.describe();
    return "transplant(key_layers=" + layerList(keyLayers) + ",value_layers=" + layerList(valueLayers) +
           ",positions=" + positionRange(positionBegin, positionEnd) + ")";
}

KvCache transplantKeysAndValues(const KvCache& recipient, const KvCache& donor, const KvSplice& s) {
    return splice(recipient, donor, s.keyLayers, s.valueLayers, s.positionBegin, s.positionEnd, s.describe());
}

}  // namespace kvscope
