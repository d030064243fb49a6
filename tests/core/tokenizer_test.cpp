// SPDX-License-Identifier: MIT
// The byte-level BPE tokenizer: the real Qwen3 tokenizer.json against reference ids, and every
// declared component either honoured or refused.
#include "core/text/byte_level.h"
#include "core/text/chat_template.h"
#include "core/text/tokenizer.h"
#include "core/util/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kvscope {
namespace {

const std::string kQwenTokenizer = test::testDataDir() + "/qwen3-tokenizer/tokenizer.json";

nlohmann::json referenceCorpus() {
    return nlohmann::json::parse(test::readTextFile(test::testDataDir() + "/tokenizer/reference_ids.json"));
}

class QwenTokenizer : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        ASSERT_TRUE(std::filesystem::exists(kQwenTokenizer))
            << kQwenTokenizer << " is missing: run scripts/fetch-test-data.sh (the README's test command does)";
        tokenizer = new Tokenizer(Tokenizer::fromFile(kQwenTokenizer));
    }
    static void TearDownTestSuite() {
        delete tokenizer;
        tokenizer = nullptr;
    }
    void SetUp() override { ASSERT_NE(tokenizer, nullptr); }
    static Tokenizer* tokenizer;
};
Tokenizer* QwenTokenizer::tokenizer = nullptr;

TEST_F(QwenTokenizer, EveryCorpusEntryGivesTheReferenceIds) {
    const auto corpus = referenceCorpus();
    ASSERT_GE(corpus.size(), 40u);
    int checked = 0;
    for (const auto& entry : corpus) {
        const std::string text = entry["text"];
        const auto expected = entry["ids"].get<std::vector<int64_t>>();
        EXPECT_EQ(tokenizer->encode(text), expected) << "text: " << text;
        ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(corpus.size()));
}

TEST_F(QwenTokenizer, DecodeInvertsEncodeUpToNfc) {
    for (const auto& entry : referenceCorpus()) {
        const std::string text = entry["text"];
        const auto ids = entry["ids"].get<std::vector<int64_t>>();
        const std::string decoded = tokenizer->decode(ids);
        if (text.find("\u0301") != std::string::npos) continue;  // NFD input comes back composed
        EXPECT_EQ(decoded, text);
    }
    EXPECT_EQ(tokenizer->decode(tokenizer->encode("Cafe\u0301")), "Caf\u00e9");
}

TEST_F(QwenTokenizer, SpecialTokensAndVocabulary) {
    EXPECT_EQ(tokenizer->tokenToId("<|im_end|>"), 151645);
    EXPECT_EQ(tokenizer->encode("<|im_start|>"), std::vector<int64_t>{151644});
    EXPECT_GE(tokenizer->vocabSize(), 151665);
    EXPECT_EQ(tokenizer->decode({151644, 872}, /*skipSpecialTokens=*/true), tokenizer->decode({872}));
    // A ChatML prompt tokenizes with the special tokens as single ids.
    const auto ids = tokenizer->encode(applyChatTemplate(ChatTemplate::ChatML, {{"user", "Hi"}}), false);
    EXPECT_EQ(ids.front(), 151644);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 1);
}

// ---- the generated test tokenizer, and what it takes to refuse a component ----

nlohmann::json testTokenizerJson() {
    return nlohmann::json::parse(test::readTextFile(test::tinyModel("qwen2") + "/tokenizer.json"));
}

void expectRefused(nlohmann::json j, const std::string& fragment) {
    try {
        Tokenizer::fromJson(j.dump(), "tok.json");
        FAIL() << "expected the tokenizer to be refused for " << fragment;
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("tok.json"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, GeneratedTokenizerRoundTripsArbitraryText) {
    Tokenizer tok = Tokenizer::fromModelDir(test::tinyModel("qwen2"));
    for (const std::string text : {"The model thinks, then it answers.", "Zürich 東京 🙂 \t\n x", "12 + 35 = 47"}) {
        const auto ids = tok.encode(text);
        EXPECT_EQ(tok.decode(ids), text);
    }
    EXPECT_LT(tok.encode("the answers").size(), std::string("the answers").size());  // merges applied
    const auto eot = tok.tokenToId("<|endoftext|>");
    ASSERT_TRUE(eot.has_value());
    EXPECT_EQ(tok.encode("a<|endoftext|>b"), (std::vector<int64_t>{tok.encode("a")[0], *eot, tok.encode("b")[0]}));
}

TEST(Tokenizer, UnsupportedComponentsAreRefusedByName) {
    auto j = testTokenizerJson();
    j["normalizer"] = {{"type", "Lowercase"}};
    expectRefused(j, "Lowercase");
    j = testTokenizerJson();
    j["pre_tokenizer"] = {{"type", "Whitespace"}};
    expectRefused(j, "Whitespace");
    j = testTokenizerJson();
    j["decoder"] = {{"type", "WordPiece"}};
    expectRefused(j, "WordPiece");
    j = testTokenizerJson();
    j["model"]["type"] = "Unigram";
    expectRefused(j, "Unigram");
    j = testTokenizerJson();
    j["model"]["continuing_subword_prefix"] = "##";
    expectRefused(j, "continuing_subword_prefix");
    j = testTokenizerJson();
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
    expectRefused(j, "prepend_scheme 'sometimes'");
    j = testTokenizerJson();
    j["decoder"] = {{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}};
    expectRefused(j, "one character");
    j = testTokenizerJson();
    j["added_tokens"][0]["single_word"] = true;
    expectRefused(j, "single_word");
    j = testTokenizerJson();
    j["post_processor"] = {{"type", "BertProcessing"}};
    expectRefused(j, "BertProcessing");
    j = testTokenizerJson();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([unclosed";
    expectRefused(j, "does not compile");
    // Ids far beyond any vocabulary would size the id table (std::bad_alloc before this check).
    j = testTokenizerJson();
    j["model"]["vocab"]["zz"] = int64_t{1} << 40;
    expectRefused(j, "model.vocab['zz'] must be an integer id from 0 to");
    j = testTokenizerJson();
    j["added_tokens"][0]["id"] = int64_t{1} << 40;
    expectRefused(
        j, "added token '<|endoftext|>' id: expected a token id (an integer from 0 to 8388607), got 1099511627776");
    expectRefused(nlohmann::json::array(), "expected an object");
    EXPECT_THROW(Tokenizer::fromJson("{not json", "tok.json"), FormatError);
}

TEST(Tokenizer, TemplatePostProcessorAndIgnoreMergesAsInLlama3) {
    auto j = testTokenizerJson();
    const int64_t bos = j["added_tokens"][1]["id"];  // reuse <|im_start|> as a BOS for the test
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", nlohmann::json::array()},
        {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {bos}}, {"tokens", {"<|im_start|>"}}}}}}};
    Tokenizer tok = Tokenizer::fromJson(j.dump(), "llama-like");
    const auto ids = tok.encode("hello");
    EXPECT_EQ(ids.front(), bos);
    EXPECT_EQ(std::vector<int64_t>(ids.begin() + 1, ids.end()), tok.encode("hello", false));

    // ignore_merges: a piece that is itself a vocabulary entry is emitted whole, even when the
    // merge path would split it differently. Add "xyz" to the vocab without merges that make it.
    auto k = testTokenizerJson();
    const int64_t newId = k["added_tokens"][2]["id"].get<int64_t>() + 1;
    k["model"]["vocab"]["xyz"] = newId;
    Tokenizer without = Tokenizer::fromJson(k.dump(), "no-ignore");
    k["model"]["ignore_merges"] = true;
    Tokenizer with = Tokenizer::fromJson(k.dump(), "ignore");
    EXPECT_EQ(with.encode("xyz"), std::vector<int64_t>{newId});
    EXPECT_GT(without.encode("xyz").size(), 1u);
}

// SmolLM2's byte-level vocabulary lacks the characters of 21 bytes (4, 6, 19, ...). `tokenizers`
// loads it and drops those bytes when encoding; kvscope refused the whole file.
TEST(Tokenizer, ByteLevelVocabularyLackingBytesDropsThemAsTokenizersDoes) {
    auto j = testTokenizerJson();
    const std::string byte4 = byteLevelAlphabet()[4];
    ASSERT_TRUE(j["model"]["vocab"].contains(byte4));
    j["model"]["vocab"].erase(byte4);
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& m : j["model"]["merges"])
        if (m.dump().find(byte4) == std::string::npos) merges.push_back(m);
    j["model"]["merges"] = merges;
    Tokenizer tok = Tokenizer::fromJson(j.dump(), "smollm2-like");
    const auto a = tok.encode("a"), b = tok.encode("b");
    std::vector<int64_t> expected = a;
    expected.insert(expected.end(), b.begin(), b.end());
    EXPECT_EQ(tok.encode("a\x04"
                         "b"),
              expected);
    EXPECT_EQ(tok.encode("\x04"), std::vector<int64_t>{});
    EXPECT_EQ(tok.decode(tok.encode("a\x06"
                                    "b")),
              "a\x06"
              "b");  // other bytes are still there
}

// Llama-2-style SentencePiece BPE (byte fallback, unknown tokens, Prepend/Replace normalizer,
// Metaspace) against the ids and text Hugging Face `tokenizers` gives for the same files
// (tests/data/tokenizer/make_sentencepiece_cases.py wrote them).
TEST(Tokenizer, SentencePieceStyleBpeGivesTokenizersIdsAndText) {
    const auto data =
        nlohmann::json::parse(test::readTextFile(test::testDataDir() + "/tokenizer/sentencepiece_cases.json"));
    int checked = 0;
    for (const auto& set : data["sets"]) {
        SCOPED_TRACE(set["name"].get<std::string>());
        Tokenizer tok = Tokenizer::fromJson(set["tokenizer"].dump(), set["name"]);
        for (const auto& c : set["cases"]) {
            const std::string text = c["text"];
            const auto ids = c["ids"].get<std::vector<int64_t>>();
            EXPECT_EQ(tok.encode(text), ids) << "text: '" << text << "'";
            EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << "text: '" << text << "'";
            EXPECT_EQ(tok.decode(ids, true), c["decoded_skipping_special"].get<std::string>())
                << "text: '" << text << "'";
            ++checked;
        }
    }
    EXPECT_EQ(checked, 60);
}

// SentencePiece BPE has no pre-tokenizer: a whole text is one word, merged in O(n log n).
TEST(Tokenizer, OneLongWordIsMergedWithoutQuadraticTime) {
    const auto data =
        nlohmann::json::parse(test::readTextFile(test::testDataDir() + "/tokenizer/sentencepiece_cases.json"));
    Tokenizer tok = Tokenizer::fromJson(data["sets"][0]["tokenizer"].dump(), "llama2-like");
    std::string text;
    for (int i = 0; i < 20000; ++i) text += "hello world ";
    const auto ids = tok.encode(text, false);
    ASSERT_EQ(ids.size(), 40001u);  // "▁hello" and "▁world" 20,000 times, then the last space's "▁"
    EXPECT_EQ(ids.back(), tok.tokenToId("\u2581"));
    EXPECT_EQ(tok.decode(ids), text);
}

TEST(Utf8, InvalidBytesBecomeOneReplacementPerMaximalSubpart) {
    // Expected values are what Rust's from_utf8_lossy (HF tokenizers' decoders) and Python's
    // bytes.decode("utf-8", "replace") give for the same bytes.
    const std::string r = "\xEF\xBF\xBD";  // U+FFFD
    EXPECT_EQ(sanitizeUtf8("\xE4\xB8"), r);                                // a 3-byte character cut after 2
    EXPECT_EQ(sanitizeUtf8("\xF0\x9F\x98"), r);                            // a 4-byte one cut after 3
    EXPECT_EQ(sanitizeUtf8("\xE4\xB8\xE4\xB8\xAD"), r + "\xE4\xB8\xAD");   // then a whole one
    EXPECT_EQ(sanitizeUtf8("\xC0\xAF"), r + r);                             // overlong lead: each byte
    EXPECT_EQ(sanitizeUtf8("\xED\xA0\x80"), r + r + r);                     // a surrogate: each byte
    EXPECT_EQ(sanitizeUtf8("\xF4\x90\x80\x80"), r + r + r + r);             // above U+10FFFF
    EXPECT_EQ(sanitizeUtf8("a\x80"
                           "b"),
              "a" + r + "b");
    EXPECT_EQ(sanitizeUtf8("\xF0\x9F\x98\x80\xFF"), "\xF0\x9F\x98\x80" + r);
    EXPECT_EQ(decodeUtf8("\xE4\xB8x"), (std::vector<char32_t>{0xFFFD, U'x'}));
}

TEST(Tokenizer, ParseIdList) {
    EXPECT_EQ(parseIdList("1,2, 3"), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_THROW(parseIdList("1,,2"), UsageError);
    EXPECT_THROW(parseIdList("1,x"), UsageError);
    EXPECT_THROW(parseIdList("-1"), UsageError);
    EXPECT_THROW(parseIdList(""), UsageError);
}

TEST(ChatTemplates, BuiltInsAndUnknownNames) {
    EXPECT_EQ(applyChatTemplate(ChatTemplate::ChatML, {{"user", "Hi"}}),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(applyChatTemplate(ChatTemplate::Plain, {{"user", "Hi"}}), "Hi");
    EXPECT_THROW(parseChatTemplate("vicuna"), UsageError);
    EXPECT_EQ(parseChatTemplate("llama3"), ChatTemplate::Llama3);
}

}  // namespace
}  // namespace kvscope
