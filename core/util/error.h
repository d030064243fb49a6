// SPDX-License-Identifier: MIT
#pragma once
// Typed errors. Every failure a user can cause (a bad file, a bad flag, a mismatched cache) is one of
// these, and its message names the file, field or tensor and what was expected, so the CLI can print
// it on one line and the GUI can show it in a dialog.
#include <stdexcept>
#include <string>

namespace kvscope {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A file on disk is malformed: safetensors header, offsets, JSON, tokenizer.json, ...
class FormatError : public Error {
public:
    using Error::Error;
};

// config.json / generation_config.json describes something kvscope does not (or cannot) run.
class ConfigError : public Error {
public:
    using Error::Error;
};

// A tensor is missing, unexpected, or has the wrong shape or dtype.
class TensorError : public Error {
public:
    using Error::Error;
};

// The caller asked for something impossible: fp16 on CPU, an unknown chat template, bad ids, ...
class UsageError : public Error {
public:
    using Error::Error;
};

// Long work (training, a batch) stopped because the user asked it to.
class Cancelled : public Error {
public:
    using Error::Error;
};

// Not an error: a command finished and wants a specific exit status (an audit that found
// mismatches, an interrupted run). main() turns it into the process exit code after unwinding,
// so destructors (the ledger's connection) still run.
class ExitStatus : public std::exception {
public:
    explicit ExitStatus(int code) : code_(code) {}
    int code() const { return code_; }
    const char* what() const noexcept override { return "exit status"; }

private:
    int code_;
};

}  // namespace kvscope
