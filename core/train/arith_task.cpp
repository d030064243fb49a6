// SPDX-License-Identifier: MIT
#include "core/train/arith_task.h"

#include "core/util/error.h"
#include "core/util/hash.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>

namespace kvscope::train {
namespace {

std::uint64_t mix(std::uint64_t x) { return splitmix64(x); }

// A tiny counter-based generator: the same numbers on every platform and standard library (unlike
// std::uniform_int_distribution, whose algorithm is implementation-defined).
class Draws {
public:
    Draws(std::uint64_t seed, std::uint64_t index) : state_(mix(mix(seed) ^ mix(index + 0x1234))) {}
    int64_t between(int64_t lo, int64_t hi) {  // uniform in [lo, hi] (modulo bias is negligible here)
        state_ = mix(state_);
        return lo + static_cast<int64_t>(state_ % static_cast<std::uint64_t>(hi - lo + 1));
    }

private:
    std::uint64_t state_;
};

// The worked solution. In the varied format every step draws three fair coins: operand order (only +
// and * commute), spacing around the operator and "=", and whether a restatement line follows; all
// outcomes are equally right. The plain format is the one where no coin ever comes up.
std::string writeWorked(const ArithProblem& p, const std::function<bool()>& coin) {
    std::string text;
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
        const ArithStep& s = p.steps[i];
        const bool swap = s.op != '-' && coin();
        const bool spaced = coin();
        const bool restate = coin();
        const std::string left = std::to_string(swap ? s.operand : s.value);
        const std::string right = std::to_string(swap ? s.value : s.operand);
        const std::string gap = spaced ? " " : "";
        text += "Step " + std::to_string(i + 1) + ": " + left + gap + s.op + gap + right + gap + "=" + gap +
                std::to_string(s.result) + "\n";
        if (restate) text += "Value: " + std::to_string(s.result) + "\n";
    }
    return text + "Answer: " + std::to_string(p.answer);
}

}  // namespace

const char* splitName(Split split) {
    switch (split) {
    case Split::Train: return "train";
    case Split::Validation: return "validation";
    case Split::Test: return "test";
    }
    return "?";
}

const char* formatName(ArithFormat format) { return format == ArithFormat::Plain ? "plain" : "varied"; }

ArithFormat parseArithFormat(const std::string& name) {
    if (name == "plain") return ArithFormat::Plain;
    if (name == "varied") return ArithFormat::Varied;
    throw UsageError("task format '" + name + "': expected plain or varied");
}

std::string ArithStep::plain() const {
    return std::to_string(value) + op + std::to_string(operand) + "=" + std::to_string(result);
}

std::string ArithProblem::prompt() const { return "Q: " + question + "\n"; }
std::string ArithProblem::completion() const { return worked; }

Split splitOf(const std::string& question) {
    const std::uint64_t bucket = hashText(question) % 20;
    return bucket == 0 ? Split::Test : bucket == 1 ? Split::Validation : Split::Train;
}

ArithProblem ArithTask::problem(std::uint64_t seed, std::uint64_t index) const {
    Draws draw(seed, index);
    ArithProblem p;
    int64_t value = draw.between(10, spec_.maxOperand);
    p.question = std::to_string(value);
    const int operations = static_cast<int>(draw.between(spec_.minOperations, spec_.maxOperations));
    for (int i = 0; i < operations; ++i) {
        // Pick an operation that keeps the running value in [0, maxValue].
        char op = "+-*"[draw.between(0, 2)];
        if (op == '*' && (value < 2 || value * 2 > spec_.maxValue)) op = value < 2 ? '+' : '-';
        if (op == '+' && value >= spec_.maxValue) op = '-';
        if (op == '-' && value < 1) op = '+';
        int64_t operand = 0, next = 0;
        if (op == '+') {
            operand = draw.between(1, std::min(spec_.maxOperand, spec_.maxValue - value));
            next = value + operand;
        } else if (op == '-') {
            operand = draw.between(1, std::min(spec_.maxOperand, value));
            next = value - operand;
        } else {
            operand = draw.between(2, std::min<int64_t>(9, spec_.maxValue / value));
            next = value * operand;
        }
        p.question += op + std::to_string(operand);
        p.steps.push_back({value, op, operand, next});
        value = next;
    }
    p.answer = value;
    // The format's choices are drawn after the problem's own draws, so a plain problem is the same
    // whichever format is asked for.
    const bool varied = spec_.format == ArithFormat::Varied;
    p.worked = writeWorked(p, [&] { return varied && draw.between(0, 1) == 1; });
    return p;
}

std::vector<ArithProblem> ArithTask::draw(std::uint64_t seed, Split split, std::size_t count) const {
    std::vector<ArithProblem> out;
    std::set<std::string> seen;
    for (std::uint64_t index = 0; out.size() < count; ++index) {
        if (index > 1000 * count + 100000)
            throw UsageError("the arithmetic task cannot supply " + std::to_string(count) + " distinct " +
                             splitName(split) + " problems (the problem space is too small)");
        ArithProblem p = problem(seed, index);
        if (splitOf(p.question) == split && seen.insert(p.question).second) out.push_back(std::move(p));
    }
    return out;
}

std::optional<int64_t> parseAnswer(const std::string& completion) {
    const std::string marker = "Answer:";
    const std::size_t at = completion.rfind(marker);
    if (at == std::string::npos) return std::nullopt;
    std::size_t i = at + marker.size();
    while (i < completion.size() && completion[i] == ' ') ++i;
    std::size_t end = i;
    while (end < completion.size() && end - i < 18 && std::isdigit(static_cast<unsigned char>(completion[end]))) ++end;
    if (end == i) return std::nullopt;
    return std::stoll(completion.substr(i, end - i));
}

void writeDatasetJsonl(const std::vector<ArithProblem>& problems, const std::string& idPrefix,
                       const std::string& path) {
    std::ofstream out(path);
    if (!out) throw FormatError(path + ": cannot open for writing");
    for (std::size_t i = 0; i < problems.size(); ++i) {
        char id[32];
        std::snprintf(id, sizeof id, "-%03zu", i);
        nlohmann::json line = {
            {"id", idPrefix + id}, {"prompt", problems[i].prompt()}, {"answer", std::to_string(problems[i].answer)}};
        out << line.dump() << '\n';
    }
    if (!out.flush()) throw FormatError(path + ": write failed");
}

}  // namespace kvscope::train
