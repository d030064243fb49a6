// SPDX-License-Identifier: MIT
#include "core/stats/stats.h"

#include "core/util/error.h"

#include <algorithm>
#include <cmath>

namespace kvscope::stats {

Interval wilson(int64_t k, int64_t n, double z) {
    if (n <= 0 || k < 0 || k > n) throw UsageError("Wilson interval needs 0 <= k <= n and n > 0");
    const double N = static_cast<double>(n), p = static_cast<double>(k) / N, z2 = z * z;
    const double denom = 1 + z2 / N;
    const double center = (p + z2 / (2 * N)) / denom;
    const double half = z * std::sqrt(p * (1 - p) / N + z2 / (4 * N * N)) / denom;
    return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

PairedCounts PairedCounts::from(const std::vector<bool>& first, const std::vector<bool>& second) {
    if (first.size() != second.size()) throw UsageError("paired outcomes must have the same length");
    PairedCounts c;
    for (std::size_t i = 0; i < first.size(); ++i) {
        if (first[i] && second[i])
            ++c.bothRight;
        else if (first[i])
            ++c.onlyFirst;
        else if (second[i])
            ++c.onlySecond;
        else
            ++c.bothWrong;
    }
    return c;
}

double mcnemarExact(int64_t b, int64_t c) {
    const int64_t n = b + c;
    if (n == 0) return 1.0;
    const int64_t k = std::min(b, c);
    // P(X <= k) for X ~ Binomial(n, 1/2), summed in log space for large n.
    double cdf = 0;
    for (int64_t i = 0; i <= k; ++i)
        cdf += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
    return std::min(1.0, 2 * cdf);
}

double accuracyDifference(const PairedCounts& c) {
    return c.n() ? static_cast<double>(c.onlyFirst - c.onlySecond) / static_cast<double>(c.n()) : 0.0;
}

namespace {

// The bootstrap's random draws: splitmix64 from a seed, so an interval depends on nothing else.
class SplitMix {
public:
    explicit SplitMix(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    std::uint64_t next() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

private:
    std::uint64_t state_;
};

// The central `level` interval of the resampled statistics (linear interpolation between ranks).
Interval percentileInterval(std::vector<double> statistics, double level) {
    std::sort(statistics.begin(), statistics.end());
    const double alpha = (1 - level) / 2;
    auto quantile = [&](double q) {
        const double pos = q * static_cast<double>(statistics.size() - 1);
        const auto lo = static_cast<std::size_t>(std::floor(pos));
        const auto hi = std::min(lo + 1, statistics.size() - 1);
        return statistics[lo] + (pos - static_cast<double>(lo)) * (statistics[hi] - statistics[lo]);
    };
    return {quantile(alpha), quantile(1 - alpha)};
}

}  // namespace

Interval pairedBootstrap(const std::vector<bool>& first, const std::vector<bool>& second, int resamples,
                         std::uint64_t seed, double level) {
    const std::size_t n = first.size();
    if (n == 0 || second.size() != n || resamples < 1) throw UsageError("bootstrap needs equal, non-empty samples");
    std::vector<int> d(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<int>(first[i]) - static_cast<int>(second[i]);
    SplitMix random(seed);
    std::vector<double> means(static_cast<std::size_t>(resamples));
    for (auto& m : means) {
        long sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum += d[random.next() % n];
        m = static_cast<double>(sum) / static_cast<double>(n);
    }
    return percentileInterval(std::move(means), level);
}

Interval clusterBootstrapRatio(const std::vector<double>& sums, const std::vector<double>& counts, int resamples,
                               std::uint64_t seed, double level) {
    const std::size_t n = sums.size();
    if (n == 0 || counts.size() != n || resamples < 1) throw UsageError("bootstrap needs equal, non-empty samples");
    SplitMix random(seed);
    std::vector<double> ratios;
    for (int r = 0; r < resamples; ++r) {
        double sum = 0, count = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t k = random.next() % n;
            sum += sums[k];
            count += counts[k];
        }
        if (count > 0) ratios.push_back(sum / count);
    }
    if (ratios.empty()) throw UsageError("bootstrap of a ratio needs a positive count");
    return percentileInterval(std::move(ratios), level);
}

Interval newcombePaired(const PairedCounts& c, double z) {
    const double a = static_cast<double>(c.bothRight), b = static_cast<double>(c.onlyFirst);
    const double cc = static_cast<double>(c.onlySecond), d = static_cast<double>(c.bothWrong);
    const double n = a + b + cc + d;
    if (n <= 0) throw UsageError("Newcombe interval needs at least one pair");
    const double p1 = (a + b) / n, p2 = (a + cc) / n, diff = p1 - p2;
    const Interval w1 = wilson(c.bothRight + c.onlyFirst, c.n(), z);
    const Interval w2 = wilson(c.bothRight + c.onlySecond, c.n(), z);
    const double denom = std::sqrt((a + b) * (cc + d) * (a + cc) * (b + d));
    double phi = 0;
    if (denom > 0) {
        const double ad_bc = a * d - b * cc;
        phi = (ad_bc > 0 ? std::max(ad_bc - n / 2, 0.0) : ad_bc) / denom;  // continuity-corrected when positive
    }
    const double dl1 = p1 - w1.lower, du1 = w1.upper - p1, dl2 = p2 - w2.lower, du2 = w2.upper - p2;
    const double delta = std::sqrt(std::max(0.0, dl1 * dl1 - 2 * phi * dl1 * du2 + du2 * du2));
    const double epsilon = std::sqrt(std::max(0.0, du1 * du1 - 2 * phi * du1 * dl2 + dl2 * dl2));
    return {std::max(-1.0, diff - delta), std::min(1.0, diff + epsilon)};
}

}  // namespace kvscope::stats
