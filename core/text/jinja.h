// SPDX-License-Identifier: MIT
#pragma once
// The subset of Jinja2 that the chat templates of the supported families use (Qwen2.5, Qwen3,
// Llama 2, Llama 3.1 / 3.2, SmolLM2), rendered as transformers renders them: its sandboxed
// environment with trim_blocks, lstrip_blocks and loop controls, its tojson (json.dumps, no HTML
// escaping, keys in insertion order), raise_exception, strftime_now and namespace.
//
// Statements: if / elif / else, for (with loop.index, index0, first, last, length, revindex and an
// else branch; break, continue), set (names and namespace attributes), generation, comments and
// whitespace control. Expressions: literals, lists, dicts, attribute and item access, slices,
// calls, the operators of Jinja (or and not, comparisons, in, is, + - * / // % ~, a if b else c),
// filters and tests listed in jinja.cpp, and the string and dict methods templates call. Anything
// else is a FormatError naming the template's line, never output that quietly differs.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace kvscope::jinja {

struct Node;

class Template {
public:
    // `name` names the template in errors ("DIR/tokenizer_config.json chat_template").
    static Template parse(const std::string& source, const std::string& name);
    // The text for `variables` (an object: messages, add_generation_prompt, bos_token, ...).
    // raise_exception() and errors while rendering throw UsageError naming the template and line.
    std::string render(const nlohmann::ordered_json& variables) const;

private:
    std::shared_ptr<const Node> root_;
    std::string name_;
};

}  // namespace kvscope::jinja
