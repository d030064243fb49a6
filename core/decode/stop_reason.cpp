// SPDX-License-Identifier: MIT
#include "core/decode/stop_reason.h"

namespace kvscope {

std::string stopReasonName(StopReason reason) {
    switch (reason) {
    case StopReason::Eos: return "eos";
    case StopReason::StopString: return "stop_string";
    case StopReason::MaxNewTokens: return "max_new_tokens";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::ContextFull: return "max_position_embeddings";
    }
    return "?";
}

std::optional<StopReason> parseStopReason(const std::string& name) {
    for (StopReason r : {StopReason::Eos, StopReason::StopString, StopReason::MaxNewTokens, StopReason::Cancelled,
                         StopReason::ContextFull})
        if (stopReasonName(r) == name) return r;
    return std::nullopt;
}

}  // namespace kvscope
