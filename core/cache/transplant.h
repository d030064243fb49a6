// SPDX-License-Identifier: MIT
#pragma once
// Splicing caches: a new cache whose chosen layers (K, V or both, optionally only a position range)
// come from a donor and everything else from the recipient.
#include "core/cache/kv_cache.h"
#include "core/cache/kv_parts.h"

#include <string>
#include <vector>

namespace kvscope {

struct TransplantSpec {
    std::vector<int64_t> layers;          // empty: none
    KvParts parts = KvParts::Both;
    int64_t positionBegin = 0;            // [begin, end) ; end < 0: to the end
    int64_t positionEnd = -1;

    // "all" or "0-11,20" for `numLayers` (a UsageError names `option`, where the text came from);
    // "a:b" (either side may be empty).
    static std::vector<int64_t> parseLayers(const std::string& text, int64_t numLayers,
                                            const std::string& option = "--layers");
    void parsePositions(const std::string& text);
    std::string describe() const;         // e.g. "transplant(layers=0-3,kv=k,positions=0:10)"
};

// Refuses (UsageError with the reason) caches of different model, dtype, length or token ids.
// The result keeps next-token logits only when its K/V equal the donor's (or the recipient's) bit
// for bit; otherwise it has none and a continuation re-feeds the last token.
KvCache transplant(const KvCache& recipient, const KvCache& donor, const TransplantSpec& spec);

// Keys and values from different layer sets (either or both may be empty: an empty splice is the
// recipient, the control), over one position range: the GUI's transplant and `cache transplant --key-layers A --value-layers B`.
struct KvSplice {
    std::vector<int64_t> keyLayers, valueLayers;
    int64_t positionBegin = 0, positionEnd = -1;  // [begin, end); end < 0: to the end
    // As TransplantSpec says it where it can ("transplant(layers=0,1,kv=k,positions=0:)": equal
    // sets, or one empty), else "transplant(key_layers=0,1,value_layers=2,positions=0:)"
    std::string describe() const;
};
KvCache transplantKeysAndValues(const KvCache& recipient, const KvCache& donor, const KvSplice& splice);

}  // namespace kvscope
