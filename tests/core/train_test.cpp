// SPDX-License-Identifier: MIT
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
#include <algorithm>
#include <set>
#include <sstream>

namespace kvscope {
namespace {

using namespace train;

// "85-19=66" or "19 + 85 = 104" -> checks the arithmetic of one written step.
bool stepIsCorrect(std::string step) {
    step.erase(std::remove(step.begin(), step.end(), ' '), step.end());
    const auto eq = step.find('=');
    const auto op = step.find_first_of("+-*", 1);
    const int64_t a = std::stoll(step.substr(0, op)), b = std::stoll(step.substr(op + 1, eq - op - 1));
    const int64_t c = std::stoll(step.substr(eq + 1));
    return c == (step[op] == '+' ? a + b : step[op] == '-' ? a - b : a * b);
}

std::vector<std::string> linesOf(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

TEST(ArithTask, ProblemsAreDeterministicAndTheirStepsAreRight) {
    for (const ArithFormat format : {ArithFormat::Plain, ArithFormat::Varied}) {
        ArithTaskSpec spec;
        spec.format = format;
        const ArithTask task(spec);
        for (std::uint64_t i = 0; i < 500; ++i) {
            const ArithProblem p = task.problem(7, i);
            EXPECT_EQ(p.completion(), task.problem(7, i).completion());
            ASSERT_GE(p.steps.size(), 2u);
            ASSERT_LE(p.steps.size(), 3u);
            int64_t value = p.steps[0].value;
            for (const ArithStep& s : p.steps) {
                EXPECT_TRUE(stepIsCorrect(s.plain())) << s.plain();
                EXPECT_EQ(s.value, value) << "each step starts from the last result";
                value = s.result;
                EXPECT_GE(value, 0);
                EXPECT_LE(value, task.spec().maxValue);
            }
            EXPECT_EQ(value, p.answer);
            EXPECT_EQ(parseAnswer(p.completion()), p.answer);
            // What the model is taught is right line by line, and the step labels count up.
            int label = 0;
            for (const std::string& line : linesOf(p.completion())) {
                if (line.rfind("Step ", 0) == 0) {
                    EXPECT_EQ(line.substr(0, line.find(':')), "Step " + std::to_string(++label)) << p.completion();
                    EXPECT_TRUE(stepIsCorrect(line.substr(line.find(':') + 2))) << line;
                } else if (line.rfind("Value: ", 0) == 0) {
                    EXPECT_EQ(format, ArithFormat::Varied) << "only the varied format restates";
                    EXPECT_EQ(std::stoll(line.substr(7)), p.steps[static_cast<std::size_t>(label - 1)].result) << line;
                } else {
                    EXPECT_EQ(line, "Answer: " + std::to_string(p.answer)) << p.completion();
                }
            }
            EXPECT_EQ(label, static_cast<int>(p.steps.size()));
        }
        EXPECT_NE(task.problem(7, 0).question, task.problem(8, 0).question);
    }
}

TEST(ArithTask, PlainFormatIsTheOriginalTaskAndVariedDrawsEachChoiceAboutHalfTheTime) {
    ArithTaskSpec plainSpec, variedSpec;
    plainSpec.format = ArithFormat::Plain;
    const ArithTask plain(plainSpec), varied(variedSpec);
    // Pinned from 0.1's shipped test.jsonl (recipe seed 1): the plain format draws what it always did.
    const std::vector<ArithProblem> test = plain.draw(1, Split::Test, 3);
    EXPECT_EQ(test[0].prompt() + test[0].completion(), "Q: 28-26+15\nStep 1: 28-26=2\nStep 2: 2+15=17\nAnswer: 17");
    EXPECT_EQ(test[1].question, "16*6*2-4");
    EXPECT_EQ(test[2].question, "44+23-43");
    int commutative = 0, swapped = 0, steps = 0, spaced = 0, restated = 0;
    for (std::uint64_t i = 0; i < 2000; ++i) {
        const ArithProblem a = plain.problem(3, i), b = varied.problem(3, i);
        ASSERT_EQ(a.question, b.question) << "the format changes only how the steps are written";
        ASSERT_EQ(a.answer, b.answer);
        std::size_t step = 0;
        for (const std::string& line : linesOf(b.completion())) {
            if (line.rfind("Value: ", 0) == 0) ++restated;
            if (line.rfind("Step ", 0) != 0) continue;
            const ArithStep& s = b.steps[step++];
            const std::string body = line.substr(line.find(':') + 2);
            ++steps;
            spaced += body.find(' ') != std::string::npos;
            if (s.op == '-') continue;
            ++commutative;
            swapped += std::stoll(body) != s.value;
        }
    }
    auto nearHalf = [](int k, int n) { return std::abs(static_cast<double>(k) / n - 0.5) < 0.05; };
    EXPECT_TRUE(nearHalf(spaced, steps)) << spaced << "/" << steps;
    EXPECT_TRUE(nearHalf(restated, steps)) << restated << "/" << steps;
    EXPECT_TRUE(nearHalf(swapped, commutative)) << swapped << "/" << commutative;
    EXPECT_THROW(parseArithFormat("fancy"), UsageError);
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
        EXPECT_TRUE(torch::allclose(part, alone, 1e-5, 1e-5))
            << "sequence " << k << " max diff " << (part - alone).abs().max().item<double>();
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
    // The reproducibility the model card promises is one thread's (train-demo-model's default). With
    // two, PyTorch's wheel gave the first of two trainings other weights in two fresh CI-like runs
    // (the same other weights both times) and in 2 of ~160 local runs with 3-4 test processes at a
    // time, never in reruns alone; see docs/ARCHITECTURE.md, "Training the demo model".
    r.threads = 1;
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
    EXPECT_EQ(a.fingerprint, b.fingerprint) << "same recipe, same machine, one thread: same weights";
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
