// SPDX-License-Identifier: MIT
// A Jinja2 subset, read top to bottom: values, the lexer (text and tags, with transformers'
// whitespace rules), the expression parser (Jinja's precedence), statements, and the renderer.
#include "core/text/jinja.h"

#include "core/text/byte_level.h"
#include "core/text/tokenizer_steps.h"
#include "core/util/error.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <climits>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

namespace kvscope::jinja {
namespace {

// ---- values ---------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict

struct Value {
    enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };
    Kind kind = Kind::Undefined;
    bool boolean = false;
    int64_t integer = 0;
    double number = 0;
    std::string text;                // String; Function: its name ("namespace", "upper", ...)
    std::shared_ptr<List> list;      // List
    std::shared_ptr<Dict> dict;      // Dict and Namespace (a namespace's attributes can be set)
    std::shared_ptr<Value> self;     // Function: the object a method is bound to, if any

    static Value none() { return make(Kind::None); }
    static Value of(bool b) {
        Value v = make(Kind::Bool);
        v.boolean = b;
        return v;
    }
    static Value of(int64_t i) {
        Value v = make(Kind::Int);
        v.integer = i;
        return v;
    }
    static Value of(double d) {
        Value v = make(Kind::Float);
        v.number = d;
        return v;
    }
    static Value of(std::string s) {
        Value v = make(Kind::String);
        v.text = std::move(s);
        return v;
    }
    static Value of(List l) {
        Value v = make(Kind::List);
        v.list = std::make_shared<List>(std::move(l));
        return v;
    }
    static Value of(Dict d, Kind kind = Kind::Dict) {
        Value v = make(kind);
        v.dict = std::make_shared<Dict>(std::move(d));
        return v;
    }
    static Value function(std::string name, std::optional<Value> bound = std::nullopt) {
        Value v = make(Kind::Function);
        v.text = std::move(name);
        if (bound) v.self = std::make_shared<Value>(std::move(*bound));
        return v;
    }
    static Value make(Kind k) {
        Value v;
        v.kind = k;
        return v;
    }
    bool is(Kind k) const { return kind == k; }
    bool isNumber() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
    double asDouble() const { return kind == Kind::Float ? number : kind == Kind::Bool ? boolean : double(integer); }
    const Value* find(const std::string& key) const {
        if (!dict) return nullptr;
        for (const auto& [k, v] : *dict)
            if (k == key) return &v;
        return nullptr;
    }
};

const char* kindName(const Value& v) {
    switch (v.kind) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "none";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "string";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "namespace";
    case Value::Kind::Function: return "function";
    }
    return "?";
}

Value fromJson(const nlohmann::ordered_json& j) {
    switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::of(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::of(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::of(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
        List l;
        for (const auto& e : j) l.push_back(fromJson(e));
        return Value::of(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
        Dict d;
        for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), fromJson(it.value()));
        return Value::of(std::move(d));
    }
    default: return Value();
    }
}

bool truthy(const Value& v) {
    switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.boolean;
    case Value::Kind::Int: return v.integer != 0;
    case Value::Kind::Float: return v.number != 0;
    case Value::Kind::String: return !v.text.empty();
    case Value::Kind::List: return !v.list->empty();
    case Value::Kind::Dict: return !v.dict->empty();
    default: return true;
    }
}

// Values nest only as deep as their data; a namespace can hold itself, so walks over values stop here.
constexpr int kMaxValueDepth = 64;

void checkDepth(int depth) {
    if (depth > kMaxValueDepth)
        throw std::runtime_error("a value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

bool equal(const Value& a, const Value& b, int depth = 0) {
    checkDepth(depth);
    if (a.isNumber() && b.isNumber()) {
        if (a.is(Value::Kind::Float) || b.is(Value::Kind::Float)) return a.asDouble() == b.asDouble();
        return (a.is(Value::Kind::Bool) ? a.boolean : a.integer) == (b.is(Value::Kind::Bool) ? b.boolean : b.integer);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.text == b.text;
    case Value::Kind::List:
        if (a.list->size() != b.list->size()) return false;
        for (std::size_t i = 0; i < a.list->size(); ++i)
            if (!equal((*a.list)[i], (*b.list)[i], depth + 1)) return false;
        return true;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
        if (a.dict->size() != b.dict->size()) return false;
        for (const auto& [k, v] : *a.dict) {
            const Value* other = b.find(k);
            if (!other || !equal(v, *other, depth + 1)) return false;
        }
        return true;
    default: return a.dict == b.dict && a.text == b.text;
    }
}

// Python's repr of a float: the shortest text that reads back the same, with ".0" when integral.
std::string floatText(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buffer[64];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, d);
    std::string s(buffer, end);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

std::string repr(const Value& v, int depth = 0);

// str(v), what {{ v }} prints.
std::string str(const Value& v) {
    switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.boolean ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.integer);
    case Value::Kind::Float: return floatText(v.number);
    case Value::Kind::String: return v.text;
    case Value::Kind::Function: return "<function " + v.text + ">";
    default: return repr(v);
    }
}

std::string repr(const Value& v, int depth) {
    checkDepth(depth);
    switch (v.kind) {
    case Value::Kind::String: {
        const char quote = v.text.find('\'') != std::string::npos && v.text.find('"') == std::string::npos ? '"' : '\'';
        std::string out(1, quote);
        for (char c : v.text) {
            if (c == quote || c == '\\') out += '\\';
            if (c == '\n')
                out += "\\n";
            else if (c == '\t')
                out += "\\t";
            else
                out += c;
        }
        return out + quote;
    }
    case Value::Kind::List: {
        std::string out = "[";
        for (std::size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + repr((*v.list)[i], depth + 1);
        return out + "]";
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, e] : *v.dict)
            out += (first ? "" : ", ") + repr(Value::of(k)) + ": " + repr(e, depth + 1), first = false;
        return out + "}";
    }
    default: return str(v);
    }
}

// json.dumps(v, ensure_ascii=False, indent=indent) as transformers' tojson filter calls it.
void appendJsonString(std::string& out, const std::string& s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                char buffer[8];
                std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
                out += buffer;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
}

void appendJson(std::string& out, const Value& v, int indent, int depth) {
    checkDepth(depth);
    const auto newline = [&](int level) {
        if (indent >= 0) out += '\n' + std::string(static_cast<std::size_t>(indent * level), ' ');
    };
    const char* comma = indent >= 0 ? "," : ", ";
    switch (v.kind) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.integer); return;
    case Value::Kind::Float:
        out += std::isfinite(v.number) ? floatText(v.number)
                                       : (std::isnan(v.number) ? "NaN"
                                          : v.number > 0       ? "Infinity"
                                                               : "-Infinity");
        return;
    case Value::Kind::String: appendJsonString(out, v.text); return;
    case Value::Kind::List:
        if (v.list->empty()) {
            out += "[]";
            return;
        }
        out += '[';
        for (std::size_t i = 0; i < v.list->size(); ++i) {
            if (i) out += comma;
            newline(depth + 1);
            appendJson(out, (*v.list)[i], indent, depth + 1);
        }
        newline(depth);
        out += ']';
        return;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
        if (v.dict->empty()) {
            out += "{}";
            return;
        }
        out += '{';
        for (std::size_t i = 0; i < v.dict->size(); ++i) {
            if (i) out += comma;
            newline(depth + 1);
            appendJsonString(out, (*v.dict)[i].first);
            out += ": ";
            appendJson(out, (*v.dict)[i].second, indent, depth + 1);
        }
        newline(depth);
        out += '}';
        return;
    default: throw std::runtime_error(std::string("tojson: a value of type ") + kindName(v) + " is not JSON");
    }
}

// Python's str methods work on code points; these split UTF-8 into them and back.
std::vector<std::string> codePoints(const std::string& s) {
    std::vector<std::string> out;
    std::size_t at = 0;
    for (std::size_t length : utf8CharLengths(s)) out.push_back(s.substr(at, length)), at += length;
    return out;
}

bool isPythonSpace(const std::string& c) {
    const auto d = decodeUtf8(c);
    return d.size() == 1 && (isUnicodeWhitespace(d[0]) || (d[0] >= 0x1C && d[0] <= 0x1F));
}

// str.strip / lstrip / rstrip: `chars` a set of characters, or Python's whitespace when absent.
std::string stripped(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
    const auto cps = codePoints(s);
    const auto set = chars ? codePoints(*chars) : std::vector<std::string>{};
    auto strip = [&](const std::string& c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : isPythonSpace(c);
    };
    std::size_t from = 0, to = cps.size();
    while (left && from < to && strip(cps[from])) ++from;
    while (right && to > from && strip(cps[to - 1])) --to;
    std::string out;
    for (std::size_t i = from; i < to; ++i) out += cps[i];
    return out;
}

List split(const std::string& s, const std::optional<std::string>& separator) {
    List parts;
    if (!separator) {  // runs of whitespace, no empty parts
        std::string current;
        for (const auto& c : codePoints(s)) {
            if (isPythonSpace(c)) {
                if (!current.empty()) parts.push_back(Value::of(current)), current.clear();
            } else {
                current += c;
            }
        }
        if (!current.empty()) parts.push_back(Value::of(current));
        return parts;
    }
    if (separator->empty()) throw std::runtime_error("split: empty separator");
    std::size_t start = 0;
    for (std::size_t at; (at = s.find(*separator, start)) != std::string::npos; start = at + separator->size())
        parts.push_back(Value::of(s.substr(start, at - start)));
    parts.push_back(Value::of(s.substr(start)));
    return parts;
}

// ---- lexer: text and tags ------------------------------------------------------------------------

struct Chunk {
    enum class Kind { Text, Output, Statement } kind;
    std::string text;  // the text, or the tag's inside without its delimiters and - / + markers
    int line = 1;
};

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Where the tag that starts at `from` ends (the index of its closing "}}" / "%}"), skipping string
// literals inside it.
std::size_t tagEnd(const std::string& s, std::size_t from, const char* close) {
    char quote = 0;
    for (std::size_t i = from; i + 1 < s.size(); ++i) {
        if (quote) {
            if (s[i] == '\\')
                ++i;
            else if (s[i] == quote)
                quote = 0;
        } else if (s[i] == '\'' || s[i] == '"') {
            quote = s[i];
        } else if (s[i] == close[0] && s[i + 1] == close[1]) {
            return i;
        }
    }
    return std::string::npos;
}

// The template as text and tags, whitespace handled as transformers' environment does: "-" strips
// all whitespace on its side; lstrip_blocks removes the spaces and tabs before a block or comment
// tag that starts a line; trim_blocks removes one newline after one.
std::vector<Chunk> lex(std::string source, const std::string& name) {
    for (std::size_t at; (at = source.find("\r\n")) != std::string::npos;) source.erase(at, 1);
    std::vector<Chunk> chunks;
    std::size_t pos = 0;
    bool lineStarting = true, stripNext = false, trimNewline = false;
    auto lineAt = [&](std::size_t i) {
        return 1 + static_cast<int>(std::count(source.begin(), source.begin() + i, '\n'));
    };
    while (pos <= source.size()) {
        std::size_t open = pos;
        while ((open = source.find('{', open)) != std::string::npos && open + 1 < source.size() &&
               source[open + 1] != '{' && source[open + 1] != '%' && source[open + 1] != '#')
            ++open;
        if (open + 1 >= source.size()) open = std::string::npos;
        std::string text = source.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
        if (stripNext)
            text.erase(0, text.find_first_not_of(" \t\n\r\v\f") == std::string::npos
                              ? text.size()
                              : text.find_first_not_of(" \t\n\r\v\f"));
        else if (trimNewline && !text.empty() && text[0] == '\n')
            text.erase(0, 1);
        if (open == std::string::npos) {
            if (!text.empty()) chunks.push_back({Chunk::Kind::Text, text, lineAt(pos)});
            break;
        }
        const char kind = source[open + 1];
        std::size_t inner = open + 2;
        const char marker = inner < source.size() ? source[inner] : 0;
        if (marker == '-' || marker == '+') ++inner;
        if (marker == '-') {
            text.erase(text.find_last_not_of(" \t\n\r\v\f") + 1);
        } else if (marker != '+' && kind != '{') {
            const std::size_t lineStart = text.rfind('\n') + 1;  // 0 when there is no newline
            if ((lineStart > 0 || lineStarting) && text.find_first_not_of(" \t", lineStart) == std::string::npos)
                text.erase(lineStart);
        }
        if (!text.empty()) chunks.push_back({Chunk::Kind::Text, text, lineAt(pos)});
        const int line = lineAt(open);
        const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        const std::size_t end = kind == '#' ? source.find("#}", inner) : tagEnd(source, inner, close);
        if (end == std::string::npos)
            throw FormatError(name + ": line " + std::to_string(line) + ": '{" + kind + "' is never closed");
        std::size_t innerEnd = end;
        const bool stripAfter = end > inner && source[end - 1] == '-';
        const bool keepAfter = end > inner && source[end - 1] == '+';
        if (stripAfter || keepAfter) --innerEnd;
        if (kind != '#')
            chunks.push_back({kind == '{' ? Chunk::Kind::Output : Chunk::Kind::Statement,
                              source.substr(inner, innerEnd - inner), line});
        pos = end + 2;
        stripNext = stripAfter;
        trimNewline = kind != '{' && !keepAfter && !stripAfter;
        lineStarting = trimNewline && pos < source.size() && source[pos] == '\n';
        if (stripAfter) lineStarting = false;
    }
    return chunks;
}

// ---- expressions ---------------------------------------------------------------------------------

struct Token {
    enum class Type { Name, String, Int, Float, Op, End } type = Type::End;
    std::string text;
    int64_t integer = 0;
    double number = 0;
};

class TokenStream {
public:
    TokenStream(const std::string& s, std::string where) : where_(std::move(where)) {
        std::size_t i = 0;
        while (i < s.size()) {
            if (isSpace(s[i])) {
                ++i;
            } else if (std::isalpha(static_cast<unsigned char>(s[i])) || s[i] == '_') {
                std::size_t j = i;
                while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
                tokens_.push_back({Token::Type::Name, s.substr(i, j - i)});
                i = j;
            } else if (std::isdigit(static_cast<unsigned char>(s[i]))) {
                i = number(s, i);
            } else if (s[i] == '\'' || s[i] == '"') {
                i = string(s, i);
            } else {
                static const char* twoChar[] = {"//", "**", "==", "!=", "<=", ">="};
                std::string op(1, s[i]);
                for (const char* t : twoChar)
                    if (s.compare(i, 2, t) == 0) op = t;
                if (op.size() == 1 && std::string("()[]{}.,:|~+-*/%<>=").find(op[0]) == std::string::npos)
                    fail("unexpected character '" + op + "'");
                tokens_.push_back({Token::Type::Op, op});
                i += op.size();
            }
        }
        tokens_.push_back({Token::Type::End, ""});
    }
    const Token& peek(std::size_t ahead = 0) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }
    Token next() { return tokens_[std::min(at_++, tokens_.size() - 1)]; }
    bool isOp(const char* op, std::size_t ahead = 0) const {
        return peek(ahead).type == Token::Type::Op && peek(ahead).text == op;
    }
    bool isName(const char* name, std::size_t ahead = 0) const {
        return peek(ahead).type == Token::Type::Name && peek(ahead).text == name;
    }
    bool accept(const char* op) {
        if (!isOp(op)) return false;
        ++at_;
        return true;
    }
    bool acceptName(const char* name) {
        if (!isName(name)) return false;
        ++at_;
        return true;
    }
    void expect(const char* op) {
        if (!accept(op)) fail(std::string("expected '") + op + "', found '" + peek().text + "'");
    }
    std::string expectName() {
        if (peek().type != Token::Type::Name) fail("expected a name, found '" + peek().text + "'");
        return next().text;
    }
    bool atEnd() const { return peek().type == Token::Type::End; }
    [[noreturn]] void fail(const std::string& what) const { throw FormatError(where_ + ": " + what); }

private:
    std::size_t number(const std::string& s, std::size_t i) {
        std::size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
        const bool isFloat = j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
        if (isFloat) {
            ++j;
            while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
        std::string digits;
        for (std::size_t k = i; k < j; ++k)
            if (s[k] != '_') digits += s[k];
        Token t{isFloat ? Token::Type::Float : Token::Type::Int, digits};
        const char* first = digits.data();
        const char* last = first + digits.size();
        const auto parsed = isFloat ? std::from_chars(first, last, t.number) : std::from_chars(first, last, t.integer);
        if (parsed.ec != std::errc() || parsed.ptr != last) fail("the number " + digits + " is out of range");
        tokens_.push_back(t);
        return j;
    }
    // A string literal with Python's escapes (Jinja decodes them with unicode-escape).
    std::size_t string(const std::string& s, std::size_t i) {
        const char quote = s[i++];
        std::string out;
        while (i < s.size() && s[i] != quote) {
            if (s[i] != '\\' || i + 1 >= s.size()) {
                out += s[i++];
                continue;
            }
            const char e = s[i + 1];
            i += 2;
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '0': out += '\0'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\n': break;
            case 'x':
            case 'u':
            case 'U': {
                const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                uint32_t code = 0;
                for (std::size_t k = 0; k < digits; ++k) {
                    const char h = i + k < s.size() ? s[i + k] : '\0';
                    if (!std::isxdigit(static_cast<unsigned char>(h)))
                        fail("the \\" + std::string(1, e) + " escape needs " + std::to_string(digits) + " hex digits");
                    code = code * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                                 ? h - '0'
                                                                 : (h | 0x20) - 'a' + 10);
                }
                if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
                    fail("the \\" + std::string(1, e) + " escape names no Unicode character a text can hold");
                appendUtf8(out, static_cast<char32_t>(code));
                i += digits;
                break;
            }
            default: out += '\\', out += e;
            }
        }
        if (i >= s.size()) fail("a string literal is never closed");
        tokens_.push_back({Token::Type::String, out});
        return i + 1;
    }
    std::vector<Token> tokens_;
    std::size_t at_ = 0;
    std::string where_;
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

// The filters and tests the renderer implements; a template naming another is refused when parsed.
const std::vector<std::string> kFilters = {"length",  "count",   "trim",  "string",  "lower", "upper",
                                           "replace", "default", "d",     "tojson",  "join",  "first",
                                           "last",    "list",    "items", "reverse", "int"};
const std::vector<std::string> kTests = {"defined",  "undefined", "none", "string", "number",  "integer",
                                         "float",    "boolean",   "true", "false",  "mapping", "iterable",
                                         "sequence", "even",      "odd",  "eq",     "equalto"};

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

void requireKnown(const TokenStream& ts, const std::vector<std::string>& known, const std::string& kind,
                  const std::string& name) {
    if (std::find(known.begin(), known.end(), name) == known.end())
        ts.fail(kind + " '" + name + "' is not supported by kvscope's Jinja subset (supported: " + joined(known) + ")");
}

struct Expr {
    enum class Kind {
        Literal,
        Name,
        List,
        Dict,
        Attribute,
        Item,
        Slice,
        Call,
        Filter,
        Test,
        Not,
        Negate,
        Binary,
        And,
        Or,
        Conditional
    };
    Kind kind = Kind::Literal;
    Value literal;
    std::string name;                   // Name, Attribute, Filter, Test, Binary's operator
    std::vector<ExprPtr> args;          // operands and positional arguments
    std::vector<std::pair<std::string, ExprPtr>> keywords;  // Dict entries (key expr in args), call keywords
    bool negated = false;               // Test: "is not"; Binary "in": "not in"
    int line = 0;
};

ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

// Nesting deeper than any template needs is refused before the recursive parsers exhaust the stack.
constexpr int kMaxNesting = 64;
constexpr int64_t kMaxRange = 1 << 20;  // range()'s elements: a list, not a lazy sequence here

class NestingGuard {
public:
    NestingGuard(int& depth, const TokenStream& ts) : depth_(depth) {
        if (++depth_ > kMaxNesting) ts.fail("expressions nest deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~NestingGuard() { --depth_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

private:
    int& depth_;
};

class ExprParser {
public:
    ExprParser(TokenStream& ts, int line) : ts_(ts), line_(line) {}

    ExprPtr expression() {
        NestingGuard guard(depth_, ts_);
        ExprPtr e = orExpr();
        if (ts_.acceptName("if")) {
            Expr c = node(Expr::Kind::Conditional);
            ExprPtr condition = orExpr();
            ExprPtr otherwise = ts_.acceptName("else") ? expression() : make(node(Expr::Kind::Literal));
            c.args = {condition, e, otherwise};
            return make(std::move(c));
        }
        return e;
    }

private:
    Expr node(Expr::Kind k) const {
        Expr e;
        e.kind = k;
        e.line = line_;
        return e;
    }
    ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, Expr::Kind k = Expr::Kind::Binary,
                   bool negated = false) {
        Expr e = node(k);
        e.name = op;
        e.args = {std::move(a), std::move(b)};
        e.negated = negated;
        return make(std::move(e));
    }
    ExprPtr orExpr() {
        ExprPtr e = andExpr();
        while (ts_.acceptName("or")) e = binary("or", e, andExpr(), Expr::Kind::Or);
        return e;
    }
    ExprPtr andExpr() {
        ExprPtr e = notExpr();
        while (ts_.acceptName("and")) e = binary("and", e, notExpr(), Expr::Kind::And);
        return e;
    }
    ExprPtr notExpr() {
        NestingGuard guard(depth_, ts_);
        if (ts_.acceptName("not")) {
            Expr e = node(Expr::Kind::Not);
            e.args = {notExpr()};
            return make(std::move(e));
        }
        return compare();
    }
    ExprPtr compare() {
        ExprPtr e = additive();
        for (;;) {
            std::string op;
            for (const char* c : {"==", "!=", "<", ">", "<=", ">="})
                if (ts_.isOp(c)) op = c;
            if (!op.empty()) {
                ts_.next();
                e = binary(op, e, additive());
            } else if (ts_.acceptName("in")) {
                e = binary("in", e, additive());
            } else if (ts_.isName("not") && ts_.isName("in", 1)) {
                ts_.next(), ts_.next();
                e = binary("in", e, additive(), Expr::Kind::Binary, true);
            } else {
                return e;
            }
        }
    }
    ExprPtr additive() {
        ExprPtr e = concat();
        while (ts_.isOp("+") || ts_.isOp("-")) {
            const std::string op = ts_.next().text;
            e = binary(op, e, concat());
        }
        return e;
    }
    ExprPtr concat() {
        ExprPtr e = multiplicative();
        while (ts_.accept("~")) e = binary("~", e, multiplicative());
        return e;
    }
    ExprPtr multiplicative() {
        ExprPtr e = power();
        while (ts_.isOp("*") || ts_.isOp("/") || ts_.isOp("//") || ts_.isOp("%")) {
            const std::string op = ts_.next().text;
            e = binary(op, e, power());
        }
        return e;
    }
    ExprPtr power() {
        ExprPtr e = unary();
        while (ts_.accept("**")) e = binary("**", e, unary());
        return e;
    }
    ExprPtr unary() {
        NestingGuard guard(depth_, ts_);
        if (ts_.accept("-")) {
            Expr e = node(Expr::Kind::Negate);
            e.args = {unary()};
            return make(std::move(e));
        }
        if (ts_.accept("+")) return unary();
        return filtered(postfix(primary()));
    }
    // `x | f(args) | g` and `x is [not] test(args)`, which bind tighter than any operator.
    ExprPtr filtered(ExprPtr e) {
        for (;;) {
            if (ts_.accept("|")) {
                Expr f = node(Expr::Kind::Filter);
                f.name = ts_.expectName();
                requireKnown(ts_, kFilters, "filter", f.name);
                f.args = {e};
                if (ts_.isOp("(")) arguments(f);
                e = make(std::move(f));
            } else if (ts_.acceptName("is")) {
                Expr t = node(Expr::Kind::Test);
                t.negated = ts_.acceptName("not");
                t.name = ts_.expectName();
                requireKnown(ts_, kTests, "test", t.name);
                t.args = {e};
                if (ts_.isOp("("))
                    arguments(t);
                else if (!ts_.atEnd() &&
                         (ts_.peek().type == Token::Type::String || ts_.peek().type == Token::Type::Int))
                    t.args.push_back(primary());  // `is divisibleby 3`, `is eq 'x'`
                e = make(std::move(t));
            } else {
                return e;
            }
        }
    }
    ExprPtr postfix(ExprPtr e) {
        for (;;) {
            if (ts_.accept(".")) {
                Expr a = node(Expr::Kind::Attribute);
                a.name = ts_.peek().type == Token::Type::Int ? std::to_string(ts_.next().integer) : ts_.expectName();
                a.args = {e};
                e = make(std::move(a));
            } else if (ts_.accept("[")) {
                e = subscript(e);
            } else if (ts_.isOp("(")) {
                Expr c = node(Expr::Kind::Call);
                c.args = {e};
                arguments(c);
                e = make(std::move(c));
            } else {
                return e;
            }
        }
    }
    ExprPtr subscript(ExprPtr target) {
        ExprPtr parts[3];
        int index = 0;
        bool slice = false;
        while (!ts_.isOp("]")) {
            if (ts_.accept(":")) {
                slice = true;
                if (++index > 2) ts_.fail("a slice has at most three parts");
                continue;
            }
            parts[index] = expression();
        }
        ts_.expect("]");
        Expr e = node(slice ? Expr::Kind::Slice : Expr::Kind::Item);
        e.args = {target};
        if (slice)
            for (auto& p : parts) e.args.push_back(p);
        else if (!parts[0])
            ts_.fail("empty subscript []");
        else
            e.args.push_back(parts[0]);
        return make(std::move(e));
    }
    void arguments(Expr& call) {
        ts_.expect("(");
        while (!ts_.accept(")")) {
            if (ts_.peek().type == Token::Type::Name && ts_.isOp("=", 1)) {
                const std::string key = ts_.next().text;
                ts_.next();
                call.keywords.emplace_back(key, expression());
            } else {
                call.args.push_back(expression());
            }
            if (!ts_.isOp(")")) ts_.expect(",");
        }
    }
    ExprPtr primary() {
        const Token t = ts_.next();
        Expr e = node(Expr::Kind::Literal);
        switch (t.type) {
        case Token::Type::String: {
            std::string s = t.text;
            while (ts_.peek().type == Token::Type::String) s += ts_.next().text;  // adjacent literals join
            e.literal = Value::of(s);
            return make(std::move(e));
        }
        case Token::Type::Int: e.literal = Value::of(t.integer); return make(std::move(e));
        case Token::Type::Float: e.literal = Value::of(t.number); return make(std::move(e));
        case Token::Type::Name:
            if (t.text == "true" || t.text == "True")
                e.literal = Value::of(true);
            else if (t.text == "false" || t.text == "False")
                e.literal = Value::of(false);
            else if (t.text == "none" || t.text == "None")
                e.literal = Value::none();
            else
                e.kind = Expr::Kind::Name, e.name = t.text;
            return make(std::move(e));
        case Token::Type::Op:
            if (t.text == "(") {
                ExprPtr inner = expression();
                if (ts_.isOp(",")) return sequence(inner, ")");  // a tuple, taken as a list
                ts_.expect(")");
                return inner;
            }
            if (t.text == "[") return sequence(nullptr, "]");
            if (t.text == "{") return dictionary();
            break;
        case Token::Type::End: ts_.fail("an expression ends too early");
        }
        ts_.fail("unexpected '" + t.text + "'");
    }
    ExprPtr sequence(ExprPtr first, const char* close) {
        Expr e = node(Expr::Kind::List);
        if (first) e.args.push_back(first), ts_.accept(",");
        while (!ts_.accept(close)) {
            e.args.push_back(expression());
            if (!ts_.isOp(close)) ts_.expect(",");
        }
        return make(std::move(e));
    }
    ExprPtr dictionary() {
        Expr e = node(Expr::Kind::Dict);
        while (!ts_.accept("}")) {
            e.args.push_back(expression());
            ts_.expect(":");
            e.keywords.emplace_back("", expression());
            if (!ts_.isOp("}")) ts_.expect(",");
        }
        return make(std::move(e));
    }
    TokenStream& ts_;
    int line_;
    int depth_ = 0;
};

}  // namespace

// ---- statements -------------------------------------------------------------------------------------

struct Node {
    enum class Kind { Sequence, Text, Output, If, For, Set, Break, Continue } kind = Kind::Sequence;
    std::string text;                       // Text
    std::vector<std::shared_ptr<Node>> children;  // Sequence; If: one body per branch; For: body, else
    std::vector<ExprPtr> conditions;        // If: one per branch (the else branch has none)
    ExprPtr value;                          // Output, For's iterable, Set's value
    std::vector<std::string> targets;       // For: loop variables; Set: name, or namespace and attribute
    int line = 0;
};

namespace {

using NodePtr = std::shared_ptr<Node>;

class StatementParser {
public:
    StatementParser(std::vector<Chunk> chunks, std::string name) : chunks_(std::move(chunks)), name_(std::move(name)) {}

    NodePtr parseAll() {
        auto [body, end] = block({});
        if (!end.empty()) fail(line_, "'" + end + "' without a matching opening tag");
        return body;
    }

private:
    std::string where(int line) const { return name_ + ": line " + std::to_string(line); }
    [[noreturn]] void fail(int line, const std::string& what) const { throw FormatError(where(line) + ": " + what); }

    // Parses chunks until one of `ends` (a statement keyword) and returns the body and that keyword.
    std::pair<NodePtr, std::string> block(const std::vector<std::string>& ends) {
        if (++depth_ > kMaxNesting) fail(line_, "blocks nest deeper than " + std::to_string(kMaxNesting) + " levels");
        struct Leave {
            int& depth;
            ~Leave() { --depth; }
        } leave{depth_};
        auto body = std::make_shared<Node>();
        while (at_ < chunks_.size()) {
            const Chunk& c = chunks_[at_++];
            line_ = c.line;
            if (c.kind == Chunk::Kind::Text) {
                auto t = std::make_shared<Node>();
                t->kind = Node::Kind::Text;
                t->text = c.text;
                body->children.push_back(t);
                continue;
            }
            TokenStream ts(c.text, where(c.line));
            if (c.kind == Chunk::Kind::Output) {
                auto out = std::make_shared<Node>();
                out->kind = Node::Kind::Output;
                out->line = c.line;
                out->value = ExprParser(ts, c.line).expression();
                if (!ts.atEnd()) ts.fail("unexpected '" + ts.peek().text + "' in {{ }}");
                body->children.push_back(out);
                continue;
            }
            const std::string keyword = ts.expectName();
            if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) {
                pendingTokens_ = std::make_shared<TokenStream>(ts);
                return {body, keyword};
            }
            body->children.push_back(statement(keyword, ts, c.line));
        }
        if (!ends.empty()) fail(line_, "the template ends inside a block; expected '" + ends.back() + "'");
        return {body, ""};
    }

    NodePtr statement(const std::string& keyword, TokenStream& ts, int line) {
        auto n = std::make_shared<Node>();
        n->line = line;
        if (keyword == "if") return ifStatement(ts, line);
        if (keyword == "for") return forStatement(ts, line);
        if (keyword == "set") {
            n->kind = Node::Kind::Set;
            n->targets.push_back(ts.expectName());
            if (ts.accept(".")) n->targets.push_back(ts.expectName());
            if (!ts.accept("="))
                fail(line,
                     "'set' needs '= value' here (block assignments {% set x %}...{% endset %} are not supported)");
            n->value = ExprParser(ts, line).expression();
        } else if (keyword == "break" || keyword == "continue") {
            n->kind = keyword == "break" ? Node::Kind::Break : Node::Kind::Continue;
        } else if (keyword == "generation") {  // transformers' assistant-mask extension: renders its body
            auto [body, end] = block({"endgeneration"});
            return body;
        } else {
            fail(line, "statement '" + keyword +
                           "' is not supported by kvscope's Jinja subset (supported: if, for, set, break, continue, "
                           "generation)");
        }
        if (!ts.atEnd()) ts.fail("unexpected '" + ts.peek().text + "' after the statement");
        return n;
    }

    NodePtr ifStatement(TokenStream& ts, int line) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::If;
        n->line = line;
        n->conditions.push_back(condition(ts, line));
        for (;;) {
            auto [body, end] = block({"elif", "else", "endif"});
            n->children.push_back(body);
            TokenStream& rest = *pendingTokens_;
            if (end == "endif") break;
            if (end == "elif") {
                n->conditions.push_back(condition(rest, line_));
                continue;
            }
            auto [elseBody, close] = block({"endif"});  // else
            n->children.push_back(elseBody);
            break;
        }
        return n;
    }

    ExprPtr condition(TokenStream& ts, int line) {
        ExprPtr e = ExprParser(ts, line).expression();
        if (!ts.atEnd()) ts.fail("unexpected '" + ts.peek().text + "' after the condition");
        return e;
    }

    NodePtr forStatement(TokenStream& ts, int line) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::For;
        n->line = line;
        do n->targets.push_back(ts.expectName());
        while (ts.accept(","));
        if (!ts.acceptName("in")) ts.fail("expected 'in' in a for loop");
        n->value = ExprParser(ts, line).expression();
        if (ts.isName("recursive") || ts.isName("if"))
            ts.fail("'" + ts.peek().text + "' in a for loop is not supported by kvscope's Jinja subset");
        if (!ts.atEnd()) ts.fail("unexpected '" + ts.peek().text + "' in the for loop");
        auto [body, end] = block({"else", "endfor"});
        n->children.push_back(body);
        if (end == "else") {
            auto [elseBody, close] = block({"endfor"});
            n->children.push_back(elseBody);
        }
        return n;
    }

    std::vector<Chunk> chunks_;
    std::string name_;
    std::size_t at_ = 0;
    int line_ = 1;
    int depth_ = 0;
    std::shared_ptr<TokenStream> pendingTokens_;  // the rest of the tag that ended the last block
};

// ---- rendering ---------------------------------------------------------------------------------------

struct LoopBreak {};
struct LoopContinue {};

class Renderer {
public:
    Renderer(const std::string& name, Value globals) : name_(name) { scopes_.push_back(std::move(globals)); }

    void render(const Node& n, std::string& out) {
        switch (n.kind) {
        case Node::Kind::Sequence:
            for (const auto& c : n.children) render(*c, out);
            return;
        case Node::Kind::Text: out += n.text; return;
        case Node::Kind::Output: out += str(eval(*n.value)); return;
        case Node::Kind::If:
            for (std::size_t i = 0; i < n.children.size(); ++i)
                if (i >= n.conditions.size() || truthy(eval(*n.conditions[i]))) {
                    render(*n.children[i], out);
                    return;
                }
            return;
        case Node::Kind::For: forLoop(n, out); return;
        case Node::Kind::Set: assign(n); return;
        case Node::Kind::Break: throw LoopBreak{};
        case Node::Kind::Continue: throw LoopContinue{};
        }
    }

private:
    [[noreturn]] void fail(int line, const std::string& what) const {
        throw UsageError(name_ + ": line " + std::to_string(line) + ": " + what);
    }

    void assign(const Node& n) {
        Value v = eval(*n.value);
        if (n.targets.size() == 1) {
            set(scopes_.back(), n.targets[0], std::move(v));
            return;
        }
        Value target = lookup(n.targets[0]);
        if (!target.is(Value::Kind::Namespace))
            fail(n.line,
                 "'set " + n.targets[0] + "." + n.targets[1] + "' needs a namespace(), not a " + kindName(target));
        // Values share their lists and dicts; a namespace holding itself would never be freed.
        if (holds(v, *target.dict, 0)) fail(n.line, "a namespace cannot hold itself");
        set(target, n.targets[1], std::move(v));
    }
    static bool holds(const Value& v, const Dict& dict, int depth) {
        checkDepth(depth);
        if (v.dict.get() == &dict) return true;
        if (v.dict)
            for (const auto& kv : *v.dict)
                if (holds(kv.second, dict, depth + 1)) return true;
        if (v.list)
            for (const Value& e : *v.list)
                if (holds(e, dict, depth + 1)) return true;
        return v.self && holds(*v.self, dict, depth + 1);
    }
    static void set(Value& object, const std::string& key, Value v) {
        for (auto& [k, e] : *object.dict)
            if (k == key) {
                e = std::move(v);
                return;
            }
        object.dict->emplace_back(key, std::move(v));
    }
    Value lookup(const std::string& name) const {
        for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
            if (const Value* v = s->find(name)) return *v;
        static const char* builtins[] = {"namespace", "raise_exception", "strftime_now", "range", "dict"};
        for (const char* b : builtins)
            if (name == b) return Value::function(name);
        return Value();
    }

    void forLoop(const Node& n, std::string& out) {
        const Value iterable = eval(*n.value);
        List items;
        if (iterable.is(Value::Kind::List))
            items = *iterable.list;
        else if (iterable.is(Value::Kind::Dict))
            for (const auto& [k, v] : *iterable.dict) items.push_back(Value::of(k));
        else if (iterable.is(Value::Kind::String))
            for (const auto& c : codePoints(iterable.text)) items.push_back(Value::of(c));
        else if (!iterable.is(Value::Kind::Undefined) && !iterable.is(Value::Kind::None))
            fail(n.line, std::string("cannot loop over a ") + kindName(iterable));
        else if (iterable.is(Value::Kind::None))
            fail(n.line, "cannot loop over none");
        const auto length = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < length; ++i) {
            Value scope = Value::of(Dict{});
            bindTargets(scope, n, items[static_cast<std::size_t>(i)]);
            set(scope, "loop",
                Value::of(Dict{{"index", Value::of(i + 1)},
                               {"index0", Value::of(i)},
                               {"revindex", Value::of(length - i)},
                               {"revindex0", Value::of(length - i - 1)},
                               {"first", Value::of(i == 0)},
                               {"last", Value::of(i == length - 1)},
                               {"length", Value::of(length)}}));
            scopes_.push_back(scope);
            try {
                render(*n.children[0], out);
            } catch (const LoopBreak&) {
                scopes_.pop_back();
                break;
            } catch (const LoopContinue&) {}
            scopes_.pop_back();
        }
        if (length == 0 && n.children.size() > 1) render(*n.children[1], out);
    }
    void bindTargets(Value& scope, const Node& n, const Value& item) {
        if (n.targets.size() == 1) return set(scope, n.targets[0], item);
        if (!item.is(Value::Kind::List) || item.list->size() != n.targets.size())
            fail(n.line, "cannot unpack a " + std::string(kindName(item)) + " into " +
                             std::to_string(n.targets.size()) + " loop variables");
        for (std::size_t k = 0; k < n.targets.size(); ++k) set(scope, n.targets[k], (*item.list)[k]);
    }

    // Errors of the operations (a type that does not fit, an out-of-range number) name the line.
    Value eval(const Expr& e) {
        try {
            return evalUnchecked(e);
        } catch (const Error&) {
            throw;
        } catch (const std::exception& error) {
            fail(e.line, error.what());
        }
    }

    Value evalUnchecked(const Expr& e) {
        switch (e.kind) {
        case Expr::Kind::Literal: return e.literal;
        case Expr::Kind::Name: return lookup(e.name);
        case Expr::Kind::List: {
            List l;
            for (const auto& a : e.args) l.push_back(eval(*a));
            return Value::of(std::move(l));
        }
        case Expr::Kind::Dict: {
            Dict d;
            for (std::size_t i = 0; i < e.args.size(); ++i) {
                const Value key = eval(*e.args[i]);
                if (!key.is(Value::Kind::String)) throw std::runtime_error("dictionary keys must be strings here");
                d.emplace_back(key.text, eval(*e.keywords[i].second));
            }
            return Value::of(std::move(d));
        }
        case Expr::Kind::Attribute: return attribute(eval(*e.args[0]), e.name);
        case Expr::Kind::Item: return item(eval(*e.args[0]), eval(*e.args[1]));
        case Expr::Kind::Slice: return slice(e);
        case Expr::Kind::Call: return call(e);
        case Expr::Kind::Filter: return filter(e);
        case Expr::Kind::Test: return Value::of(test(e) != e.negated);
        case Expr::Kind::Not: return Value::of(!truthy(eval(*e.args[0])));
        case Expr::Kind::Negate: {
            const Value v = eval(*e.args[0]);
            if (v.is(Value::Kind::Int)) {
                if (v.integer == INT64_MIN) throw std::runtime_error("integer overflow in unary -");
                return Value::of(-v.integer);
            }
            if (v.is(Value::Kind::Float)) return Value::of(-v.number);
            throw std::runtime_error(std::string("cannot negate a ") + kindName(v));
        }
        case Expr::Kind::And: {
            Value a = eval(*e.args[0]);
            return truthy(a) ? eval(*e.args[1]) : a;
        }
        case Expr::Kind::Or: {
            Value a = eval(*e.args[0]);
            return truthy(a) ? a : eval(*e.args[1]);
        }
        case Expr::Kind::Conditional: return truthy(eval(*e.args[0])) ? eval(*e.args[1]) : eval(*e.args[2]);
        case Expr::Kind::Binary: return binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.negated);
        }
        return Value();
    }

    // obj.name: a dict's method, else its item; a string's or namespace's method or attribute.
    static Value attribute(const Value& obj, const std::string& name) {
        static const char* dictMethods[] = {"items", "keys", "values", "get"};
        static const char* stringMethods[] = {"startswith", "endswith", "split", "strip",   "lstrip",
                                              "rstrip",     "upper",    "lower", "replace", "title",
                                              "capitalize", "count",    "find",  "join"};
        if (obj.is(Value::Kind::Dict))
            for (const char* m : dictMethods)
                if (name == m) return Value::function(name, obj);
        if (obj.is(Value::Kind::String))
            for (const char* m : stringMethods)
                if (name == m) return Value::function(name, obj);
        if (obj.is(Value::Kind::Undefined)) throw std::runtime_error("'" + name + "' of an undefined value");
        return item(obj, Value::of(name));
    }

    static int64_t normalizedIndex(int64_t i, int64_t size) { return i < 0 ? i + size : i; }

    static Value item(const Value& obj, const Value& key) {
        if ((obj.is(Value::Kind::Dict) || obj.is(Value::Kind::Namespace)) && key.is(Value::Kind::String)) {
            const Value* v = obj.find(key.text);
            return v ? *v : Value();
        }
        if (key.is(Value::Kind::Int) && (obj.is(Value::Kind::List) || obj.is(Value::Kind::String))) {
            if (obj.is(Value::Kind::List)) {
                const int64_t i = normalizedIndex(key.integer, static_cast<int64_t>(obj.list->size()));
                return i >= 0 && i < static_cast<int64_t>(obj.list->size()) ? (*obj.list)[static_cast<std::size_t>(i)]
                                                                            : Value();
            }
            const auto cps = codePoints(obj.text);
            const int64_t i = normalizedIndex(key.integer, static_cast<int64_t>(cps.size()));
            return i >= 0 && i < static_cast<int64_t>(cps.size()) ? Value::of(cps[static_cast<std::size_t>(i)])
                                                                  : Value();
        }
        if (obj.is(Value::Kind::Undefined)) throw std::runtime_error("an item of an undefined value");
        return Value();
    }

    Value slice(const Expr& e) {
        const Value obj = eval(*e.args[0]);
        std::vector<Value> elements;
        if (obj.is(Value::Kind::List))
            elements = *obj.list;
        else if (obj.is(Value::Kind::String))
            for (const auto& c : codePoints(obj.text)) elements.push_back(Value::of(c));
        else
            throw std::runtime_error(std::string("cannot slice a ") + kindName(obj));
        auto part = [&](std::size_t k) -> std::optional<int64_t> {
            if (!e.args[k]) return std::nullopt;
            const Value v = eval(*e.args[k]);
            if (v.is(Value::Kind::None)) return std::nullopt;
            if (!v.is(Value::Kind::Int)) throw std::runtime_error("slice indices must be integers");
            return v.integer;
        };
        const int64_t n = static_cast<int64_t>(elements.size());
        const int64_t step = part(3).value_or(1);
        if (step == 0) throw std::runtime_error("slice step cannot be zero");
        auto clamp = [&](std::optional<int64_t> i, int64_t fallback) {  // Python's PySlice_AdjustIndices
            if (!i) return fallback;
            int64_t v = *i < 0 ? *i + n : *i;
            if (step > 0) return std::clamp<int64_t>(v, 0, n);
            return std::clamp<int64_t>(v, -1, n - 1);
        };
        const int64_t start = clamp(part(1), step > 0 ? 0 : n - 1), stop = clamp(part(2), step > 0 ? n : -1);
        List picked;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            picked.push_back(elements[static_cast<std::size_t>(i)]);
        if (obj.is(Value::Kind::List)) return Value::of(std::move(picked));
        std::string s;
        for (const auto& c : picked) s += c.text;
        return Value::of(s);
    }

    Value call(const Expr& e) {
        const Value callee = eval(*e.args[0]);
        List args;
        for (std::size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
        Dict keywords;
        for (const auto& [k, v] : e.keywords) keywords.emplace_back(k, eval(*v));
        if (!callee.is(Value::Kind::Function))
            throw std::runtime_error(std::string("a ") + kindName(callee) + " is not callable");
        if (callee.self) return method(*callee.self, callee.text, args);
        return global(callee.text, args, keywords, e.line);
    }

    Value global(const std::string& name, const List& args, const Dict& keywords, int line) {
        if (name == "raise_exception")
            throw UsageError(name_ + ": line " + std::to_string(line) +
                             ": the template raised: " + (args.empty() ? std::string() : str(args[0])));
        if (name == "namespace" || name == "dict") {
            Dict d = !args.empty() && args[0].is(Value::Kind::Dict) ? *args[0].dict : Dict{};
            for (const auto& kv : keywords) d.push_back(kv);
            return Value::of(std::move(d), name == "namespace" ? Value::Kind::Namespace : Value::Kind::Dict);
        }
        if (name == "strftime_now") {
            const std::time_t now = std::time(nullptr);
            std::tm local{};
            localtime_r(&now, &local);
            char buffer[256];
            const std::size_t n =
                std::strftime(buffer, sizeof buffer, args.empty() ? "" : str(args[0]).c_str(), &local);
            return Value::of(std::string(buffer, n));
        }
        if (name == "range") {
            int64_t from = 0, to = 0, step = 1;
            if (args.size() == 1)
                to = args[0].integer;
            else if (args.size() >= 2)
                from = args[0].integer, to = args[1].integer, step = args.size() > 2 ? args[2].integer : 1;
            if (step == 0) throw std::runtime_error("range() step cannot be zero");
            if ((to - from) / step > kMaxRange) throw std::runtime_error("range() of more than 1048576 numbers");
            List l;
            for (int64_t i = from; step > 0 ? i < to : i > to; i += step) l.push_back(Value::of(i));
            return Value::of(std::move(l));
        }
        throw std::runtime_error("'" + name + "' is not callable");
    }

    static std::optional<std::string> optionalText(const List& args, std::size_t i) {
        if (i >= args.size() || args[i].is(Value::Kind::None)) return std::nullopt;
        return str(args[i]);
    }

    static Value method(const Value& self, const std::string& name, const List& args) {
        if (self.is(Value::Kind::Dict)) {
            if (name == "get") {
                const Value* v = args.empty() ? nullptr : self.find(str(args[0]));
                return v ? *v : args.size() > 1 ? args[1] : Value::none();
            }
            List l;
            for (const auto& [k, v] : *self.dict)
                l.push_back(name == "items" ? Value::of(List{Value::of(k), v}) : name == "keys" ? Value::of(k) : v);
            return Value::of(std::move(l));
        }
        const std::string& s = self.text;
        if (name == "startswith" || name == "endswith") {
            List candidates = !args.empty() && args[0].is(Value::Kind::List) ? *args[0].list : args;
            for (const auto& c : candidates) {
                const std::string& p = c.text;
                const bool match = name == "startswith"
                                       ? s.compare(0, p.size(), p) == 0
                                       : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
                if (match) return Value::of(true);
            }
            return Value::of(false);
        }
        if (name == "split") return Value::of(split(s, optionalText(args, 0)));
        if (name == "strip" || name == "lstrip" || name == "rstrip")
            return Value::of(stripped(s, optionalText(args, 0), name != "rstrip", name != "lstrip"));
        if (name == "upper" || name == "lower") {
            std::string out = s;
            for (char& c : out)
                c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                      : std::tolower(static_cast<unsigned char>(c)));
            return Value::of(out);
        }
        if (name == "replace") {
            if (args.size() < 2) throw std::runtime_error("replace() needs two arguments");
            const std::string from = str(args[0]), to = str(args[1]);
            std::string out;
            std::size_t start = 0;
            for (std::size_t at; !from.empty() && (at = s.find(from, start)) != std::string::npos;
                 start = at + from.size())
                out += s.substr(start, at - start) + to;
            return Value::of(out + s.substr(start));
        }
        if (name == "join") {
            std::string out;
            if (!args.empty() && args[0].is(Value::Kind::List))
                for (std::size_t i = 0; i < args[0].list->size(); ++i) out += (i ? s : "") + str((*args[0].list)[i]);
            return Value::of(out);
        }
        throw std::runtime_error("the string method '" + name + "' is not supported by kvscope's Jinja subset");
    }

    Value filter(const Expr& e) {
        const Value v = eval(*e.args[0]);
        List args;
        for (std::size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
        const std::string& f = e.name;
        if (f == "length" || f == "count") {
            if (v.is(Value::Kind::String)) return Value::of(static_cast<int64_t>(codePoints(v.text).size()));
            if (v.is(Value::Kind::List)) return Value::of(static_cast<int64_t>(v.list->size()));
            if (v.is(Value::Kind::Dict)) return Value::of(static_cast<int64_t>(v.dict->size()));
            throw std::runtime_error(std::string("length of a ") + kindName(v));
        }
        if (f == "trim") return Value::of(stripped(str(v), optionalText(args, 0), true, true));
        if (f == "string") return Value::of(str(v));
        if (f == "lower" || f == "upper") return method(Value::of(str(v)), f, {});
        if (f == "replace") return method(Value::of(str(v)), "replace", args);
        if (f == "default" || f == "d")
            return v.is(Value::Kind::Undefined) ? (args.empty() ? Value::of(std::string()) : args[0]) : v;
        if (f == "tojson") {
            int indent = -1;
            for (const auto& [k, value] : e.keywords)
                if (k == "indent")
                    indent = static_cast<int>(eval(*value).integer);
                else
                    throw std::runtime_error("tojson's '" + k +
                                             "' argument is not supported by kvscope's Jinja subset");
            if (!args.empty()) indent = static_cast<int>(args[0].integer);
            std::string out;
            appendJson(out, v, indent, 0);
            return Value::of(out);
        }
        if (f == "join") {
            const std::string separator = args.empty() ? "" : str(args[0]);
            return method(Value::of(separator), "join", {v.is(Value::Kind::List) ? v : Value::of(List{})});
        }
        if (f == "first" || f == "last") {
            if (!v.is(Value::Kind::List) || v.list->empty()) return Value();
            return f == "first" ? v.list->front() : v.list->back();
        }
        if (f == "list") return v.is(Value::Kind::List) ? v : Value::of(List{});
        if (f == "items") return method(v, "items", {});
        if (f == "reverse") {
            if (v.is(Value::Kind::String)) {
                auto cps = codePoints(v.text);
                std::string out;
                for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
                return Value::of(out);
            }
            List l = v.is(Value::Kind::List) ? *v.list : List{};
            std::reverse(l.begin(), l.end());
            return Value::of(std::move(l));
        }
        if (f == "int")
            return Value::of(v.is(Value::Kind::Float)    ? static_cast<int64_t>(v.number)
                             : v.is(Value::Kind::String) ? static_cast<int64_t>(std::stoll(v.text))
                                                         : v.integer);
        fail(e.line, "filter '" + f + "' has no implementation");  // requireKnown refused any other name
    }

    bool test(const Expr& e) {
        const Value v = eval(*e.args[0]);
        const std::string& t = e.name;
        if (t == "defined") return !v.is(Value::Kind::Undefined);
        if (t == "undefined") return v.is(Value::Kind::Undefined);
        if (t == "none") return v.is(Value::Kind::None);
        if (t == "string") return v.is(Value::Kind::String);
        if (t == "number") return v.is(Value::Kind::Int) || v.is(Value::Kind::Float);
        if (t == "integer") return v.is(Value::Kind::Int);
        if (t == "float") return v.is(Value::Kind::Float);
        if (t == "boolean") return v.is(Value::Kind::Bool);
        if (t == "true") return v.is(Value::Kind::Bool) && v.boolean;
        if (t == "false") return v.is(Value::Kind::Bool) && !v.boolean;
        if (t == "mapping") return v.is(Value::Kind::Dict);
        if (t == "iterable" || t == "sequence")
            return v.is(Value::Kind::List) || v.is(Value::Kind::String) || v.is(Value::Kind::Dict);
        if (t == "even" || t == "odd") return v.is(Value::Kind::Int) && (v.integer % 2 == 0) == (t == "even");
        if (t == "eq" || t == "equalto") return e.args.size() > 1 && equal(v, eval(*e.args[1]));
        fail(e.line, "test '" + t + "' has no implementation");  // requireKnown refused any other name
    }

    static Value binary(const std::string& op, const Value& a, const Value& b, bool negated) {
        if (op == "==") return Value::of(equal(a, b));
        if (op == "!=") return Value::of(!equal(a, b));
        if (op == "in") return Value::of(contains(b, a) != negated);
        if (op == "~") return Value::of(str(a) + str(b));
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
            int order = 0;
            if (a.isNumber() && b.isNumber())
                order = a.asDouble() < b.asDouble() ? -1 : a.asDouble() > b.asDouble() ? 1 : 0;
            else if (a.is(Value::Kind::String) && b.is(Value::Kind::String))
                order = a.text.compare(b.text);
            else
                throw std::runtime_error(std::string("cannot compare a ") + kindName(a) + " with a " + kindName(b));
            return Value::of(op == "<" ? order < 0 : op == ">" ? order > 0 : op == "<=" ? order <= 0 : order >= 0);
        }
        if (op == "+" && a.is(Value::Kind::String) && b.is(Value::Kind::String)) return Value::of(a.text + b.text);
        if (op == "+" && a.is(Value::Kind::List) && b.is(Value::Kind::List)) {
            List l = *a.list;
            l.insert(l.end(), b.list->begin(), b.list->end());
            return Value::of(std::move(l));
        }
        if (!a.isNumber() || !b.isNumber())
            throw std::runtime_error("unsupported operand types for " + op + ": " + kindName(a) + " and " +
                                     kindName(b));
        const bool floating = a.is(Value::Kind::Float) || b.is(Value::Kind::Float) || op == "/";
        const double x = a.asDouble(), y = b.asDouble();
        const int64_t i = a.is(Value::Kind::Bool) ? a.boolean : a.integer,
                      j = b.is(Value::Kind::Bool) ? b.boolean : b.integer;
        if ((op == "/" || op == "//" || op == "%") && y == 0) throw std::runtime_error("division by zero");
        if (floating || (op == "**" && j < 0)) {
            if (op == "+") return Value::of(x + y);
            if (op == "-") return Value::of(x - y);
            if (op == "*") return Value::of(x * y);
            if (op == "/") return Value::of(x / y);
            if (op == "//") return Value::of(std::floor(x / y));
            if (op == "%") return Value::of(x - y * std::floor(x / y));
            return Value::of(std::pow(x, y));
        }
        return Value::of(integerOperation(op, i, j));
    }

    // Python's integers do not overflow; kvscope's are 64-bit and refuse what would.
    static int64_t integerOperation(const std::string& op, int64_t i, int64_t j) {
        int64_t r = 0;
        bool overflow = false;
        if (op == "+")
            overflow = __builtin_add_overflow(i, j, &r);
        else if (op == "-")
            overflow = __builtin_sub_overflow(i, j, &r);
        else if (op == "*")
            overflow = __builtin_mul_overflow(i, j, &r);
        else if (op == "//" || op == "%") {
            if (i == INT64_MIN && j == -1) throw std::runtime_error("integer overflow in " + op);
            const int64_t q = i / j, m = i % j;
            const bool adjust = m != 0 && ((m < 0) != (j < 0));  // floor division, Python's sign rules
            return op == "//" ? q - adjust : (adjust ? m + j : m);
        } else if (op == "**") {  // by squaring: log2(j) steps
            r = 1;
            int64_t base = i;
            for (int64_t e = j; e > 0 && !overflow; e >>= 1) {
                if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
                if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
            }
        } else {
            throw std::runtime_error("unknown operator " + op);
        }
        if (overflow) throw std::runtime_error("integer overflow in " + op + " (kvscope's integers are 64-bit)");
        return r;
    }

    static bool contains(const Value& container, const Value& element) {
        if (container.is(Value::Kind::String) && element.is(Value::Kind::String))
            return container.text.find(element.text) != std::string::npos;
        if (container.is(Value::Kind::List))
            return std::any_of(container.list->begin(), container.list->end(),
                               [&](const Value& v) { return equal(v, element); });
        if (container.is(Value::Kind::Dict) && element.is(Value::Kind::String))
            return container.find(element.text) != nullptr;
        if (container.is(Value::Kind::Undefined)) throw std::runtime_error("'in' an undefined value");
        return false;
    }

    std::string name_;
    std::vector<Value> scopes_;  // dicts: the template's variables, then one for each loop iteration
};

}  // namespace

Template Template::parse(const std::string& source, const std::string& name) {
    Template t;
    t.name_ = name;
    t.root_ = StatementParser(lex(source, name), name).parseAll();
    return t;
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
    if (!variables.is_object()) throw UsageError(name_ + ": the template's variables must be an object");
    std::string out;
    Renderer renderer(name_, fromJson(variables));
    try {
        renderer.render(*root_, out);
    } catch (const LoopBreak&) {
        throw FormatError(name_ + ": 'break' outside a loop");
    } catch (const LoopContinue&) {
        throw FormatError(name_ + ": 'continue' outside a loop");
    }
    return out;
}

}  // namespace kvscope::jinja
