// SPDX-License-Identifier: MIT
// Whether AMX's TDPBF16PS could compute the invariant kernels' pair order (core/kernels/invariant.h),
// and how fast the one form that does runs. Not part of the build: a measurement behind
// docs/ARCHITECTURE.md ("Why no AMX"), to repeat on another CPU with AMX-BF16 (Linux >= 5.16):
//   gcc -O2 -mamx-tile -mamx-bf16 scripts/probe-amx-order.c -o /tmp/probe-amx -lm && /tmp/probe-amx
// For each K (pairs an instruction reduces), it compares every output of 20,000 random 16x16 tiles
// with two readings of the instruction, on bf16 magnitudes 2^-7..2^12 (no denormals, no overflow):
//   chain:    the accumulator continued by the products in order, one fp32 rounding each (the pair
//             order's kind of chain; what a K-long run would need to be)
//   own sum:  the products summed from zero in order, one rounding each, then added to the
//             accumulator once
//   exact sum: the products summed exactly, rounded once, then added to the accumulator
//   all once: the accumulator and the products summed exactly, rounded once
//   pairs:    from zero, each pair's two products added exactly, one rounding a pair, then added
//             to the accumulator once
// (exact in long double: on these magnitudes 32 products and the accumulator span under 64 bits)
// first with one product of each pair zero (an exact product: the order of the sum is all that is
// left), then with both products of each pair nonzero.
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kArchRequestPermission = 0x1023, kTileData = 18 };

typedef struct {
    uint8_t palette, startRow, reserved[14];
    uint16_t bytesPerRow[16];
    uint8_t rows[16];
} __attribute__((packed)) TileConfig;

static float widened(uint16_t bf16) {
    const uint32_t bits = (uint32_t)bf16 << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static uint32_t state = 12345;
static uint32_t nextRandom(void) { return state = state * 1664525u + 1013904223u; }
static uint16_t randomBf16(void) {  // sign, exponent 120..139, mantissa
    const uint32_t b = nextRandom() >> 8;
    return (uint16_t)((b & 0x8000u) | ((120u + b % 20u) << 7) | (b >> 24 & 0x7Fu));
}
static float randomFloat(void) { return widened(randomBf16()) * (1.0f + (float)(nextRandom() >> 9) * 0x1p-23f); }

// Tile 0: C (16 x 16 fp32); tile 1: A (16 rows x K pairs); tile 2: B (K pair rows x 16 columns).
static void configure(int pairs) {
    TileConfig c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = 16, c.bytesPerRow[0] = 64;
    c.rows[1] = 16, c.bytesPerRow[1] = (uint16_t)(4 * pairs);
    c.rows[2] = (uint8_t)pairs, c.bytesPerRow[2] = 64;
    _tile_loadconfig(&c);
}

static void compare(int pairs, int bothProducts) {
    configure(pairs);
    long chain = 0, ownSum = 0, exactSum = 0, allOnce = 0, pairSums = 0, total = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        uint16_t a[16][32], b[16][32];
        float c[16][16], before[16][16];
        for (int m = 0; m < 16; ++m)
            for (int k = 0; k < 2 * pairs; ++k) a[m][k] = (k & 1) && !bothProducts ? 0x8000 : randomBf16();
        for (int k = 0; k < pairs; ++k)
            for (int n = 0; n < 32; ++n) b[k][n] = (n & 1) && !bothProducts ? 0 : randomBf16();
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 16; ++n) before[m][n] = c[m][n] = randomFloat();
        _tile_loadd(0, c, 64);
        _tile_loadd(1, a, 64);
        _tile_loadd(2, b, 64);
        _tile_dpbf16ps(0, 1, 2);
        _tile_stored(0, c, 64);
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 16; ++n) {
                volatile float continued = before[m][n], sum = 0, pairSum = 0;
                long double exact = 0;
                for (int k = 0; k < pairs; ++k)
                    for (int e = 0; e < 2; ++e) {
                        continued = fmaf(widened(a[m][2 * k + e]), widened(b[k][2 * n + e]), continued);
                        sum = fmaf(widened(a[m][2 * k + e]), widened(b[k][2 * n + e]), sum);
                        exact += (long double)widened(a[m][2 * k + e]) * widened(b[k][2 * n + e]);
                    }
                for (int k = 0; k < pairs; ++k)
                    pairSum = (float)((long double)pairSum + (long double)widened(a[m][2 * k]) * widened(b[k][2 * n]) +
                                      (long double)widened(a[m][2 * k + 1]) * widened(b[k][2 * n + 1]));
                chain += continued == c[m][n];
                ownSum += before[m][n] + sum == c[m][n];
                exactSum += before[m][n] + (float)exact == c[m][n];
                allOnce += (float)((long double)before[m][n] + exact) == c[m][n];
                pairSums += before[m][n] + pairSum == c[m][n];
                ++total;
            }
    }
    _tile_release();
    printf(
        "K=%2d pairs, %s: %ld outputs, chain %.2f%%, own sum %.2f%%, exact sum %.2f%%, all once %.2f%%, "
        "pairs %.2f%%\n",
        pairs, bothProducts ? "both products" : "one product zero", total, 100.0 * chain / total,
        100.0 * ownSum / total, 100.0 * exactSum / total, 100.0 * allOnce / total, 100.0 * pairSums / total);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// One pair per instruction, 4 independent accumulators: the only form whose every output is one
// FMA (with one product of the pair zero), so 256 useful multiply-adds an instruction.
static void timeOnePair(void) {
    TileConfig c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; ++t) c.rows[t] = 16, c.bytesPerRow[t] = 64;
    for (int t = 4; t < 6; ++t) c.rows[t] = 16, c.bytesPerRow[t] = 4;
    for (int t = 6; t < 8; ++t) c.rows[t] = 1, c.bytesPerRow[t] = 64;
    _tile_loadconfig(&c);
    const long n = 2000000;
    const double t0 = seconds();
    for (long i = 0; i < n; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    const double elapsed = seconds() - t0;
    _tile_release();
    printf("one pair an instruction: %.2f ns each, %.1f G useful multiply-adds/s on this core\n",
           1e9 * elapsed / (4.0 * n), 4.0 * n * 256 / elapsed / 1e9);
}

int main(void) {
    if (syscall(SYS_arch_prctl, kArchRequestPermission, kTileData) != 0) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM): no AMX tile data for this process");
        return 1;
    }
    const int counts[] = {1, 2, 4, 16};
    for (int both = 0; both < 2; ++both)
        for (int i = 0; i < 4; ++i) compare(counts[i], both);
    timeOnePair();
    return 0;
}
