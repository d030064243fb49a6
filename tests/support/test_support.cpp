// SPDX-License-Identifier: MIT
#include "support/test_support.h"

#include "core/util/version.h"

#include <ATen/Parallel.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>

namespace kvscope::test {
namespace fs = std::filesystem;

TempDir::TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kvscope-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

std::string testDataDir() { return KVSCOPE_TEST_DATA; }

RandomCheckpointSpec tinySpec(const std::string& name) {
    RandomCheckpointSpec s;
    std::string variant = name;
    // "-wide": hidden 256, so live and prefill part bits on every libtorch tried (tiny matrices can
    // give every shape the same accumulation order; see tinyModel in test_support.h).
    const bool wide = variant.size() > 5 && variant.compare(variant.size() - 5, 5, "-wide") == 0;
    if (wide) variant.resize(variant.size() - 5);
    s.hiddenSize = 64;
    s.numLayers = 2;
    s.numHeads = 4;
    s.numKvHeads = 2;
    s.intermediateSize = 96;
    s.seed = 7;
    if (variant == "qwen2")
        s.architecture = Architecture::Qwen2;
    else if (variant == "qwen2-tied")
        s.architecture = Architecture::Qwen2, s.tieWordEmbeddings = true;
    else if (variant == "qwen2-sharded")
        s.architecture = Architecture::Qwen2, s.shards = 3;
    else if (variant == "llama")
        s.architecture = Architecture::Llama, s.numKvHeads = 1;
    else if (variant == "llama3-scaled")
        s.architecture = Architecture::Llama, s.llama3RopeScaling = true;
    else if (variant == "qwen3")
        s.architecture = Architecture::Qwen3, s.headDim = 32;  // head_dim != hidden/heads
    else if (variant == "llama-bias")  // q/k/v/o biases and odd sizes: head_dim 8, 3 layers, 172 wide
        s.architecture = Architecture::Llama, s.attentionBias = true, s.numHeads = 8, s.numKvHeads = 4, s.numLayers = 3,
        s.intermediateSize = 172;
    else
        throw std::runtime_error("unknown tiny model variant " + variant);
    if (wide) s.hiddenSize = 256, s.intermediateSize = 512;
    return s;
}

std::string noSplitHere(const std::string& what) {
    return what + " on this machine and libtorch (" + deviceSummary() + "; libtorch " + libtorchVersion() +
           "): nothing to test here, the phenomenon is CPU- and build-dependent";
}

bool isElementwiseOp(const std::string& op) {
    for (const char* elementwise : {"embedding", "rope_q", "rope_k", "attn_residual", "mlp_residual"})
        if (op == elementwise) return true;
    return false;
}

const std::string& tinyModel(const std::string& variant) {
    static TempDir root;
    static std::map<std::string, std::string> made;
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = made.find(variant);
    if (it != made.end()) return it->second;
    const std::string dir = root.file(variant);
    writeRandomCheckpoint(tinySpec(variant), dir);
    return made[variant] = dir;
}

std::string shellQuote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

CommandResult runCli(const std::string& args, const std::string& environment) {
    static TempDir scratch;
    static std::atomic<int> counter{0};
    const std::string errFile = scratch.file("stderr-" + std::to_string(counter++));
    const std::string cmd =
        environment + (environment.empty() ? "" : " ") + std::string(KVSCOPE_CLI) + " " + args + " 2>" + errFile;
    CommandResult r;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) throw std::runtime_error("popen failed");
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
    const int status = ::pclose(pipe);
    r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = readTextFile(errFile);
    return r;
}

void writeTextFile(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

std::string readTextFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

EnvironmentGuard::EnvironmentGuard(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    ::setenv(name, value.c_str(), 1);
}

EnvironmentGuard::~EnvironmentGuard() {
    if (saved_)
        ::setenv(name_.c_str(), saved_->c_str(), 1);
    else
        ::unsetenv(name_.c_str());
}

ThreadCountGuard::ThreadCountGuard() : saved_(at::get_num_threads()) {}
ThreadCountGuard::~ThreadCountGuard() { at::set_num_threads(saved_); }

}  // namespace kvscope::test
