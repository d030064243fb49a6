// SPDX-License-Identifier: MIT
#include "core/cache/kv_parts.h"

#include "core/util/error.h"

namespace kvscope {

std::string kvPartsName(KvParts parts) {
    switch (parts) {
    case KvParts::Keys: return "k";
    case KvParts::Values: return "v";
    case KvParts::Both: break;
    }
    return "kv";
}

KvParts parseKvParts(const std::string& text, const std::string& option) {
    for (KvParts parts : {KvParts::Keys, KvParts::Values, KvParts::Both})
        if (text == kvPartsName(parts)) return parts;
    throw UsageError(option + " must be k, v or kv (got '" + text + "')");
}

}  // namespace kvscope
