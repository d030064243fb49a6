// SPDX-License-Identifier: MIT
#pragma once
// Shared helpers for kvscope's tests: temporary folders, generated models (made once per process
// and reused), test data paths, and running the real CLI.
#include "core/model/random_checkpoint.h"

#include <optional>
#include <string>

namespace kvscope::test {

// A fresh folder under the system temp dir, removed on destruction.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

std::string testDataDir();  // tests/data in the source tree

// Whether a forward op (a ForwardObserver name) is elementwise or a row gather: on equal inputs it
// gives equal outputs, so two constructions can never first part bits there.
bool isElementwiseOp(const std::string& op);

// Whether torch kernels split live and prefill bits depends on the CPU and the libtorch build (an
// AVX512-BF16 CPU with PyTorch 2.13's oneDNN computes the tiny models' bf16 rows alike in a GEMM and
// a GEMV). A test that needs the split skips where there is none, with this reason.
std::string noSplitHere(const std::string& what);

// A tiny generated model of the given architecture, written once per test process.
// Variants: "qwen2", "llama", "qwen3", "llama3-scaled", "qwen2-tied", "qwen2-sharded"; each with
// "-wide" (hidden 256): the size at which a 64-token live cache and its one-shot prefill part bits
// in bf16 on both libtorch generations and every architecture (measured; at hidden 64, oneDNN in
// PyTorch 2.13 gives many such pairs identical bits). Tests that need two differing caches use it.
const std::string& tinyModel(const std::string& variant);
RandomCheckpointSpec tinySpec(const std::string& variant);

struct CommandResult {
    int exitCode = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};
// Runs the kvscope executable with `args` (already shell-quoted where needed), with `environment`
// ("NAME=value ...") added to its environment. Safe to call from several threads at once.
CommandResult runCli(const std::string& args, const std::string& environment = "");
std::string shellQuote(const std::string& s);

// Puts libtorch's intra-op thread count back as it was when the scope ends, however the test leaves it.
class ThreadCountGuard {
public:
    ThreadCountGuard();
    ~ThreadCountGuard();
    ThreadCountGuard(const ThreadCountGuard&) = delete;
    ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

private:
    int saved_;
};

// Sets an environment variable for the scope, then puts back what was there (or its absence).
class EnvironmentGuard {
public:
    EnvironmentGuard(const char* name, const std::string& value);
    ~EnvironmentGuard();
    EnvironmentGuard(const EnvironmentGuard&) = delete;
    EnvironmentGuard& operator=(const EnvironmentGuard&) = delete;

private:
    std::string name_;
    std::optional<std::string> saved_;
};

void writeTextFile(const std::string& path, const std::string& text);
std::string readTextFile(const std::string& path);

}  // namespace kvscope::test
