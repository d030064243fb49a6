// SPDX-License-Identifier: MIT
// kvscope cache build|info|diff|transplant|locate, and kvscope continue. The command-line forms are
// contracts users' scripts rely on; keep them.
#include "cli_common.h"

#include "core/cache/cache_diff.h"
#include "core/cache/cache_io.h"
#include "core/cache/constructions.h"
#include "core/cache/fingerprint.h"
#include "core/cache/locator.h"
#include "core/cache/transplant.h"
#include "core/util/error.h"

#include <cstdio>
#include <iostream>

namespace kvscope::cli {
namespace {

void addBuild(CLI::App* cache) {
    struct Options {
        ModelOptions model;
        std::string promptIds, idsFrom, construction, out;
        int64_t generate = 0;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = cache->add_subcommand("build", "Build a KV cache by a named construction and save it");
    addModelOptions(cmd, o->model);
    cmd->add_option("--prompt-ids", o->promptIds, "With --construction live: the prompt ids");
    cmd->add_option("--generate", o->generate, "With live: greedy tokens decoded and fed back")->check(kNonNegative);
    cmd->add_option("--ids-from", o->idsFrom, "Use the token ids (and prompt length) of this cache file")
        ->check(CLI::ExistingFile);
    cmd->add_option("--construction", o->construction, "live | prefill | incremental[:K] | chunked:N")->required();
    cmd->add_option("--out", o->out, "Output .safetensors file")->required();
    cmd->callback([o] {
        const Construction c = Construction::parse(o->construction);
        if ((c.kind == Construction::Kind::Live) != !o->promptIds.empty() ||
            (!o->promptIds.empty() && !o->idsFrom.empty()))
            throw UsageError("use --prompt-ids (with --generate) for live, and --ids-from for the other constructions");
        if (c.kind != Construction::Kind::Live && o->idsFrom.empty())
            throw UsageError("--construction " + o->construction + " needs --ids-from");
        if (!o->idsFrom.empty()) takeBuildFromCache(o->model, o->idsFrom);
        Transformer model = loadModel(o->model);
        KvCache built;
        if (c.kind == Construction::Kind::Live) {
            built = buildLiveCache(model, parseIdList(o->promptIds, "--prompt-ids"), o->generate);
        } else {
            const KvCache source = loadCache(o->idsFrom);
            built = buildCache(model, source.ids(), c, source.promptLength());
        }
        saveCache(built, o->out);
        std::cout << "wrote " << built.construction() << " cache of " << built.length() << " tokens to " << o->out
                  << " (fingerprint " << fingerprintCache(built).overall << ")\n";
    });
}

void addInfo(CLI::App* cache) {
    struct Options {
        std::string file;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = cache->add_subcommand("info", "Describe a saved KV cache");
    cmd->add_option("file", o->file, "Cache .safetensors file")->required()->check(CLI::ExistingFile);
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o] {
        const KvCache c = loadCache(o->file);
        const CacheFingerprint fp = fingerprintCache(c);
        nlohmann::json j = {{"fingerprint", fp.overall},
                            {"layers", c.numLayers()},
                            {"tokens", c.length()},
                            {"dtype", dtypeName(c.dtype())},
                            {"kernels", kernelsName(c.kernels())},
                            {"construction", c.construction()},
                            {"prompt_length", c.promptLength()},
                            {"kv_heads", c.numKvHeads()},
                            {"head_dim", c.headDim()},
                            {"ids_fingerprint", fp.ids},
                            {"model_fingerprint", c.modelFingerprint()},
                            {"has_next_logits", c.nextLogits().defined()},
                            {"layer_fingerprints", {{"k", fp.keys}, {"v", fp.values}}}};
        if (o->json) {
            std::cout << j.dump() << "\n";
            return;
        }
        for (const char* key : {"construction", "tokens", "prompt_length", "layers", "kv_heads", "head_dim", "dtype",
                                "kernels", "fingerprint", "model_fingerprint"})
            std::cout << key << ": " << (j[key].is_string() ? j[key].get<std::string>() : j[key].dump()) << "\n";
    });
}

void addDiff(CLI::App* cache) {
    struct Options {
        std::string a, b;
        bool json = false, full = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd =
        cache->add_subcommand("diff", "Compare two caches layer by layer, head by head, position by position");
    cmd->add_option("a", o->a, "First cache")->required()->check(CLI::ExistingFile);
    cmd->add_option("b", o->b, "Second cache")->required()->check(CLI::ExistingFile);
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->add_flag("--full", o->full, "With --json: include the [layer][head][position] grids");
    cmd->callback([o] {
        const KvCache a = loadCache(o->a), b = loadCache(o->b);
        if (a.modelFingerprint() != b.modelFingerprint()) throw UsageError("the two caches come from different models");
        const CacheDiff d = diffCaches(a, b);
        if (o->json)
            std::cout << cacheDiffJson(d, o->full).dump() << "\n";
        else
            printCacheDiff(d);
    });
}

void addTransplant(CLI::App* cache) {
    struct Options {
        std::string recipient, donor, layers, kv = "kv", keyLayers, valueLayers, positions, out;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = cache->add_subcommand("transplant", "Splice chosen layers of a donor cache into a recipient");
    cmd->add_option("--recipient", o->recipient, "Cache that keeps every other layer")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--donor", o->donor, "Cache the chosen layers come from")->required()->check(CLI::ExistingFile);
    CLI::Option* layers = cmd->add_option("--layers", o->layers, "all, or a list like 0-11,20");
    cmd->add_option("--kv", o->kv, "k, v or kv (default)")->needs(layers);
    CLI::Option* keyLayers =
        cmd->add_option("--key-layers", o->keyLayers, "Keys from these layers (all, or a list like 0-3)")
            ->excludes(layers);
    CLI::Option* valueLayers =
        cmd->add_option("--value-layers", o->valueLayers, "Values from these layers")->excludes(layers);
    cmd->add_option("--positions", o->positions, "Only positions a:b (half-open; either side may be empty)");
    cmd->add_option("--out", o->out, "Output cache file")->required();
    cmd->callback([o, layers, keyLayers, valueLayers] {
        if (!*layers && !*keyLayers && !*valueLayers)
            throw UsageError("cache transplant needs --layers (with --kv), or --key-layers and/or --value-layers");
        const KvCache recipient = loadCache(o->recipient), donor = loadCache(o->donor);
        const int64_t n = recipient.numLayers();
        KvSplice splice;
        if (*layers) {
            const KvParts parts = parseKvParts(o->kv);
            const auto chosen = TransplantSpec::parseLayers(o->layers, n);
            if (movesKeys(parts)) splice.keyLayers = chosen;
            if (movesValues(parts)) splice.valueLayers = chosen;
        } else {
            if (*keyLayers) splice.keyLayers = TransplantSpec::parseLayers(o->keyLayers, n, "--key-layers");
            if (*valueLayers) splice.valueLayers = TransplantSpec::parseLayers(o->valueLayers, n, "--value-layers");
        }
        if (!o->positions.empty()) {
            TransplantSpec range;
            range.parsePositions(o->positions);
            splice.positionBegin = range.positionBegin, splice.positionEnd = range.positionEnd;
        }
        const KvCache spliced = transplantKeysAndValues(recipient, donor, splice);
        saveCache(spliced, o->out);
        std::cout << "wrote " << spliced.construction() << " to " << o->out << "\n";
    });
}

void addLocate(CLI::App* cache) {
    struct Options {
        ModelOptions model;
        std::string a, b;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = cache->add_subcommand("locate", "Find the first op whose output differs between two constructions");
    addModelOptions(cmd, o->model);
    cmd->add_option("a", o->a, "First cache")->required()->check(CLI::ExistingFile);
    cmd->add_option("b", o->b, "Second cache")->required()->check(CLI::ExistingFile);
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o] {
        takeBuildFromCache(o->model, o->a);
        Transformer model = loadModel(o->model);
        const KvCache a = loadCacheFor(o->a, model), b = loadCacheFor(o->b, model);
        if (a.ids() != b.ids()) throw UsageError("the two caches were built from different token ids");
        auto rebuildable = [](const KvCache& c) {
            if (c.construction().rfind("transplant", 0) == 0)
                throw UsageError("a spliced cache (" + c.construction() +
                                 ") cannot be rebuilt; locate compares caches built by a construction");
            Construction k = Construction::parse(c.construction());
            if (k.kind == Construction::Kind::Live)
                k = Construction::parse("incremental:" + std::to_string(c.promptLength()));
            return k;
        };
        const LocatorReport r = locateDivergence(model, a.ids(), a.promptLength(), rebuildable(a), rebuildable(b));
        const bool reproducedA = r.cacheFingerprintA == fingerprintCache(a).overall;
        const bool reproducedB = r.cacheFingerprintB == fingerprintCache(b).overall;
        if (o->json) {
            std::cout << nlohmann::json{{"a", r.constructionA},
                                        {"b", r.constructionB},
                                        {"position", r.position},
                                        {"first_difference", firstDifferenceJson(r)},
                                        {"ops", locatorOpsJson(r)},
                                        {"rebuilt_matches_file", {{"a", reproducedA}, {"b", reproducedB}}}}
                             .dump()
                      << "\n";
            return;
        }
        std::cout << "comparing " << r.constructionA << " vs " << r.constructionB << " at position " << r.position
                  << "\n"
                  << firstDifferenceLine(r) << "\n";
        if (!reproducedA || !reproducedB) std::cout << "warning: a rebuilt cache does not match its file\n";
    });
}

void addContinue(CLI::App& app) {
    struct Options {
        ModelOptions model;
        std::string cache;
        DecodeOptions decode;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("continue", "Continue decoding from a saved KV cache (on a copy)");
    addModelOptions(cmd, o->model);
    cmd->add_option("--cache", o->cache, "Cache file")->required()->check(CLI::ExistingFile);
    addDecodeOptions(cmd, o->decode);
    cmd->add_flag("--json", o->json, "Print the same JSON as generate");
    cmd->callback([o] {
        takeBuildFromCache(o->model, o->cache);
        Transformer model = loadModel(o->model);
        const KvCache cache = loadCacheFor(o->cache, model);
        const StopRules stops = stopRulesFor(model, o->decode.maxNewTokens);
        printGeneration(cache.ids(), continueFrom(model, cache, o->decode.sampling, stops),
                        tokenizerIfPresent(o->model.model), o->json);
    });
}

}  // namespace

void addCacheCommands(CLI::App& app) {
    CLI::App* cache = app.add_subcommand("cache", "Build, inspect, compare, splice and locate KV caches");
    cache->require_subcommand(1);
    addBuild(cache);
    addInfo(cache);
    addDiff(cache);
    addTransplant(cache);
    addLocate(cache);
    addContinue(app);
}

}  // namespace kvscope::cli
