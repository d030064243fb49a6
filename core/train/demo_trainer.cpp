// SPDX-License-Identifier: MIT
#include "core/train/demo_trainer.h"

#include "core/decode/generator.h"
#include "core/model/checkpoint.h"
#include "core/model/safetensors.h"
#include "core/model/transformer.h"
#include "core/text/bpe_trainer.h"
#include "core/text/tokenizer.h"
#include "core/util/error.h"
#include "core/util/json_file.h"
#include "core/util/threads.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>  // the C++ frontend: optim::AdamW, nn::functional, nn::utils

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace kvscope::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kSpecialTokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The tokenizer is trained on texts of the task itself, so "Step", "Answer" and "Q:" become single
// tokens; digits stay one per token (the Qwen pre-tokenizer splits them).
TrainedBpe trainTaskTokenizer(const DemoRecipe& r, const ArithTask& task) {
    std::vector<std::string> texts;
    for (const ArithProblem& p : task.draw(r.seed, Split::Train, 500)) texts.push_back(p.prompt() + p.completion());
    return trainByteLevelBpe(texts, r.bpeMerges);
}

ModelConfig demoConfig(const DemoRecipe& r, int64_t vocabSize, int64_t eos) {
    ModelConfig c;
    c.architecture = Architecture::Qwen2;
    c.hiddenSize = r.hiddenSize;
    c.numLayers = r.numLayers;
    c.numHeads = r.numHeads;
    c.numKvHeads = r.numKvHeads;
    c.headDim = r.hiddenSize / r.numHeads;
    c.intermediateSize = r.intermediateSize;
    c.vocabSize = vocabSize;
    c.maxPositionEmbeddings = 512;
    c.ropeTheta = 10000.0;
    c.tieWordEmbeddings = true;
    c.attentionBias = true;
    c.eosTokenIds = {eos};
    c.torchDtype = "bfloat16";
    return ModelConfig::fromJson(c.toJson(), "demo model config");  // the loader's own validation
}

// GPT-2 style: N(0, 0.02), residual output projections scaled down by depth; norms 1, biases 0.
Weights initialWeights(const ModelConfig& c, std::uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const ExpectedTensor& e : expectedTensors(c)) shapes[e.name] = e.shape;
    Weights w;
    const double residualStd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.numLayers));
    for (auto& [name, slot] : hfWeightSlots(c, w)) {
        const std::vector<int64_t>& shape = shapes.at(name);
        auto endsWith = [&name = name](const std::string& suffix) {  // C++17 lambdas cannot capture a binding itself
            return name.size() >= suffix.size() &&
                   name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
        };
        if (endsWith("norm.weight"))
            *slot = torch::ones(shape);
        else if (endsWith(".bias"))
            *slot = torch::zeros(shape);
        else {
            const double stddev = endsWith("o_proj.weight") || endsWith("down_proj.weight") ? residualStd : 0.02;
            *slot = torch::randn(shape, gen, torch::kFloat32) * stddev;
        }
        slot->requires_grad_(true);
    }
    w.lmHead = w.embed;  // tied
    return w;
}

// One training sequence: prompt + completion + EOS; only completion tokens (and EOS) are predicted.
struct Sequence {
    std::vector<int64_t> ids;
    int64_t promptLength = 0;
};

Sequence encodeProblem(const Tokenizer& tokenizer, const ArithProblem& p, int64_t eos) {
    Sequence s;
    s.ids = tokenizer.encode(p.prompt(), false);
    s.promptLength = static_cast<int64_t>(s.ids.size());
    for (int64_t id : tokenizer.encode(p.completion(), false)) s.ids.push_back(id);
    s.ids.push_back(eos);
    return s;
}

struct Pack {
    std::vector<int64_t> ids, starts, targets;  // targets: -100 = not predicted
};

void append(Pack& pack, const Sequence& s) {
    pack.starts.push_back(static_cast<int64_t>(pack.ids.size()));
    const int64_t n = static_cast<int64_t>(s.ids.size());
    for (int64_t i = 0; i < n; ++i) {
        pack.ids.push_back(s.ids[i]);
        pack.targets.push_back(i + 1 < n && i + 1 >= s.promptLength ? s.ids[i + 1] : -100);
    }
}

torch::Tensor packLoss(const Transformer& model, const Pack& pack) {
    torch::Tensor logits = model.forwardPacked(pack.ids, pack.starts);                       // [S, V]
    torch::Tensor targets = torch::tensor(pack.targets, torch::kInt64);                      // [S]
    return torch::nn::functional::cross_entropy(logits, targets,
                                                torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}

// The training stream: train-split problems in (seed, index) order, packed up to tokensPerStep.
class PackSource {
public:
    PackSource(const DemoRecipe& r, const ArithTask& task, const Tokenizer& tok, int64_t eos)
        : recipe_(r), task_(task), tokenizer_(tok), eos_(eos) {}
    Pack next() {
        Pack pack;
        while (true) {
            if (!pending_) pending_ = nextSequence();
            const bool fits = pack.ids.size() + pending_->ids.size() <= static_cast<std::size_t>(recipe_.tokensPerStep);
            if (!fits && !pack.ids.empty()) return pack;
            append(pack, *pending_);
            pending_.reset();
        }
    }

private:
    Sequence nextSequence() {
        while (true) {
            ArithProblem p = task_.problem(recipe_.seed, index_++);
            if (splitOf(p.question) == Split::Train) return encodeProblem(tokenizer_, p, eos_);
        }
    }
    const DemoRecipe& recipe_;
    const ArithTask& task_;
    const Tokenizer& tokenizer_;
    int64_t eos_;
    std::uint64_t index_ = 0;
    std::optional<Sequence> pending_;
};

double learningRateAt(const DemoRecipe& r, int64_t step) {
    if (step < r.warmupSteps)
        return r.learningRate * static_cast<double>(step + 1) / static_cast<double>(r.warmupSteps);
    const double progress =
        static_cast<double>(step - r.warmupSteps) / static_cast<double>(std::max<int64_t>(1, r.steps - r.warmupSteps));
    return r.learningRate * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress))));
}

double validationLoss(const Transformer& model, const Tokenizer& tok, const std::vector<ArithProblem>& problems,
                      int64_t eos) {
    torch::NoGradGuard noGrad;
    double sum = 0;
    int64_t packs = 0;
    for (std::size_t i = 0; i < problems.size(); i += 16, ++packs) {
        Pack pack;
        for (std::size_t j = i; j < std::min(problems.size(), i + 16); ++j)
            append(pack, encodeProblem(tok, problems[j], eos));
        sum += packLoss(model, pack).item<double>();
    }
    return packs ? sum / static_cast<double>(packs) : 0.0;
}

void writeCheckpoint(const fs::path& dir, const ModelConfig& c, const Weights& trained) {
    Weights copy = trained;  // handles only; the slots below point into `copy`
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (auto& [name, slot] : hfWeightSlots(c, copy))
        tensors.emplace_back(name, slot->detach().to(torch::kBFloat16).contiguous());
    writeSafetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

std::string percent(const AccuracyReport& a) {
    char text[64];
    std::snprintf(text, sizeof text, "%lld/%lld (%.1f%%)", static_cast<long long>(a.correct),
                  static_cast<long long>(a.total), 100.0 * a.fraction());
    return text;
}

void writeModelCard(const fs::path& dir, const DemoRecipe& r, const ModelConfig& c, const TrainingResult& result,
                    int64_t parameters, const ArithProblem& example) {
    std::ofstream out(dir / "README.md");
    out << "# kvscope demo model\n\n"
        << "A small Qwen2-architecture model (q/k/v bias, tied embeddings) trained by "
           "`kvscope train-demo-model` on a synthetic staged arithmetic task, so that kvscope's study "
           "runs end to end with real correctness labels where no weights can be downloaded. It is "
           "not a language model.\n\n"
        << "## Task\n\nA training example (format `" << formatName(r.task.format) << "`):\n\n```\n"
        << example.prompt() << example.completion() << "\n```\n\n"
        << "The prompt is the `Q:` line; the model writes the steps and the answer, then `<|endoftext|>`. "
        << (r.task.format == ArithFormat::Varied
                ? "Each step draws three fair coins independently for every training sequence: operand order of + "
                  "and * (`48+37=85` / `37+48=85`), spacing (`85-19=66` / `85 - 19 = 66`), and an optional "
                  "restatement line `Value: 85`. All are equally right, so at those points the model learns a "
                  "near-50/50 choice, as a reasoning model faces between equivalent phrasings; the `Step N:` "
                  "labels never vary, so the boundary marker `\\nStep 2:` is unambiguous. "
                : "Every step is written one way only. ")
        << "Operations per problem: " << r.task.minOperations << "-" << r.task.maxOperations
        << "; + and - operands up to " << r.task.maxOperand << ", * by one digit; every intermediate in [0, "
        << r.task.maxValue
        << "]. Splits are decided by a hash of the question (about 90/5/5), so "
           "train, validation and test never share a question; `test.jsonl` holds "
        << r.testItems << " test items and `validation.jsonl` " << r.validationItems << ".\n\n"
        << "## Model\n\n"
        << parameters << " parameters: hidden " << c.hiddenSize << ", " << c.numLayers << " layers, " << c.numHeads
        << " heads (" << c.numKvHeads << " KV heads), intermediate " << c.intermediateSize << ", vocabulary "
        << c.vocabSize << " (byte-level BPE: 256 bytes + "
        << c.vocabSize - 256 - static_cast<int64_t>(kSpecialTokens.size()) << " merges learned, at most " << r.bpeMerges
        << " asked; digits stay single tokens + " << kSpecialTokens.size() << " specials). Weights stored in bf16.\n\n"
        << "## Recipe\n\n```json\n"
        << r.toJson().dump(2) << "\n```\n\n"
        << "AdamW (betas 0.9/0.95), linear warm-up then cosine decay to 10% of the peak rate, gradient "
           "clipping; loss on the completion tokens only; sequences packed into one row per step with a "
           "block-causal mask (`Transformer::forwardPacked`, the inference model itself).\n\n"
        << "## Metrics (measured when this checkpoint was written)\n\n"
        << "| | value |\n|---|---|\n";
    char line[128];
    std::snprintf(line, sizeof line,
                  "| training time | %.0f s |\n| final training loss | %.4f |\n| validation loss | %.4f |\n",
                  result.seconds, result.finalTrainLoss, result.validationLoss);
    out << line;
    for (const AccuracyReport& a : result.validation)
        out << "| validation accuracy, " << a.dtype << " | " << percent(a) << " |\n";
    for (const AccuracyReport& a : result.test) out << "| test accuracy, " << a.dtype << " | " << percent(a) << " |\n";
    out << "| weights fingerprint (bf16) | `" << result.fingerprint << "` |\n\n"
        << "Greedy decoding, at most " << r.evalMaxNewTokens
        << " new tokens, answer = the integer after the last `Answer:`.\n\n"
        << "## Reproducibility\n\n"
           "Data order, initial weights (libtorch's CPU generator seeded with `seed`) and the optimiser are "
           "deterministic. With one thread (the default) libtorch's CPU kernels give the same bits on the "
           "same machine, so retraining with the same recipe reproduces the fingerprint above there. With "
           "more threads PyTorch's pip wheel has once in a while given a fresh process other weights (cause "
           "not found yet; Debian's libtorch has not). A different thread count, CPU (vector width) or "
           "libtorch/BLAS version can change floating-point summation order and so the weights.\n";
}

int64_t countParameters(const ModelConfig& c, const Weights& w) {
    Weights copy = w;
    int64_t n = 0;
    for (auto& [name, slot] : hfWeightSlots(c, copy)) n += slot->numel();
    return n;
}

}  // namespace

nlohmann::json DemoRecipe::toJson() const {
    return {{"seed", seed},
            {"task",
             {{"format", formatName(task.format)},
              {"min_operations", task.minOperations},
              {"max_operations", task.maxOperations},
              {"max_operand", task.maxOperand},
              {"max_value", task.maxValue}}},
            {"hidden_size", hiddenSize},
            {"layers", numLayers},
            {"heads", numHeads},
            {"kv_heads", numKvHeads},
            {"intermediate_size", intermediateSize},
            {"bpe_merges", bpeMerges},
            {"steps", steps},
            {"tokens_per_step", tokensPerStep},
            {"learning_rate", learningRate},
            {"warmup_steps", warmupSteps},
            {"weight_decay", weightDecay},
            {"grad_clip", gradClip},
            {"threads", threads},
            {"eval_max_new_tokens", evalMaxNewTokens}};
}

AccuracyReport evaluateArithmetic(const std::string& modelDir, const std::vector<ArithProblem>& problems,
                                  const std::string& dtype, int64_t maxNewTokens,
                                  const std::function<void(int64_t)>& onItem) {
    Transformer model = Transformer::load(modelDir, parseDtype(dtype), torch::kCPU);
    Tokenizer tokenizer = Tokenizer::fromModelDir(modelDir);
    Generator generator(model);
    StopRules stops;
    stops.maxNewTokens = maxNewTokens;
    stops.eosIds = model.config().eosTokenIds;
    AccuracyReport report{dtype, 0, 0};
    for (const ArithProblem& p : problems) {
        GenerationResult g = generator.generate(tokenizer.encode(p.prompt(), false), SamplingParams{}, stops);
        const std::optional<int64_t> answer = parseAnswer(tokenizer.decode(g.ids, true));
        report.correct += answer && *answer == p.answer;
        ++report.total;
        if (onItem) onItem(report.total);
    }
    return report;
}

namespace {

// The written checkpoint's accuracy on the validation and test splits, in fp32 and in bf16.
void evaluateCheckpoint(const fs::path& staging, const DemoRecipe& r, const std::vector<ArithProblem>& validation,
                        const std::vector<ArithProblem>& test,
                        const std::function<void(const TrainingProgress&)>& onProgress, TrainingResult& result) {
    for (const std::string dtype : {"fp32", "bf16"}) {
        auto report = [&](const char* phase, std::size_t total) {
            return [&, phase, total](int64_t done) {
                if (onProgress && (done % 50 == 0 || done == static_cast<int64_t>(total)))
                    onProgress({done, static_cast<int64_t>(total), 0, 0, 0, std::string(phase) + " " + dtype});
            };
        };
        result.validation.push_back(evaluateArithmetic(staging.string(), validation, dtype, r.evalMaxNewTokens,
                                                       report("validation", validation.size())));
        result.test.push_back(
            evaluateArithmetic(staging.string(), test, dtype, r.evalMaxNewTokens, report("test", test.size())));
    }
}

TrainingResult trainInto(const fs::path& staging, const fs::path& outDir, const DemoRecipe& r,
                         const std::function<void(const TrainingProgress&)>& onProgress, const std::atomic<bool>& stop,
                         int64_t reportEvery) {
    const auto t0 = Clock::now();
    configureThreads(r.threads);
#ifdef __GLIBC__
    // Every step allocates and frees the same large activation buffers; by default glibc returns
    // them to the kernel each time (mmap/munmap, page faults). Keeping them is ~12% faster.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    torch::manual_seed(r.seed);
    const ArithTask task(r.task);
    const std::vector<ArithProblem> validation = task.draw(r.seed, Split::Validation, r.validationItems);
    const std::vector<ArithProblem> test = task.draw(r.seed, Split::Test, r.testItems);

    const TrainedBpe bpe = trainTaskTokenizer(r, task);
    const int64_t eos = static_cast<int64_t>(bpe.vocab.size());
    const ModelConfig config = demoConfig(r, static_cast<int64_t>(bpe.vocab.size() + kSpecialTokens.size()), eos);
    writeJsonFile((staging / "tokenizer.json").string(), makeTokenizerJson(bpe, kSpecialTokens));
    writeJsonFile((staging / "config.json").string(), config.toJson());
    writeJsonFile((staging / "generation_config.json").string(),
                  {{"eos_token_id", {eos, eos + 2}}, {"do_sample", false}});
    const Tokenizer tokenizer = Tokenizer::fromModelDir(staging.string());

    Weights initial = initialWeights(config, r.seed);
    std::vector<torch::Tensor> parameters;
    for (auto& [name, slot] : hfWeightSlots(config, initial)) parameters.push_back(*slot);
    const Transformer model(config, initial, torch::kFloat32, torch::kCPU);
    torch::optim::AdamW optimizer(
        parameters, torch::optim::AdamWOptions(r.learningRate).betas({0.9, 0.95}).weight_decay(r.weightDecay));

    PackSource source(r, task, tokenizer, eos);
    TrainingResult result;
    double windowLoss = 0;
    int64_t windowSteps = 0, tokens = 0;
    const auto trainStart = Clock::now();
    for (int64_t step = 0; step < r.steps; ++step) {
        if (stop)
            throw Cancelled("training cancelled at step " + std::to_string(step) + "; nothing was written to " +
                            outDir.string());
        for (auto& group : optimizer.param_groups())
            static_cast<torch::optim::AdamWOptions&>(group.options()).lr(learningRateAt(r, step));
        const Pack pack = source.next();
        torch::Tensor loss = packLoss(model, pack);
        optimizer.zero_grad();
        loss.backward();
        torch::nn::utils::clip_grad_norm_(parameters, r.gradClip);
        optimizer.step();

        windowLoss += loss.item<double>();
        ++windowSteps;
        tokens += static_cast<int64_t>(pack.ids.size());
        if ((step + 1) % reportEvery == 0 || step + 1 == r.steps) {
            const double elapsed = secondsSince(trainStart);
            result.finalTrainLoss = windowLoss / static_cast<double>(windowSteps);
            if (onProgress)
                onProgress({step + 1, r.steps, result.finalTrainLoss, static_cast<double>(tokens) / elapsed,
                            elapsed / static_cast<double>(step + 1) * static_cast<double>(r.steps - step - 1),
                            "train"});
            windowLoss = 0;
            windowSteps = 0;
        }
    }
    result.validationLoss = validationLoss(model, tokenizer, validation, eos);

    writeCheckpoint(staging, config, model.weights());
    writeDatasetJsonl(test, "demo-test", (staging / "test.jsonl").string());
    writeDatasetJsonl(validation, "demo-val", (staging / "validation.jsonl").string());
    evaluateCheckpoint(staging, r, validation, test, onProgress, result);
    result.fingerprint = Transformer::load(staging.string(), torch::kBFloat16, torch::kCPU).fingerprint();
    result.seconds = secondsSince(t0);
    writeModelCard(staging, r, config, result, countParameters(config, model.weights()), task.problem(r.seed, 0));
    return result;
}

}  // namespace

TrainingResult trainDemoModel(const DemoRecipe& r, const std::string& outDirName,
                              const std::function<void(const TrainingProgress&)>& onProgress,
                              const std::atomic<bool>& stop, int64_t reportEvery) {
    // Write into a sibling staging folder and rename at the end: a cancelled or failed run leaves
    // no half-written checkpoint under the requested name, and no staging folder either.
    const fs::path outDir(outDirName);
    const fs::path staging = outDir.string() + ".partial";
    fs::remove_all(staging);
    fs::create_directories(staging);
    try {
        TrainingResult result = trainInto(staging, outDir, r, onProgress, stop, reportEvery);
        fs::remove_all(outDir);
        fs::rename(staging, outDir);
        return result;
    } catch (...) {
        std::error_code ignored;
        fs::remove_all(staging, ignored);
        throw;
    }
}

}  // namespace kvscope::train
