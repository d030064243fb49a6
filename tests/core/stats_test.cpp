// SPDX-License-Identifier: MIT
// Statistics against known values.
#include "core/stats/stats.h"
#include "core/util/error.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvscope::stats {
namespace {

TEST(Wilson, ZeroOutOf200HasAnUpperBoundOf1Point88Percent) {
    const Interval w = wilson(0, 200);
    EXPECT_NEAR(w.lower, 0.0, 1e-12);
    EXPECT_NEAR(w.upper, 0.018845, 1e-6);  // the study's 1.88%
}

TEST(Wilson, KnownIntervals) {
    // 81/263: Newcombe (1998a) Table I example, Wilson score interval 0.2553 to 0.3662.
    const Interval w = wilson(81, 263);
    EXPECT_NEAR(w.lower, 0.2553, 5e-5);
    EXPECT_NEAR(w.upper, 0.3662, 5e-5);
    const Interval all = wilson(10, 10);
    EXPECT_NEAR(all.upper, 1.0, 1e-12);
    EXPECT_NEAR(all.lower, 0.7225, 5e-5);
    EXPECT_THROW(wilson(3, 2), UsageError);
}

TEST(McNemar, ExactBinomialPValues) {
    EXPECT_DOUBLE_EQ(mcnemarExact(0, 0), 1.0);
    EXPECT_NEAR(mcnemarExact(1, 9), 2.0 * 11.0 / 1024.0, 1e-12);  // 2 * P(X <= 1), X ~ Bin(10, 1/2)
    EXPECT_NEAR(mcnemarExact(9, 1), 2.0 * 11.0 / 1024.0, 1e-12);
    EXPECT_DOUBLE_EQ(mcnemarExact(5, 5), 1.0);
    EXPECT_NEAR(mcnemarExact(0, 6), 2.0 / 64.0, 1e-12);
    EXPECT_NEAR(mcnemarExact(12, 8), 0.5034446716, 1e-9);  // 2 * P(X <= 8), X ~ Bin(20, 1/2)
}

TEST(PairedDifference, NewcombeMethod10KnownValues) {
    // Newcombe (1998b), the paired example a=36, b=12, c=2, d=0: 0.0569 to 0.3404.
    PairedCounts c{36, 12, 2, 0};
    EXPECT_NEAR(accuracyDifference(c), 0.2, 1e-12);
    Interval n = newcombePaired(c);
    EXPECT_NEAR(n.lower, 0.05693, 5e-5);
    EXPECT_NEAR(n.upper, 0.34043, 5e-5);
    // A second case, checked against an independent implementation of the same formulas.
    n = newcombePaired({150, 14, 12, 24});
    EXPECT_NEAR(n.lower, -0.041693, 1e-5);
    EXPECT_NEAR(n.upper, 0.061905, 1e-5);
}

TEST(PairedDifference, BootstrapIsSeededAndBracketsTheDifference) {
    std::vector<bool> first, second;
    for (int i = 0; i < 200; ++i) {
        first.push_back(i % 3 != 0);
        second.push_back(i % 4 != 0);
    }
    const PairedCounts c = PairedCounts::from(first, second);
    EXPECT_EQ(c.n(), 200);
    const double diff = accuracyDifference(c);
    const Interval a = pairedBootstrap(first, second, 2000, 7), b = pairedBootstrap(first, second, 2000, 7);
    EXPECT_EQ(a.lower, b.lower);
    EXPECT_EQ(a.upper, b.upper);
    EXPECT_LT(a.lower, diff);
    EXPECT_GT(a.upper, diff);
    // Its width matches the normal approximation 2 * 1.96 * sd(d) / sqrt(n) within 15%.
    double mean = 0, var = 0;
    for (int i = 0; i < 200; ++i) mean += (static_cast<int>(first[i]) - static_cast<int>(second[i])) / 200.0;
    for (int i = 0; i < 200; ++i)
        var += std::pow(static_cast<int>(first[i]) - static_cast<int>(second[i]) - mean, 2) / 199.0;
    const double expected = 2 * kZ95 * std::sqrt(var / 200.0);
    EXPECT_NEAR(a.upper - a.lower, expected, 0.15 * expected);
    // Identical outcomes: no spread at all.
    const Interval zero = pairedBootstrap(first, first, 500, 1);
    EXPECT_EQ(zero.lower, 0.0);
    EXPECT_EQ(zero.upper, 0.0);
}

TEST(ClusterBootstrap, ResamplesWholeClustersAndBracketsThePooledRatio) {
    // 50 clusters (trajectories) of 20 units (tokens): in one cluster in five, 10 of the 20 count.
    std::vector<double> sums, counts;
    for (int k = 0; k < 50; ++k) {
        sums.push_back(k % 5 == 0 ? 10 : 0);
        counts.push_back(20);
    }
    const double pooled = 100.0 / 1000.0;
    const Interval a = clusterBootstrapRatio(sums, counts, 2000, 3), b = clusterBootstrapRatio(sums, counts, 2000, 3);
    EXPECT_EQ(a.lower, b.lower);
    EXPECT_EQ(a.upper, b.upper);
    EXPECT_LT(a.lower, pooled);
    EXPECT_GT(a.upper, pooled);
    // Clusters, not units, are resampled: the interval is that of 50 draws of 0 or 0.5 (sd 0.2 / sqrt
    // 50 = 0.028), far wider than 1000 independent units would give (sd 0.0095).
    EXPECT_NEAR(a.upper - a.lower, 2 * kZ95 * 0.2 / std::sqrt(50.0), 0.02);
    const Interval none = clusterBootstrapRatio({0, 0, 0}, {5, 6, 7}, 100, 1);
    EXPECT_EQ(none.lower, 0.0);
    EXPECT_EQ(none.upper, 0.0);
    EXPECT_THROW(clusterBootstrapRatio({}, {}, 100, 1), UsageError);
}

}  // namespace
}  // namespace kvscope::stats
