// SPDX-License-Identifier: MIT
#include "experiments/item_result.h"

#include "core/model/numerics.h"
#include "core/util/error.h"
#include "core/util/parse.h"

#include <cmath>
#include <functional>
#include <limits>

namespace kvscope::experiments {
namespace {

using nlohmann::json;

// One stored object's fields, read with errors that say where: "LEDGER: item 'x': matched: field
// 'suffix_equal' must be a boolean".
class Fields {
public:
    Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {
        if (!object_.is_object()) fail("must be an object");
    }

    bool boolean(const char* key) const { return is(key, &json::is_boolean, "a boolean").get<bool>(); }
    int64_t integer(const char* key) const { return is(key, &json::is_number_integer, "an integer").get<int64_t>(); }
    std::string text(const char* key) const { return is(key, &json::is_string, "a string").get<std::string>(); }
    KvParts kvParts(const char* key) const {
        try {
            return parseKvParts(text(key), std::string("field '") + key + "'");
        } catch (const UsageError& e) {
            fail(e.what());
        }
    }
    std::optional<int64_t> nullableInteger(const char* key) const {
        const json& v =
            is(key, [](const json& j) { return j.is_null() || j.is_number_integer(); }, "null or an integer");
        return v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>());
    }
    std::optional<std::string> nullableText(const char* key) const {
        const json& v = is(key, [](const json& j) { return j.is_null() || j.is_string(); }, "null or a string");
        return v.is_null() ? std::nullopt : std::optional<std::string>(v.get<std::string>());
    }
    // JSON has no NaN or infinity: nlohmann writes them as null, so null reads back as NaN.
    double number(const char* key) const { return numberFrom(is(key, &isNumberOrNull, "a number"), key); }
    std::vector<double> numbers(const char* key) const {
        std::vector<double> out;
        for (const json& v : is(key, &json::is_array, "an array of numbers")) out.push_back(numberFrom(v, key));
        return out;
    }
    std::vector<int64_t> integers(const char* key) const {
        std::vector<int64_t> out;
        for (const json& v : is(key, &json::is_array, "an array of integers")) {
            if (!v.is_number_integer()) fail(std::string("field '") + key + "' must be an array of integers");
            out.push_back(v.get<int64_t>());
        }
        return out;
    }
    std::vector<std::string> texts(const char* key) const {
        std::vector<std::string> out;
        for (const json& v : is(key, &json::is_array, "an array of strings")) {
            if (!v.is_string()) fail(std::string("field '") + key + "' must be an array of strings");
            out.push_back(v.get<std::string>());
        }
        return out;
    }
    std::optional<double> nullableNumber(const char* key) const {
        const json& v = is(key, [](const json& j) { return j.is_null() || j.is_number(); }, "null or a number");
        return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
    }
    Fields object(const char* key) const { return {is(key, &json::is_object, "an object"), where_ + "." + key}; }
    bool has(const char* key) const { return object_.contains(key); }
    bool isNull(const char* key) const { return has(key) && object_.at(key).is_null(); }
    const json& raw() const { return object_; }
    const std::string& where() const { return where_; }

private:
    static bool isNumberOrNull(const json& j) { return j.is_number() || j.is_null(); }
    double numberFrom(const json& v, const char* key) const {
        if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
        if (!v.is_number()) fail(std::string("field '") + key + "' must hold numbers");
        return v.get<double>();
    }
    template <typename Test>
    const json& is(const char* key, Test test, const char* what) const {
        if (!object_.contains(key)) fail(std::string("field '") + key + "' is missing");
        const json& v = object_.at(key);
        if (!std::invoke(test, v)) fail(std::string("field '") + key + "' must be " + what);
        return v;
    }
    [[noreturn]] void fail(const std::string& message) const { throw FormatError(where_ + ": " + message); }

    const json& object_;
    std::string where_;
};

template <typename T>
json nullable(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

StopReason readStopReason(const Fields& f) {
    const std::string name = f.text("stop_reason");
    if (const auto reason = parseStopReason(name)) return *reason;
    throw FormatError(f.where() + ": field 'stop_reason' has unknown value '" + name + "'");
}

// ---- to JSON: the ledger's schema, version 1 ---------------------------------------------------

json traceJson(const TraceResult& t) {
    return {{"length", t.length}, {"stop_reason", stopReasonName(t.stopReason)}, {"boundary", nullable(t.boundary)}};
}

json stepJson(const std::optional<StepSummary>& s) {
    if (!s) return nullptr;
    return {{"id", s->id}, {"margin", s->margin}, {"entropy", s->entropy}, {"logprob", s->logprob}};
}

json matchedJson(const MatchedResult& m) {
    return {{"suffix_equal", m.suffixEqual},
            {"first_divergence", nullable(m.firstDivergence)},
            {"at_divergence", {{"live", stepJson(m.liveAtDivergence)}, {"prefill", stepJson(m.prefillAtDivergence)}}},
            {"replica_live_exact", m.replicaLiveExact},
            {"replica_prefill_exact", m.replicaPrefillExact},
            {"answer_live", nullable(m.answerLive)},
            {"answer_prefill", nullable(m.answerPrefill)},
            {"correct_live", m.correctLive},
            {"correct_prefill", m.correctPrefill},
            {"suffix_length_live", m.suffixLengthLive},
            {"suffix_length_prefill", m.suffixLengthPrefill},
            {"margins_live", m.marginsLive}};
}

json cellJson(const FixedPrefixCell& c) {
    return {{"disagree", c.disagree}, {"first_divergence", nullable(c.firstDivergence)}};
}

json bridgeJson(const BridgeResult& b) {
    json j = {{"exact", b.exact}};
    if (b.construction) j["construction"] = *b.construction;
    return j;
}

json verdictJson(const TransplantVerdict& v) {
    return {{"follows_donor", v.followsDonor}, {"follows_recipient", v.followsRecipient}};
}

json transplantJson(const TransplantResult& t) {
    return {{"layers", t.layers},
            {"kv", kvPartsName(t.parts)},
            {"prefill_from_live", verdictJson(t.prefillFromLive)},
            {"live_from_prefill", verdictJson(t.liveFromPrefill)}};
}

json localizeJson(const LocalizeResult& l) {
    if (!l.found) return {{"found", false}, {"tests", l.tests}};
    return {{"found", true}, {"layers", l.layers}, {"kv", kvPartsName(l.parts)}, {"tests", l.tests}};
}

json engineJson(const EngineRecord& e) {
    return {{"engine", e.engine},
            {"dtype", e.dtype},
            {"batch_size", nullable(e.batchSize)},
            {"temperature", nullable(e.temperature)},
            {"answer", nullable(e.answer)},
            {"logprobs", nullable(e.logprobs)},
            {"top_logprobs", nullable(e.topLogprobs)}};  // (id, logprob) pairs as [id, logprob]
}

json replayJson(const ReplayResult& r) {
    return {{"logprobs", r.logprobs}, {"argmaxes", r.argmaxes}, {"margins", r.margins}, {"ranks", r.ranks}};
}

// ---- from JSON ------------------------------------------------------------------------------

TraceResult readTrace(const Fields& f) {
    return {f.integer("length"), readStopReason(f), f.nullableInteger("boundary")};
}

std::optional<StepSummary> readStep(const Fields& parent, const char* key) {
    if (parent.isNull(key)) return std::nullopt;
    const Fields f = parent.object(key);
    return StepSummary{f.integer("id"), f.number("margin"), f.number("entropy"), f.number("logprob")};
}

MatchedResult readMatched(const Fields& f) {
    MatchedResult m;
    m.suffixEqual = f.boolean("suffix_equal");
    m.firstDivergence = f.nullableInteger("first_divergence");
    const Fields at = f.object("at_divergence");
    m.liveAtDivergence = readStep(at, "live");
    m.prefillAtDivergence = readStep(at, "prefill");
    m.replicaLiveExact = f.boolean("replica_live_exact");
    m.replicaPrefillExact = f.boolean("replica_prefill_exact");
    m.answerLive = f.nullableText("answer_live");
    m.answerPrefill = f.nullableText("answer_prefill");
    m.correctLive = f.boolean("correct_live");
    m.correctPrefill = f.boolean("correct_prefill");
    m.suffixLengthLive = f.integer("suffix_length_live");
    m.suffixLengthPrefill = f.integer("suffix_length_prefill");
    m.marginsLive = f.numbers("margins_live");
    return m;
}

FixedPrefixCell readCell(const Fields& f) { return {f.boolean("disagree"), f.nullableInteger("first_divergence")}; }

// One cell per precision the run compared; a ledger before precisions were chosen has bf16 and fp32.
FixedPrefixResult readFixedPrefix(const Fields& f) {
    FixedPrefixResult r;
    for (const auto& [precision, cell] : f.raw().items()) {
        try {
            parsePrecision(precision);
        } catch (const UsageError& e) {
            throw FormatError(f.where() + ": " + e.what());
        }
        r.byPrecision[precision] = readCell(f.object(precision.c_str()));
    }
    if (r.byPrecision.empty()) throw FormatError(f.where() + ": no precision's cell");
    return r;
}

BridgeResult readBridge(const Fields& f) {
    return {f.boolean("exact"),
            f.has("construction") ? std::optional<std::string>(f.text("construction")) : std::nullopt};
}

TransplantVerdict readVerdict(const Fields& f) { return {f.boolean("follows_donor"), f.boolean("follows_recipient")}; }

LocalizeResult readLocalize(const Fields& f) {
    LocalizeResult l;
    l.found = f.boolean("found");
    l.tests = f.integer("tests");
    if (l.found) l.layers = f.integers("layers"), l.parts = f.kvParts("kv");
    return l;
}

EngineRecord readEngine(const Fields& f) {
    EngineRecord e;
    e.engine = f.text("engine");
    e.dtype = f.text("dtype");
    e.batchSize = f.nullableInteger("batch_size");
    e.temperature = f.nullableNumber("temperature");
    e.answer = f.nullableText("answer");
    if (!f.isNull("logprobs")) e.logprobs = f.numbers("logprobs");
    if (!f.isNull("top_logprobs")) {
        const auto fail = [&] {
            throw FormatError(f.where() + ": field 'top_logprobs' must be null or an array of [[id, logprob], ...]");
        };
        const json& all = f.raw().at("top_logprobs");
        if (!all.is_array()) fail();
        e.topLogprobs.emplace();
        for (const json& step : all) {
            if (!step.is_array()) fail();
            auto& entries = e.topLogprobs->emplace_back();
            for (const json& pair : step) {
                if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number())
                    fail();
                entries.emplace_back(pair[0].get<int64_t>(), pair[1].get<double>());
            }
        }
    }
    return e;
}

ReplayResult readReplay(const Fields& f) {
    ReplayResult r{f.numbers("logprobs"), f.numbers("margins"), f.integers("argmaxes"), f.integers("ranks")};
    if (r.margins.size() != r.logprobs.size() || r.argmaxes.size() != r.logprobs.size() ||
        r.ranks.size() != r.logprobs.size())
        throw FormatError(f.where() + ": fields 'logprobs', 'margins', 'argmaxes' and 'ranks' must be as long");
    return r;
}

std::map<std::string, std::string> readCaches(const Fields& f) {
    std::map<std::string, std::string> out;
    for (const auto& [construction, path] : f.raw().items()) out[construction] = f.text(construction.c_str());
    return out;
}

}  // namespace

std::string itemStatusName(ItemStatus status) { return status == ItemStatus::Done ? "done" : "no_boundary"; }

ItemStatus parseItemStatus(const std::string& name, const std::string& where) {
    if (name == "done") return ItemStatus::Done;
    if (name == "no_boundary") return ItemStatus::NoBoundary;
    throw FormatError(where + ": status '" + name + "' is not one of done, no_boundary");
}

json batchJson(const BatchResult& b) {
    json out = json::object();
    for (const auto& [kernels, sizes] : b.byKernels)
        for (const auto& [size, c] : sizes)
            out[kernels][std::to_string(size)] = {{"logits_equal", c.logitsEqual},
                                                  {"cache_equal", c.cacheEqual},
                                                  {"first_divergence", nullable(c.firstDivergence)},
                                                  {"margin_at_divergence", nullable(c.marginAtDivergence)},
                                                  {"first_differing_op", nullable(c.firstDifferingOp)}};
    return out;
}

BatchResult readBatch(const Fields& f) {
    BatchResult b;
    for (const auto& [kernels, sizes] : f.raw().items()) {
        if (kernels != "torch" && kernels != "invariant")
            throw FormatError(f.where() + ": kernels '" + kernels + "' (expected torch or invariant)");
        const Fields bySize = f.object(kernels.c_str());
        for (const auto& [size, cell] : bySize.raw().items()) {
            const Fields c = bySize.object(size.c_str());
            const std::optional<int64_t> n = parseNonNegativeInt(size);
            if (!n || *n < 1) throw FormatError(bySize.where() + ": '" + size + "' is not a batch size");
            b.byKernels[kernels][*n] = {c.boolean("logits_equal"), c.boolean("cache_equal"),
                                        c.nullableInteger("first_divergence"), c.nullableNumber("margin_at_divergence"),
                                        c.nullableText("first_differing_op")};
        }
    }
    return b;
}

json toJson(const ItemResults& r) {
    json j = json::object();
    if (r.trace) j["trace"] = traceJson(*r.trace);
    if (r.matched) j["matched"] = matchedJson(*r.matched);
    if (r.fixedPrefix2x2) {
        json& cells = j["fixed_prefix_2x2"] = json::object();
        for (const auto& [precision, cell] : r.fixedPrefix2x2->byPrecision) cells[precision] = cellJson(cell);
    }
    if (r.bridge) j["bridge"] = bridgeJson(*r.bridge);
    if (r.transplant) j["transplant"] = transplantJson(*r.transplant);
    if (r.localize) j["localize"] = localizeJson(*r.localize);
    if (r.audit) j["audit"] = {{"reproduced", r.audit->reproduced}, {"mismatches", r.audit->mismatches}};
    if (r.batch) j["batch"] = batchJson(*r.batch);
    if (!r.caches.empty()) j["caches"] = r.caches;
    if (r.engine) j["engine"] = engineJson(*r.engine);
    for (const auto& [label, replay] : r.replays) j[replayProtocol(label)] = replayJson(replay);
    return j;
}

std::string replayProtocol(const std::string& label) { return "replay:" + label; }

std::string batchContinuationName(const std::string& kernels, int64_t size) {
    return "batch/" + kernels + "/" + std::to_string(size);
}

namespace {

template <typename Record, typename Value>
struct NamedSlot {
    const char* name;
    std::optional<Value> Record::* field;
};
const NamedSlot<Trajectories, Trajectories::Ids> kTrajectorySlots[] = {{"prompt", &Trajectories::prompt},
                                                                       {"trace", &Trajectories::trace},
                                                                       {"suffix_live", &Trajectories::suffixLive},
                                                                       {"suffix_prefill", &Trajectories::suffixPrefill},
                                                                       {"output", &Trajectories::output}};
const NamedSlot<Fingerprints, std::string> kFingerprintSlots[] = {{"live_cache", &Fingerprints::liveCache},
                                                                  {"prefill_cache", &Fingerprints::prefillCache},
                                                                  {"comparison", &Fingerprints::comparison}};

template <typename Record, typename Value, std::size_t N>
std::map<std::string, Value> presentByName(const Record& record, const NamedSlot<Record, Value> (&slots)[N]) {
    std::map<std::string, Value> out;
    for (const auto& s : slots)
        if (record.*s.field) out.emplace(s.name, *(record.*s.field));
    return out;
}

// The slot of `record` (const or not) that `name` stands for; null for none.
template <typename Record, typename Slot, std::size_t N>
auto* slotNamed(Record& record, const Slot (&slots)[N], const std::string& name) {
    using Pointer = decltype(&(record.*slots[0].field));
    for (const auto& s : slots)
        if (name == s.name) return &(record.*s.field);
    return Pointer(nullptr);
}

}  // namespace

std::map<std::string, Trajectories::Ids> Trajectories::byName() const {
    std::map<std::string, Ids> out = presentByName(*this, kTrajectorySlots);
    out.insert(batch.begin(), batch.end());
    return out;
}

bool Trajectories::set(const std::string& name, Ids ids) {
    if (name.rfind("batch/", 0) == 0) {
        batch[name] = std::move(ids);
        return true;
    }
    std::optional<Ids>* named = slotNamed(*this, kTrajectorySlots, name);
    if (named) *named = std::move(ids);
    return named != nullptr;
}

const Trajectories::Ids* Trajectories::find(const std::string& name) const {
    if (const auto it = batch.find(name); it != batch.end()) return &it->second;
    const std::optional<Ids>* named = slotNamed(*this, kTrajectorySlots, name);
    return named && *named ? &**named : nullptr;
}

std::map<std::string, std::string> Fingerprints::byName() const { return presentByName(*this, kFingerprintSlots); }

bool Fingerprints::set(const std::string& name, std::string value) {
    std::optional<std::string>* named = slotNamed(*this, kFingerprintSlots, name);
    if (named) *named = std::move(value);
    return named != nullptr;
}

void readProtocolResult(ItemResults& r, const std::string& protocol, const json& data, const std::string& where) {
    const Fields f(data, where + ": " + protocol);
    if (protocol == "trace")
        r.trace = readTrace(f);
    else if (protocol == "matched")
        r.matched = readMatched(f);
    else if (protocol == "fixed_prefix_2x2")
        r.fixedPrefix2x2 = readFixedPrefix(f);
    else if (protocol == "bridge")
        r.bridge = readBridge(f);
    else if (protocol == "transplant")
        r.transplant = TransplantResult{f.text("layers"), f.kvParts("kv"), readVerdict(f.object("prefill_from_live")),
                                        readVerdict(f.object("live_from_prefill"))};
    else if (protocol == "localize")
        r.localize = readLocalize(f);
    else if (protocol == "audit")
        r.audit = AuditResult{f.boolean("reproduced"), f.texts("mismatches")};
    else if (protocol == "batch")
        r.batch = readBatch(f);
    else if (protocol == "caches")
        r.caches = readCaches(f);
    else if (protocol == "engine")
        r.engine = readEngine(f);
    else if (protocol.rfind(replayProtocol(""), 0) == 0 && protocol.size() > replayProtocol("").size())
        r.replays[protocol.substr(replayProtocol("").size())] = readReplay(f);
    else
        throw FormatError(where + ": unknown protocol '" + protocol + "' (a newer kvscope's ledger?)");
}

ItemResults itemResultsFromJson(const json& all, const std::string& where) {
    if (!all.is_object()) throw FormatError(where + ": results must be an object");
    ItemResults r;
    for (const auto& [protocol, data] : all.items()) readProtocolResult(r, protocol, data, where);
    return r;
}

std::vector<std::string> ItemResults::protocols() const {
    std::vector<std::string> names;
    const json all = toJson(*this);  // kept alive: items() only refers to it
    for (const auto& [name, part] : all.items())
        if (name != "caches") names.push_back(name);
    return names;
}

bool sameResults(const ItemResults& a, const ItemResults& b) { return toJson(a) == toJson(b); }

}  // namespace kvscope::experiments
