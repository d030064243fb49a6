// SPDX-License-Identifier: MIT
// model.safetensors.index.json in front of a real two-shard test checkpoint: the index decides
// which shard each tensor is read from, so a bad one must be refused before any tensor is used.
#include "fuzz_support.h"

#include "core/model/checkpoint.h"
#include "core/model/random_checkpoint.h"

#include <filesystem>

namespace {

const std::string& shardedCheckpoint() {
    static const std::string dir = [] {
        const std::string made = kvscope::fuzz::scratchDir() + "/sharded";
        // The shape of the seed corpus's index (tests/fuzz/corpus/sharded_index), kept tiny so each
        // execution maps two ~10 KB shards.
        kvscope::RandomCheckpointSpec spec;
        spec.hiddenSize = 8, spec.numLayers = 1, spec.numHeads = 2, spec.numKvHeads = 1;
        spec.intermediateSize = 8, spec.bpeMerges = 8, spec.shards = 2;
        kvscope::writeRandomCheckpoint(spec, made);
        return made;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string& dir = shardedCheckpoint();
    kvscope::fuzz::writeScratchFile("sharded/model.safetensors.index.json", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const auto checkpoint = kvscope::Checkpoint::open(dir);
        checkpoint.validate();
        checkpoint.weightFiles();
        if (checkpoint.has("model.norm.weight")) checkpoint.read("model.norm.weight", torch::kFloat32);
    });
    return 0;
}
