// SPDX-License-Identifier: MIT
#pragma once
// The caches the construction tests compare: one prompt, a live cache and the same ids rebuilt
// every other way (cache_test.cpp, invariant_constructions_test.cpp).
#include "core/cache/constructions.h"
#include "core/cache/fingerprint.h"

#include <cstdint>
#include <vector>

namespace kvscope::test {

inline const std::vector<int64_t> kPrompt = {11, 52, 7, 190, 23, 64};

struct Built {
    KvCache live, prefill, incremental, tokenByToken, chunked;
};

// The live cache of kPrompt and `generate` greedy tokens, and its ids rebuilt by one prefill,
// incrementally, token by token and in chunks of 5.
inline Built buildAll(const Transformer& m, int64_t generate = 24) {
    Built b;
    b.live = buildLiveCache(m, kPrompt, generate);
    const auto& ids = b.live.ids();
    const int64_t P = b.live.promptLength();
    b.prefill = buildCache(m, ids, Construction::parse("prefill"), P);
    b.incremental = buildCache(m, ids, Construction::parse("incremental"), P);
    b.tokenByToken = buildCache(m, ids, Construction::parse("incremental:0"), P);
    b.chunked = buildCache(m, ids, Construction::parse("chunked:5"), P);
    return b;
}

// Whether two caches hold the same bits (their fingerprints' overall SHA-256).
inline bool sameBits(const KvCache& a, const KvCache& b) {
    return fingerprintCache(a).overall == fingerprintCache(b).overall;
}

}  // namespace kvscope::test
