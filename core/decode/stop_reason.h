// SPDX-License-Identifier: MIT
#pragma once
// Why a decode stopped; no torch here, so the ledger's readers can name it without the model.
#include <optional>
#include <string>

namespace kvscope {

// ContextFull: the sequence reached the model's max_position_embeddings.
enum class StopReason { Eos, StopString, MaxNewTokens, Cancelled, ContextFull };
// "eos", "stop_string", "max_new_tokens", "cancelled", "max_position_embeddings"
std::string stopReasonName(StopReason reason);
std::optional<StopReason> parseStopReason(const std::string& name);  // the inverse; none for another name

}  // namespace kvscope
