// SPDX-License-Identifier: MIT
#include "experiments/experiment_config.h"

#include "core/model/catalog.h"
#include "core/model/random_checkpoint.h"
#include "core/text/regex.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/fault_injection.h"
#include "core/util/file_names.h"
#include "core/util/parse.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <tuple>
#include <type_traits>
#include <vector>

namespace kvscope::experiments {
namespace fs = std::filesystem;

std::string choiceName(BoundaryRule rule) {
    switch (rule) {
    case BoundaryRule::Marker: return "marker";
    case BoundaryRule::Offset: return "offset";
    case BoundaryRule::Fraction: return "fraction";
    }
    return "?";
}

std::string choiceName(TransplantSelection selection) {
    return selection == TransplantSelection::All ? "all" : "sample";
}

std::string choiceName(ChatTemplate chatTemplate) { return chatTemplateName(chatTemplate); }

std::string choiceName(KvParts parts) { return kvPartsName(parts); }

std::string choiceName(Protocol protocol) {
    switch (protocol) {
    case Protocol::Matched: return "matched";
    case Protocol::FixedPrefix2x2: return "fixed_prefix_2x2";
    case Protocol::Bridge: return "bridge";
    case Protocol::Audit: return "audit";
    case Protocol::Transplant: return "transplant";
    case Protocol::Localize: return "localize";
    case Protocol::Batch: return "batch";
    }
    return "?";
}

const std::vector<Protocol>& allProtocols() {
    static const std::vector<Protocol> all = {Protocol::Matched, Protocol::FixedPrefix2x2, Protocol::Bridge,
                                              Protocol::Audit,   Protocol::Transplant,     Protocol::Localize};
    return all;
}

const std::vector<Protocol>& knownProtocols() {
    static const std::vector<Protocol> known = [] {
        std::vector<Protocol> all = allProtocols();
        all.push_back(Protocol::Batch);
        return all;
    }();
    return known;
}

namespace {

// Reads one TOML table, remembering which keys were used so the rest can be reported as unknown.
class Table {
public:
    Table(const toml::table* t, std::string where, std::string file)
        : t_(t), where_(std::move(where)), file_(std::move(file)) {}

    template <typename T>
    void read(const char* key, T& out) {
        used_.insert(key);
        if (!t_ || !t_->contains(key)) return;
        // toml++ converts a float to an integer type with a plain cast: 1e85 is undefined behaviour
        // and 2.5 would become 2. An integer key takes only TOML integers.
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
            if (!(*t_)[key].is_integer()) fail(key, "must be an integer");
        auto v = (*t_)[key].value<T>();
        if (!v) fail(key, "has the wrong type");
        out = *v;
    }
    // An array of strings or of integers (TOML integers only, as read() takes them).
    template <typename T>
    void readArray(const char* key, std::vector<T>& out) {
        const char* what = std::is_integral_v<T> ? "must be an array of integers" : "must be an array of strings";
        used_.insert(key);
        if (!t_ || !t_->contains(key)) return;
        const toml::array* arr = (*t_)[key].as_array();
        if (!arr) fail(key, what);
        out.clear();
        for (const auto& e : *arr) {
            const auto v = e.value<T>();
            if (!v || (std::is_integral_v<T> && !e.is_integer())) fail(key, what);
            out.push_back(*v);
        }
    }
    void rejectUnknown() const {
        if (!t_) return;
        for (const auto& [key, value] : *t_)
            if (!used_.count(std::string(key.str())) && !value.is_table())
                throw ConfigError(file_ + ": unknown key '" + where_ + std::string(key.str()) + "'");
    }
    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw ConfigError(file_ + ": key '" + where_ + key + "' " + what);
    }

private:
    const toml::table* t_;
    std::string where_, file_;
    std::set<std::string> used_;
};

// [batch] sizes = [1, 2, 8], padding = "left": the batch protocol's batches (1, alone, always among them).
void readBatchSection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table batch(table, "batch.", path);
    batch.readArray("sizes", c.batchSizes);
    batch.read("padding", c.batchPadding);
    batch.rejectUnknown();
    if (c.batchPadding != "left")
        batch.fail("padding",
                   "is '" + c.batchPadding + "' (expected \"left\": decoder-only generation pads on the left)");
    for (const int64_t size : c.batchSizes)
        if (size < 1 || size > 64) batch.fail("sizes", "holds " + std::to_string(size) + " (expected 1 to 64)");
    if (std::find(c.batchSizes.begin(), c.batchSizes.end(), 1) == c.batchSizes.end()) c.batchSizes.push_back(1);
    std::sort(c.batchSizes.begin(), c.batchSizes.end());
    c.batchSizes.erase(std::unique(c.batchSizes.begin(), c.batchSizes.end()), c.batchSizes.end());
}

void requireOneOf(const std::string& file, const std::string& key, const std::string& value,
                  std::set<std::string> allowed) {
    if (allowed.count(value)) return;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    throw ConfigError(file + ": key '" + key + "' is '" + value + "' (expected one of " + list + ")");
}

// The choice `value` names, of `all`; ConfigError as requireOneOf's otherwise.
template <typename Choice>
Choice readChoice(const std::string& file, const std::string& key, const std::string& value,
                  const std::vector<Choice>& all) {
    std::set<std::string> names;
    for (const Choice c : all) names.insert(choiceName(c));
    requireOneOf(file, key, value, names);
    for (const Choice c : all)
        if (choiceName(c) == value) return c;
    return all.front();  // not reached: requireOneOf threw
}
template <typename Choice>
Choice readChoice(const std::string& file, const std::string& key, const std::string& value,
                  std::initializer_list<Choice> all) {
    return readChoice(file, key, value, std::vector<Choice>(all));
}

// An absolute path for `key`'s value, relative to the experiment file's folder. A name the file
// system refuses (too long, say) is the file's error, not a crash.
std::string resolve(const fs::path& base, const std::string& p, const std::string& file, const char* key) {
    try {
        return fs::weakly_canonical(fs::path(p).is_absolute() ? fs::path(p) : base / p).string();
    } catch (const fs::filesystem_error& e) {
        throw ConfigError(file + ": key '" + key + "' is not a usable path (" + e.code().message() + ")");
    }
}

// Every table of the file is a known section ([model.generate] the only table inside one).
void checkSections(const toml::table& root, const std::string& path) {
    if (const toml::table* m = root["model"].as_table())
        for (const auto& [key, value] : *m)
            if (value.is_table() && key.str() != "generate")
                throw ConfigError(path + ": unknown section [model." + std::string(key.str()) + "]");
    static const std::set<std::string> sections = {"model",  "dataset",   "generation", "boundary",
                                                   "answer", "protocols", "transplant", "batch"};
    for (const auto& [key, value] : root)
        if (value.is_table() && !sections.count(std::string(key.str())))
            throw ConfigError(path + ": unknown section [" + std::string(key.str()) + "]");
}

// [model.generate]: a deterministic test model's shape, checked here so the message names this
// file (the generated config.json is checked again on load).
void readGenerateSection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table gen(table, "model.generate.", path);
    std::string arch = "qwen2";
    int64_t seed = 0, hidden = 64, layers = 2, heads = 4, kvHeads = 2, intermediate = 128;
    gen.read("arch", arch);
    gen.read("seed", seed);
    gen.read("hidden_size", hidden);
    gen.read("layers", layers);
    gen.read("heads", heads);
    gen.read("kv_heads", kvHeads);
    gen.read("intermediate_size", intermediate);
    gen.rejectUnknown();
    requireOneOf(path, "model.generate.arch", arch, {"qwen2", "llama", "qwen3"});
    using Bound = std::tuple<const char*, int64_t, int64_t>;  // field, value, largest allowed
    for (const auto& [key, value, most] :
         {Bound{"hidden_size", hidden, 8192}, Bound{"layers", layers, 256}, Bound{"heads", heads, 256},
          Bound{"kv_heads", kvHeads, 256}, Bound{"intermediate_size", intermediate, 65536}})
        if (value < 1 || value > most)
            gen.fail(key,
                     "must be an integer from 1 to " + std::to_string(most) + " (is " + std::to_string(value) + ")");
    if (heads % kvHeads != 0) gen.fail("kv_heads", "must divide heads");
    if (hidden % heads != 0 || (hidden / heads) % 2 != 0)
        gen.fail("hidden_size", "must be heads times an even head size");
    c.generateModel = true;
    c.generateSpec = {{"arch", arch},
                      {"seed", seed},
                      {"hidden_size", hidden},
                      {"layers", layers},
                      {"heads", heads},
                      {"kv_heads", kvHeads},
                      {"intermediate_size", intermediate}};
}

// [model]: where the model is (a folder or .gguf file, or a catalog name), its dtypes, device,
// kernels and threads; relative paths against the file's folder `base`.
void readModelSection(const toml::table& root, const fs::path& base, const std::string& path, ExperimentConfig& c) {
    Table model(root["model"].as_table(), "model.", path);
    model.read("dir", c.modelDir);
    model.read("catalog", c.modelCatalog);
    model.readArray("dtypes", c.dtypes);
    model.read("device", c.device);
    std::string kernels = "torch";
    model.read("kernels", kernels);
    int64_t threads = 0;
    model.read("threads", threads);
    c.threads = static_cast<int>(threads);
    model.rejectUnknown();
    requireOneOf(path, "model.kernels", kernels, {"torch", "invariant", "invariant-tiles"});
    c.kernels = parseKernels(kernels);
    if (isInvariant(c.kernels) && c.device != "cpu")
        model.fail("kernels", "\"" + kernels + "\" runs on the CPU only (device is \"" + c.device + "\")");
    if (const toml::table* g = root["model"]["generate"].as_table()) readGenerateSection(g, path, c);
    if (!c.modelCatalog.empty()) {
        if (!c.modelDir.empty()) model.fail("catalog", "and model.dir both name the model: give one");
        try {
            c.modelDir = catalogModelPath(catalogModel(c.modelCatalog));
        } catch (const UsageError& e) {
            model.fail("catalog", e.what());
        }
    } else {
        if (c.modelDir.empty()) model.fail("dir", "is required (or catalog, a model kvscope fetches)");
        c.modelDir = resolve(base, c.modelDir, path, "model.dir");
    }
    if (c.dtypes.empty()) model.fail("dtypes", "must name at least one dtype");
    for (const auto& d : c.dtypes) requireOneOf(path, "model.dtypes", d, {"fp32", "bf16", "fp16"});
}

void readDatasetSection(const toml::table* table, const fs::path& base, const std::string& path, ExperimentConfig& c) {
    Table data(table, "dataset.", path);
    data.read("path", c.datasetPath);
    std::string chatTemplate = choiceName(c.chatTemplate);
    data.read("chat_template", chatTemplate);
    data.rejectUnknown();
    if (c.datasetPath.empty()) data.fail("path", "is required");
    c.datasetPath = resolve(base, c.datasetPath, path, "dataset.path");
    c.chatTemplate = readChoice(path, "dataset.chat_template", chatTemplate,
                                {ChatTemplate::Auto, ChatTemplate::Plain, ChatTemplate::ChatML, ChatTemplate::Llama3});
}

void readGenerationSection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table gen(table, "generation.", path);
    gen.read("max_new_tokens", c.maxNewTokens);
    gen.readArray("stop", c.stopStrings);
    gen.read("ignore_eos", c.ignoreEos);
    gen.read("temperature", c.sampling.temperature);
    gen.read("top_k", c.sampling.topK);
    gen.read("top_p", c.sampling.topP);
    int64_t seed = 0;
    gen.read("seed", seed);
    c.sampling.seed = static_cast<std::uint64_t>(seed);
    gen.rejectUnknown();
    if (c.maxNewTokens <= 0 || c.maxNewTokens > 1 << 20) gen.fail("max_new_tokens", "must be from 1 to 1048576");
    if (!(c.sampling.temperature >= 0)) gen.fail("temperature", "must be >= 0 (0 is greedy)");
    if (c.sampling.topK < 0) gen.fail("top_k", "must be >= 0 (0 is all tokens)");
    if (!(c.sampling.topP > 0 && c.sampling.topP <= 1)) gen.fail("top_p", "must be in (0, 1]");
}

void readBoundarySection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table boundary(table, "boundary.", path);
    std::string rule = choiceName(c.boundaryRule);
    boundary.read("rule", rule);
    boundary.read("marker", c.boundaryMarker);
    boundary.read("offset", c.boundaryOffset);
    boundary.read("fraction", c.boundaryFraction);
    boundary.rejectUnknown();
    c.boundaryRule =
        readChoice(path, "boundary.rule", rule, {BoundaryRule::Marker, BoundaryRule::Offset, BoundaryRule::Fraction});
    if (c.boundaryRule == BoundaryRule::Offset && c.boundaryOffset < 1)
        boundary.fail("offset", "must be a positive number of generated tokens");
    if (c.boundaryRule == BoundaryRule::Marker && c.boundaryMarker.empty())
        boundary.fail("marker", "must not be empty");
    if (c.boundaryRule == BoundaryRule::Fraction && (c.boundaryFraction <= 0 || c.boundaryFraction >= 1))
        boundary.fail("fraction", "must be strictly between 0 and 1");
}

void readAnswerSection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table answer(table, "answer.", path);
    std::string extract = choiceName(c.answerExtract);
    answer.read("extract", extract);
    answer.read("regex", c.answerRegex);
    answer.rejectUnknown();
    c.answerExtract = readChoice(path, "answer.extract", extract,
                                 {AnswerExtraction::LastNumber, AnswerExtraction::Regex, AnswerExtraction::Boxed});
    if (c.answerExtract != AnswerExtraction::Regex) return;
    if (c.answerRegex.empty()) answer.fail("regex", "is required when extract = \"regex\"");
    try {  // compiled now, not after a model has generated every item
        const Regex compiled(c.answerRegex, false, RegexRole::Answer);
    } catch (const FormatError& e) {
        answer.fail("regex", "is not a valid regular expression (" + std::string(e.what()) + ")");
    }
}

// [protocols]: which run (the study's unless told) and the 2x2's precisions; after [model], whose
// kernels decide which precisions can be computed.
void readProtocolsSection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table protocols(table, "protocols.", path);
    std::vector<std::string> run;
    for (Protocol p : allProtocols()) run.push_back(choiceName(p));
    protocols.readArray("run", run);
    protocols.readArray("precisions", c.precisions);
    protocols.rejectUnknown();
    if (c.precisions.empty()) protocols.fail("precisions", "is empty (expected names such as \"bf16\", \"fp32\")");
    for (const auto& name : c.precisions) {
        std::string dtype;
        try {
            dtype = parsePrecision(name).dtype;
        } catch (const UsageError& e) {
            protocols.fail("precisions", e.what());
        }
        if (dtype == "fp16" && isInvariant(c.kernels))
            protocols.fail("precisions", "names fp16, which invariant kernels do not compute (they do bf16 and fp32)");
        if (std::count(c.precisions.begin(), c.precisions.end(), name) > 1)
            protocols.fail("precisions", "names '" + name + "' twice");
    }
    c.protocols.clear();
    for (const auto& name : run) c.protocols.insert(readChoice(path, "protocols.run", name, knownProtocols()));
}

void readTransplantSection(const toml::table* table, const std::string& path, ExperimentConfig& c) {
    Table transplant(table, "transplant.", path);
    transplant.read("layers", c.transplantLayers);
    std::string parts = kvPartsName(c.transplantParts);
    transplant.read("kv", parts);
    std::string selection = choiceName(c.transplantSelection);
    transplant.read("selection", selection);
    transplant.read("sample_fraction", c.transplantSampleFraction);
    int64_t seed = 0;
    transplant.read("seed", seed);
    c.transplantSeed = static_cast<std::uint64_t>(seed);
    transplant.rejectUnknown();
    c.transplantParts = readChoice(path, "transplant.kv", parts, {KvParts::Keys, KvParts::Values, KvParts::Both});
    c.transplantSelection =
        readChoice(path, "transplant.selection", selection, {TransplantSelection::All, TransplantSelection::Sample});
}

}  // namespace

ExperimentConfig ExperimentConfig::load(const std::string& path) {
    toml::table root;
    try {
        root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        throw ConfigError(path + ": " + std::string(e.description()) + " (line " +
                          std::to_string(e.source().begin.line) + ")");
    }
    ExperimentConfig c;
    c.sourcePath = fs::weakly_canonical(path).string();  // parse_file just read it: a usable name
    c.protocols = {allProtocols().begin(), allProtocols().end()};
    const fs::path base = fs::path(c.sourcePath).parent_path();
    checkSections(root, path);
    Table top(&root, "", path);
    top.read("name", c.name);
    top.rejectUnknown();
    if (c.name.empty()) c.name = fs::path(path).stem().string();
    readModelSection(root, base, path, c);
    readDatasetSection(root["dataset"].as_table(), base, path, c);
    readGenerationSection(root["generation"].as_table(), path, c);
    readBoundarySection(root["boundary"].as_table(), path, c);
    readAnswerSection(root["answer"].as_table(), path, c);
    readProtocolsSection(root["protocols"].as_table(), path, c);
    readTransplantSection(root["transplant"].as_table(), path, c);
    readBatchSection(root["batch"].as_table(), path, c);
    return c;
}

namespace {

// Staging folders MODEL.PID.partial of generators that died (a PID no longer running on this host).
void removeAbandonedStagingFolders(const fs::path& target) {
    const std::string prefix = target.filename().string() + ".", suffix = ".partial";
    std::error_code ec;
    for (const auto& entry :
         fs::directory_iterator(target.parent_path().empty() ? fs::path(".") : target.parent_path(), ec)) {
        const std::string name = entry.path().filename().string();
        if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
            continue;
        const auto pid = parseNonNegativeInt(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
        if (pid && *pid > 0 && *pid < (int64_t{1} << 31) && ::kill(static_cast<pid_t>(*pid), 0) != 0 &&
            errno == ESRCH) {
            fault::point("removal of an abandoned model staging folder");
            fs::remove_all(entry.path(), ec);
        }
    }
}

// Moves every file of `from` into `to`, replacing same-named ones, config.json last (a folder without
// it is "no model yet"), then removes `from` and any stray .partial in `to`.
void moveFilesInto(const fs::path& from, const fs::path& to) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(from)) files.push_back(entry.path());
    std::stable_partition(files.begin(), files.end(), [](const fs::path& f) { return f.filename() != "config.json"; });
    for (const fs::path& file : files) {
        fault::point("move of a generated model file into place");
        fs::rename(file, to / file.filename());
    }
    fs::remove(from);
    removePartialFiles(to.string());
}

}  // namespace

// The shards of a job array (or two runs) may generate the same model at once: each writes its own
// staging folder MODEL.PID.partial and renames it into place, and whoever comes second finds the
// model there and drops its copy (the same spec gives the same bytes). A generator killed midway
// leaves only its staging folder, removed by the next one. Where MODEL already holds other files
// (a half model an earlier kvscope wrote in place, or the user's own), the files move in one by one.
void ExperimentConfig::generateModelIfMissing() const {
    const fs::path target(modelDir);
    if (!generateModel || pathExists(target / "config.json")) return;
    RandomCheckpointSpec spec;
    const std::string arch = generateSpec["arch"];
    spec.architecture = arch == "llama"   ? Architecture::Llama
                        : arch == "qwen3" ? Architecture::Qwen3
                                          : Architecture::Qwen2;
    spec.seed = generateSpec["seed"].get<std::uint64_t>();
    spec.hiddenSize = generateSpec["hidden_size"];
    spec.numLayers = generateSpec["layers"];
    spec.numHeads = generateSpec["heads"];
    spec.numKvHeads = generateSpec["kv_heads"];
    spec.intermediateSize = generateSpec["intermediate_size"];

    removeAbandonedStagingFolders(target);
    const fs::path staging = modelDir + "." + std::to_string(::getpid()) + ".partial";
    std::error_code ec;
    fs::remove_all(staging, ec);
    writeRandomCheckpoint(spec, staging.string());
    fs::remove(target, ec);  // only an empty folder goes (say, one the user made for it)
    fault::point("rename of a generated model folder into place");
    fs::rename(staging, target, ec);
    if (ec && pathExists(target / "config.json")) {
        fs::remove_all(staging);  // another process put the same model there first
        return;
    }
    if (ec) moveFilesInto(staging, target);  // a folder with other files (or an older kvscope's half model)
    syncParentFolder(target.string());
}

std::vector<std::string> ExperimentConfig::protocolNames() const {
    std::vector<std::string> names;
    for (Protocol p : protocols) names.push_back(choiceName(p));
    std::sort(names.begin(), names.end());
    return names;
}

nlohmann::json ExperimentConfig::toJson() const {
    nlohmann::json j = {{"name", name},
                        {"source", sourcePath},
                        {"model",
                         {{"dir", modelDir},
                          {"dtypes", dtypes},
                          {"device", device},
                          {"kernels", kernelsName(kernels)},
                          {"generate", generateModel ? generateSpec : nlohmann::json(nullptr)}}},
                        {"dataset", {{"path", datasetPath}, {"chat_template", choiceName(chatTemplate)}}},
                        {"generation",
                         {{"max_new_tokens", maxNewTokens},
                          {"stop", stopStrings},
                          {"ignore_eos", ignoreEos},
                          {"temperature", sampling.temperature},
                          {"top_k", sampling.topK},
                          {"top_p", sampling.topP},
                          {"seed", sampling.seed}}},
                        {"boundary",
                         {{"rule", choiceName(boundaryRule)},
                          {"marker", boundaryMarker},
                          {"offset", boundaryOffset},
                          {"fraction", boundaryFraction}}},
                        {"answer", {{"extract", choiceName(answerExtract)}, {"regex", answerRegex}}},
                        {"protocols", protocolNames()},
                        {"transplant",
                         {{"layers", transplantLayers},
                          {"kv", kvPartsName(transplantParts)},
                          {"selection", choiceName(transplantSelection)},
                          {"sample_fraction", transplantSampleFraction},
                          {"seed", transplantSeed}}}};
    if (!modelCatalog.empty()) j["model"]["catalog"] = modelCatalog;  // only then: older runs keep their ids
    if (precisions != std::vector<std::string>{"bf16", "fp32"}) j["precisions"] = precisions;  // likewise
    if (runs(Protocol::Batch)) j["batch"] = {{"sizes", batchSizes}, {"padding", batchPadding}};
    return j;
}

}  // namespace kvscope::experiments
