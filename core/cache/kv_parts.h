// SPDX-License-Identifier: MIT
#pragma once
// Which of a layer's two tensors a transplant moves: a plain value without libtorch, so results that
// name it (experiments' item results) stay readable where torch's headers are not wanted (the widgets).
#include <string>

namespace kvscope {

// Which of a layer's two tensors a transplant moves.
enum class KvParts { Keys, Values, Both };
// "k" | "v" | "kv": how the CLI's --kv, experiment files ([transplant] kv) and ledgers spell them.
std::string kvPartsName(KvParts parts);
// A UsageError naming `option` (where the text came from) for anything but those three names.
KvParts parseKvParts(const std::string& text, const std::string& option = "--kv");
inline bool movesKeys(KvParts parts) { return parts != KvParts::Values; }
inline bool movesValues(KvParts parts) { return parts != KvParts::Keys; }

}  // namespace kvscope
