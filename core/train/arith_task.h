// SPDX-License-Identifier: MIT
#pragma once
// The demo model's task: multi-step arithmetic written out stage by stage.
//
//   plain                          varied (the default): equivalent choices drawn 50/50 per step
//   Q: 37+48-19*2                  Q: 37+48-19*2                  <- the prompt
//   Step 1: 37+48=85               Step 1: 48 + 37 = 85           <- one operation per stage
//   Step 2: 85-19=66               Value: 85                      <- optional restatement
//   Step 3: 66*2=132               Step 2: 85-19=66
//   Answer: 132                    Step 3: 2*66=132
//                                  Answer: 132
//
// The varied format gives the model what a reasoning model has and the plain one lacks: steps where
// several continuations are equally right. Each choice (operand order of + and *, spacing, a
// restatement line) is drawn uniformly for every training sequence, so the model learns near-50/50
// next-token distributions there, and bf16 construction noise can decide them. The "Step N:"
// labels never vary, so an experiment's "\nStep 2:" boundary marker stays unambiguous.
//
// Problems are a pure function of (seed, index). Which split a problem belongs to is a pure function
// of its question text (a hash), so train, validation and test never share a question however many
// problems each draws.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::train {

enum class Split { Train, Validation, Test };
const char* splitName(Split split);

enum class ArithFormat { Plain, Varied };
const char* formatName(ArithFormat format);
ArithFormat parseArithFormat(const std::string& name);  // "plain" | "varied", else UsageError

struct ArithStep {
    int64_t value = 0;                // the running value before the step
    char op = '+';                    // '+', '-', '*'
    int64_t operand = 0;
    int64_t result = 0;
    std::string plain() const;        // "85-19=66"
};

struct ArithProblem {
    std::string question;             // "37+48-19*2"
    std::vector<ArithStep> steps;
    int64_t answer = 0;
    std::string worked;               // the steps and answer as this problem writes them out

    std::string prompt() const;       // "Q: 37+48-19*2\n"
    std::string completion() const;  // `worked`: "Step 1: ...\n...\nAnswer: 132" (the model writes this)
};

struct ArithTaskSpec {
    int minOperations = 2;            // stages per problem, drawn uniformly in [min, max]
    int maxOperations = 3;
    int64_t maxOperand = 50;          // + and - operands in [1, maxOperand]; * by a digit in [2, 9]
    int64_t maxValue = 199;           // every intermediate result stays in [0, maxValue]
    ArithFormat format = ArithFormat::Varied;
};

// The split a question belongs to: about 90% train, 5% validation, 5% test.
Split splitOf(const std::string& question);

class ArithTask {
public:
    explicit ArithTask(ArithTaskSpec spec = {}) : spec_(spec) {}
    const ArithTaskSpec& spec() const { return spec_; }

    ArithProblem problem(std::uint64_t seed, std::uint64_t index) const;
    // The first `count` distinct problems of `split` in the (seed, 0), (seed, 1), ... stream.
    std::vector<ArithProblem> draw(std::uint64_t seed, Split split, std::size_t count) const;

private:
    ArithTaskSpec spec_;
};

// The integer after the last "Answer:" in generated text, if any.
std::optional<int64_t> parseAnswer(const std::string& completion);

// Writes `problems` as experiment-engine JSONL: {"id", "prompt", "answer"}; ids are PREFIX-NNN.
void writeDatasetJsonl(const std::vector<ArithProblem>& problems, const std::string& idPrefix, const std::string& path);

}  // namespace kvscope::train
