// The demo model's task and trainer: the data is deterministic and its splits are disjoint, the
// packed training forward equals running each sequence alone, and training is reproducible.
#include "core/model/transformer.h"
#include "core/text/tokenizer.h"
#include "core/train/arith_task.h"
#include "core/train/demo_trainer.h"
#include "core/util/error.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

namespace kvscope {
namespace {

using namespace train;

// "85-19=66" -> checks the arithmetic of one step.
bool stepIsCorrect(const std::string& step) {
    const auto eq = step.find('=');
    const auto op = step.find_first_of("+-*", 1);
    const int64_t a = std::stoll(step.substr(0, op)), b = std::stoll(step.substr(op + 1, eq - op - 1));
    const int64_t c = std::stoll(step.substr(eq + 1));
    return c == (step[op] == '+' ? a + b : step[op] == '-' ? a - b : a * b);
}

TEST(ArithTask, ProblemsAreDeterministicAndTheirStepsAreRight) {
    const ArithTask task;
    for (std::uint64_t i = 0; i < 500; ++i) {
        const ArithProblem p = task.problem(7, i);
        EXPECT_EQ(p.question, task.problem(7, i).question);
        ASSERT_GE(p.steps.size(), 2u);
        ASSERT_LE(p.steps.size(), 3u);
        int64_t value = std::stoll(p.steps[0].substr(0, p.steps[0].find_first_of("+-*", 1)));
        for (const std::string& s : p.steps) {
            EXPECT_TRUE(stepIsCorrect(s)) << s;
            EXPECT_EQ(std::stoll(s.substr(0, s.find_first_of("+-*", 1))), value) << "each step starts from the last result";
            value = std::stoll(s.substr(s.find('=') + 1));
            EXPECT_GE(value, 0);
            EXPECT_LE(value, task.spec().maxValue);
        }
        EXPECT_EQ(value, p.answer);
        EXPECT_EQ(parseAnswer(p.completion()), p.answer);
    }
    EXPECT_NE(task.problem(7, 0).question, task.problem(8, 0).question);
}

TEST(ArithTask, SplitsNeverShareAQuestion) {
    const ArithTask task;
    std::set<std::string> test, validation;
    for (const auto& p : task.draw(1, Split::Test, 200)) test.insert(p.question);
    for (const auto& p : task.draw(1, Split::Validation, 200)) validation.insert(p.question);
    EXPECT_EQ(test.size(), 200u);
    EXPECT_EQ(validation.size(), 200u);
    for (const auto& p : task.draw(1, Split::Train, 4000)) {
        EXPECT_EQ(test.count(p.question), 0u);
        EXPECT_EQ(validation.count(p.question), 0u);
    }
    for (const auto& q : test) EXPECT_EQ(validation.count(q), 0u);
}

TEST(ArithTask, ParseAnswerTakesTheLastAnswerLine) {
    EXPECT_EQ(parseAnswer("Step 1: 2+2=4\nAnswer: 4"), 4);
    EXPECT_EQ(parseAnswer("Answer: 3\nAnswer: 12"), 12);
    EXPECT_FALSE(parseAnswer("Step 1: 2+2=4\nAnswer:").has_value());
    EXPECT_FALSE(parseAnswer("Step 1: 2+2=4").has_value());
}

TEST(ForwardPacked, EachSequenceMatchesRunningItAlone) {
    const Transformer model = Transformer::load(test::tinyModel("qwen2"), torch::kFloat32, torch::kCPU);
    const std::vector<std::vector<int64_t>> sequences = {{5, 9, 14, 3}, {7, 1}, {11, 12, 13, 2, 8, 6}};
    std::vector<int64_t> packed, starts;
    for (const auto& s : sequences) {
        starts.push_back(static_cast<int64_t>(packed.size()));
        packed.insert(packed.end(), s.begin(), s.end());
    }
    torch::NoGradGuard noGrad;
    const torch::Tensor all = model.forwardPacked(packed, starts);  // [12, V]
    ASSERT_EQ(all.size(0), 12);
    for (std::size_t k = 0; k < sequences.size(); ++k) {
        KvCache cache = model.newCache();
        const torch::Tensor alone = model.forward(sequences[k], cache, Logits::All);
        const torch::Tensor part = all.narrow(0, starts[k], static_cast<int64_t>(sequences[k].size()));
        EXPECT_TRUE(torch::allclose(part, alone, 1e-5, 1e-5)) << "sequence " << k << " max diff "
                                                             << (part - alone).abs().max().item<double>();
    }
    EXPECT_THROW(model.forwardPacked(packed, {1, 4}), UsageError);
    EXPECT_THROW(model.forwardPacked(packed, {0, 40}), UsageError);
}

DemoRecipe tinyRecipe() {
    DemoRecipe r;
    r.hiddenSize = 32;
    r.numLayers = 1;
    r.numHeads = 2;
    r.numKvHeads = 1;
    r.intermediateSize = 64;
    r.bpeMerges = 8;
    r.steps = 30;
    r.tokensPerStep = 256;
    r.warmupSteps = 5;
    r.learningRate = 5e-3;
    r.testItems = 3;
    r.validationItems = 3;
    r.threads = 2;
    return r;
}

TEST(DemoTrainer, WritesALoadableCheckpointAndIsReproducible) {
    test::TempDir dir;
    std::atomic<bool> stop{false};
    std::vector<double> losses;
    auto record = [&](const TrainingProgress& p) {
        if (p.phase == "train") losses.push_back(p.loss);
    };
    const TrainingResult a = trainDemoModel(tinyRecipe(), dir.file("a"), record, stop, 10);
    ASSERT_EQ(losses.size(), 3u);
    EXPECT_LT(losses.back(), losses.front() * 0.8) << "the loss should fall within 30 steps";
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors", "test.jsonl",
                          "validation.jsonl", "README.md"})
        EXPECT_TRUE(std::filesystem::exists(dir.file("a") + "/" + f)) << f;
    EXPECT_FALSE(std::filesystem::exists(dir.file("a.partial")));
    const Transformer loaded = Transformer::load(dir.file("a"), torch::kBFloat16, torch::kCPU);
    EXPECT_EQ(loaded.fingerprint(), a.fingerprint);
    EXPECT_TRUE(loaded.config().attentionBias);
    const Tokenizer tokenizer = Tokenizer::fromModelDir(dir.file("a"));
    EXPECT_EQ(tokenizer.decode(tokenizer.encode("Q: 12+3\nStep 1: 12+3=15\n", false)), "Q: 12+3\nStep 1: 12+3=15\n");
    ASSERT_EQ(a.test.size(), 2u);
    EXPECT_EQ(a.test[0].total, 3);
    EXPECT_NE(test::readTextFile(dir.file("a") + "/README.md").find(a.fingerprint), std::string::npos);

    const TrainingResult b = trainDemoModel(tinyRecipe(), dir.file("b"), {}, stop, 10);
    EXPECT_EQ(a.fingerprint, b.fingerprint) << "same recipe, same machine, same threads: same weights";
    DemoRecipe other = tinyRecipe();
    other.seed = 2;
    EXPECT_NE(trainDemoModel(other, dir.file("c"), {}, stop, 10).fingerprint, a.fingerprint);
}

TEST(DemoTrainer, CancelledTrainingLeavesNothingBehind) {
    test::TempDir dir;
    std::atomic<bool> stop{true};
    EXPECT_THROW(trainDemoModel(tinyRecipe(), dir.file("m"), {}, stop), Cancelled);
    EXPECT_FALSE(std::filesystem::exists(dir.file("m")));
    EXPECT_FALSE(std::filesystem::exists(dir.file("m.partial")));
}

}  // namespace
}  // namespace kvscope
