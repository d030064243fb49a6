// SPDX-License-Identifier: MIT
#include "core/cache/locator.h"

#include "core/cache/fingerprint.h"
#include "core/util/error.h"

namespace kvscope {
namespace {

// Keeps, for each op, its output at the last sequence index of the call (the final position).
class FinalPositionRecorder : public ForwardObserver {
public:
    struct Captured {
        int64_t layer;
        std::string op;
        torch::Tensor value;
    };
    std::vector<Captured> captured;

    void onOp(int64_t layer, const char* op, const torch::Tensor& value, int64_t seqAxis) override {
        torch::Tensor last = value.select(seqAxis, value.size(seqAxis) - 1);
        captured.push_back({layer, op, last.detach().to(torch::kCPU).clone()});
    }
};

OpComparison compare(const FinalPositionRecorder::Captured& a, const FinalPositionRecorder::Captured& b) {
    OpComparison c;
    c.layer = a.layer;
    c.op = a.op;
    c.elements = a.value.numel();
    if (!a.value.sizes().equals(b.value.sizes())) {  // cannot happen for the same model and ids
        c.bitExact = false;
        c.differing = c.elements;
        return c;
    }
    torch::Tensor fa = a.value.to(torch::kFloat32), fb = b.value.to(torch::kFloat32);
    // Compare as the stored dtype: equal values with different bits (e.g. -0/+0) are rare enough
    // here that value equality of the original dtype is the useful notion.
    torch::Tensor ne = a.value.ne(b.value);
    c.differing = ne.sum().item<int64_t>();
    c.bitExact = c.differing == 0;
    torch::Tensor d = (fa - fb).abs();
    d = torch::where(torch::isnan(d), torch::zeros_like(d), d);  // masked -inf - -inf
    c.maxAbs = c.elements ? d.max().item<double>() : 0.0;
    return c;
}

}  // namespace

LocatorReport locateDivergence(const Transformer& model, const std::vector<int64_t>& ids, int64_t promptLength,
                               const Construction& a, const Construction& b) {
    if (ids.empty()) throw UsageError("the locator needs at least one token");
    if (a.kind == Construction::Kind::Live || b.kind == Construction::Kind::Live)
        throw UsageError("rebuild 'live' as incremental:P with P the prompt length (the same schedule)");
    FinalPositionRecorder ra, rb;
    KvCache ca = buildCache(model, ids, a, promptLength, &ra);
    KvCache cb = buildCache(model, ids, b, promptLength, &rb);

    LocatorReport report;
    report.constructionA = ca.construction();
    report.constructionB = cb.construction();
    report.position = static_cast<int64_t>(ids.size()) - 1;
    report.cacheFingerprintA = fingerprintCache(ca).overall;
    report.cacheFingerprintB = fingerprintCache(cb).overall;
    if (ra.captured.size() != rb.captured.size()) throw Error("locator: the two runs recorded different op sequences");
    for (std::size_t i = 0; i < ra.captured.size(); ++i) {
        report.ops.push_back(compare(ra.captured[i], rb.captured[i]));
        if (!report.ops.back().bitExact && !report.firstDifference) report.firstDifference = i;
    }
    return report;
}

}  // namespace kvscope
