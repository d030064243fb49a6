#pragma once
// The demo model's task: multi-step arithmetic written out stage by stage.
//
//   Q: 37+48-19*2                  <- the prompt
//   Step 1: 37+48=85               <- one operation per stage, left to right
//   Step 2: 85-19=66
//   Step 3: 66*2=132
//   Answer: 132
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

struct ArithProblem {
    std::string question;             // "37+48-19*2"
    std::vector<std::string> steps;   // "37+48=85", "85-19=66", ...
    int64_t answer = 0;

    std::string prompt() const;       // "Q: 37+48-19*2\n"
    std::string completion() const;  // "Step 1: ...\n...\nAnswer: 132" (the model writes this)
};

struct ArithTaskSpec {
    int minOperations = 2;            // stages per problem, drawn uniformly in [min, max]
    int maxOperations = 3;
    int64_t maxOperand = 50;          // + and - operands in [1, maxOperand]; * by a digit in [2, 9]
    int64_t maxValue = 199;           // every intermediate result stays in [0, maxValue]
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
