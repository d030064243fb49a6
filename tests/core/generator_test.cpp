// SPDX-License-Identifier: MIT
// prefill / decodeOne / decodeN and their stop rules.
#include "core/decode/generator.h"
#include "core/model/safetensors.h"
#include "core/model/random_checkpoint.h"
#include "core/util/error.h"
#include "core/text/tokenizer.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvscope {
namespace {

class GeneratorTest : public ::testing::Test {
protected:
    Transformer model = Transformer::load(test::tinyModel("qwen2"), torch::kFloat32, torch::kCPU);
    Generator gen{model};
    std::vector<int64_t> prompt = {10, 20, 30, 40, 50};
};

TEST_F(GeneratorTest, GreedyGenerationIsReproducibleAndMatchesManualSteps) {
    StopRules stops;
    stops.maxNewTokens = 12;
    GenerationResult a = gen.generate(prompt, {}, stops);
    GenerationResult b = gen.generate(prompt, {}, stops);
    ASSERT_EQ(a.ids.size(), 12u);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.stopReason, StopReason::MaxNewTokens);

    // The same by hand: prefill, then argmax and decodeOne.
    KvCache cache = model.newCache();
    torch::Tensor logits = gen.prefill(prompt, cache);
    for (std::size_t i = 0; i < a.ids.size(); ++i) {
        const int64_t id = chooseToken(logits, {}, 0).id;
        EXPECT_EQ(id, a.ids[i]) << "step " << i;
        logits = gen.decodeOne(id, cache);
    }
}

TEST_F(GeneratorTest, StopsAtEosAndIncludesIt) {
    StopRules stops;
    stops.maxNewTokens = 12;
    const GenerationResult free = gen.generate(prompt, {}, stops);
    stops.eosIds = {free.ids[3]};
    const GenerationResult r = gen.generate(prompt, {}, stops);
    EXPECT_EQ(r.stopReason, StopReason::Eos);
    const auto firstHit = std::find(free.ids.begin(), free.ids.end(), free.ids[3]) - free.ids.begin();
    EXPECT_EQ(static_cast<std::ptrdiff_t>(r.ids.size()), firstHit + 1);
    EXPECT_EQ(r.ids.back(), free.ids[3]);
}

TEST_F(GeneratorTest, StopsAtStopString) {
    Tokenizer tok = Tokenizer::fromModelDir(test::tinyModel("qwen2"));
    StopRules stops;
    stops.maxNewTokens = 12;
    stops.detokenize = [&](const std::vector<int64_t>& ids) { return tok.decode(ids); };
    const GenerationResult free = gen.generate(prompt, {}, stops);
    const std::string target = tok.decode({free.ids[4]});
    ASSERT_FALSE(target.empty());
    stops.stopStrings = {target};
    const GenerationResult r = gen.generate(prompt, {}, stops);
    EXPECT_EQ(r.stopReason, StopReason::StopString);
    EXPECT_LE(r.ids.size(), 5u);
    EXPECT_NE(tok.decode(r.ids).find(target), std::string::npos);
}

TEST_F(GeneratorTest, CallbackSeesEveryTokenAndCanCancel) {
    StopRules stops;
    stops.maxNewTokens = 10;
    int seen = 0;
    const GenerationResult r = gen.generate(prompt, {}, stops, [&](const StepRecord&, int64_t index) {
        EXPECT_EQ(index, seen);
        return ++seen < 4;
    });
    EXPECT_EQ(seen, 4);
    EXPECT_EQ(r.ids.size(), 4u);
    EXPECT_EQ(r.stopReason, StopReason::Cancelled);
}

TEST_F(GeneratorTest, SeededSamplingIsReproducibleAndContinuationFromAnyCacheDrawsTheSameNumbers) {
    StopRules stops;
    stops.maxNewTokens = 8;
    SamplingParams sampling{1.5, 0, 1.0, 1234};
    KvCache live;
    const GenerationResult a = gen.generate(prompt, sampling, stops, {}, &live);
    const GenerationResult b = gen.generate(prompt, sampling, stops);
    EXPECT_EQ(a.ids, b.ids);
    // Continuing from a fresh prefill of prompt + the first 3 sampled tokens reproduces the rest in
    // fp32 (draws are keyed by absolute position, and fp32 prefill ~ live here).
    std::vector<int64_t> prefix = prompt;
    prefix.insert(prefix.end(), a.ids.begin(), a.ids.begin() + 3);
    KvCache cache = model.newCache();
    torch::Tensor logits = gen.prefill(prefix, cache);
    stops.maxNewTokens = 5;
    const GenerationResult rest = gen.decodeN(cache, logits, sampling, stops);
    EXPECT_EQ(rest.ids, std::vector<int64_t>(a.ids.begin() + 3, a.ids.end()));
}

}  // namespace
TEST(GeneratorLimits, StopsAtMaxPositionEmbeddingsAndRefusesALongerPrompt) {
    test::TempDir dir;
    RandomCheckpointSpec spec = test::tinySpec("qwen2");
    spec.maxPositionEmbeddings = 24;
    writeRandomCheckpoint(spec, dir.file("short"));
    const Transformer model = Transformer::load(dir.file("short"), torch::kFloat32, torch::kCPU);
    Generator gen(model);
    StopRules stops;
    stops.maxNewTokens = 3000000;  // reserves nothing like this up front (that used to be 1.7 GB of KV)
    KvCache cache;
    const std::vector<int64_t> prompt(10, 5);
    const GenerationResult r = gen.generate(prompt, SamplingParams{}, stops, {}, &cache);
    EXPECT_EQ(r.stopReason, StopReason::ContextFull);
    EXPECT_EQ(stopReasonName(r.stopReason), "max_position_embeddings");
    EXPECT_EQ(cache.length(), 24) << "every position the model has, and no more";
    EXPECT_EQ(r.ids.size(), 15u);
    EXPECT_LE(cache.capacity(), 24 + Generator::kUpfrontTokens);
    try {
        gen.generate(std::vector<int64_t>(30, 5), SamplingParams{}, stops);
        FAIL() << "a 30-token prompt does not fit 24 positions";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("max_position_embeddings (24)"), std::string::npos) << e.what();
    }
}

TEST(GeneratorLimits, NonFiniteLogitsAreAnErrorNamingTheFirstLayerAndOp) {
    test::TempDir dir;
    writeRandomCheckpoint(test::tinySpec("qwen2"), dir.file("broken"));
    const std::string weights = dir.file("broken") + "/model.safetensors";
    {
        SafetensorsFile f(weights);
        std::vector<std::pair<std::string, torch::Tensor>> tensors;
        for (const auto& e : f.entries()) {
            torch::Tensor t = f.read(e.name).clone();
            if (e.name == "model.layers.1.mlp.down_proj.weight") t.fill_(std::numeric_limits<float>::infinity());
            tensors.emplace_back(e.name, t);
        }
        writeSafetensors(weights, tensors);
    }
    const Transformer model = Transformer::load(dir.file("broken"), torch::kFloat32, torch::kCPU);
    try {
        Generator(model).generate({5, 6, 7}, SamplingParams{}, StopRules{});
        FAIL() << "a token was chosen from non-finite logits";
    } catch (const TensorError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("generated token 0"), std::string::npos) << message;
        EXPECT_NE(message.find("layer 1, op 'mlp'"), std::string::npos) << message;
    }
}

}  // namespace kvscope
