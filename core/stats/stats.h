// SPDX-License-Identifier: MIT
#pragma once
// The statistics the study reports, in plain C++ (no torch): Wilson score interval, exact McNemar
// test, two intervals for a paired difference in accuracy (seeded bootstrap percentile, and
// Newcombe's score-based method 10), and a cluster bootstrap of a ratio.
#include <cstdint>
#include <vector>

namespace kvscope::stats {

struct Interval {
    double lower = 0, upper = 0;
};

constexpr double kZ95 = 1.959963984540054;  // two-sided 95% normal quantile

// Wilson score interval for k successes out of n (n > 0). 0/200 gives an upper bound of 1.88%.
Interval wilson(int64_t k, int64_t n, double z = kZ95);

// Paired binary outcomes for the same items under two conditions.
struct PairedCounts {
    int64_t bothRight = 0;   // a
    int64_t onlyFirst = 0;   // b: first right, second wrong
    int64_t onlySecond = 0;  // c: first wrong, second right
    int64_t bothWrong = 0;   // d
    int64_t n() const { return bothRight + onlyFirst + onlySecond + bothWrong; }
    static PairedCounts from(const std::vector<bool>& first, const std::vector<bool>& second);
};

// Two-sided exact McNemar p-value: binomial test of the discordant pairs b vs c at p = 1/2.
double mcnemarExact(int64_t b, int64_t c);

// Difference in accuracy (first - second), with intervals.
double accuracyDifference(const PairedCounts& counts);
// Percentile interval of the mean paired difference over `resamples` bootstrap resamples whose
// random draws depend only on `seed`.
Interval pairedBootstrap(const std::vector<bool>& first, const std::vector<bool>& second, int resamples,
                         std::uint64_t seed, double level = 0.95);
// Clustered data (tokens within trajectories): the percentile interval of sum(sums) / sum(counts)
// over resamples of whole clusters, cluster k contributing sums[k] over counts[k] units.
Interval clusterBootstrapRatio(const std::vector<double>& sums, const std::vector<double>& counts, int resamples,
                               std::uint64_t seed, double level = 0.95);
// Newcombe (1998), method 10: Wilson intervals combined with the phi correlation of the pairs.
Interval newcombePaired(const PairedCounts& counts, double z = kZ95);

}  // namespace kvscope::stats
