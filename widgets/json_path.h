// SPDX-License-Identifier: MIT
#pragma once
// The value at a path of object keys in a ledger's JSON (results, manifests), or null when any step
// is missing or not an object. Views read optional results this way instead of operator[], which
// on a const json with a missing key is undefined.
#include <nlohmann/json.hpp>

#include <initializer_list>

namespace kvscope::widgets {

inline const nlohmann::json* jsonAt(const nlohmann::json& root, std::initializer_list<const char*> path) {
    const nlohmann::json* at = &root;
    for (const char* key : path) {
        if (!at->is_object() || !at->contains(key)) return nullptr;
        at = &(*at)[key];
    }
    return at;
}

}  // namespace kvscope::widgets
