// SPDX-License-Identifier: MIT
#pragma once
// An instruction-set path's table of entry points from the templates of invariant_impl.h,
// invariant_attention_impl.h, invariant_elementwise_impl.h and invariant_probes_impl.h; each
// invariant_*.cpp defines its vector type, then its table (kernelPathOf).
#include "core/kernels/invariant_elementwise_impl.h"
#include "core/kernels/invariant_probes_impl.h"

namespace kvscope::kernels {
namespace {

// invariant_amx.cpp includes this header (through invariant_avx512_vec.h) for the vector type alone.
// NOLINTBEGIN(clang-diagnostic-unused-template)

// The table of one instruction-set path (invariant.h's KernelPath) on vector type V: the shared
// templates, instantiated in the path's own file (its target flags; this anonymous namespace
// keeps each file's copies its own).
template <typename V, typename Element>
ElementKernels<Element> elementKernelsOf() {
    return {&impl::linear<V, Element>,        &impl::packRowTiles<V, Element>,
            &impl::attention<V, Element>,     &impl::finishSums<V, Element, uint16_t>,
            &impl::siluGate<V, Element>,      &impl::add<V, Element>,
            &impl::scaleByWeight<V, Element>, &impl::rope<V, Element>};
}

template <typename V>
KernelPath kernelPathOf(Isa isa) {
    return {isa,
            elementKernelsOf<V, float>(),
            elementKernelsOf<V, uint16_t>(),
            &impl::linearPairs<V>,
            &impl::packedRowsFloats<V>,
            &impl::packedRowTiles<V>,
            &impl::sumOfSquares<V>,
            &impl::exps<V>,
            &impl::triad<V>,
            &impl::readAll<V>,
            &impl::multiplyAdds<V>,
            V::kPanelFromRows};
}

// NOLINTEND(clang-diagnostic-unused-template)
}  // namespace

}  // namespace kvscope::kernels
