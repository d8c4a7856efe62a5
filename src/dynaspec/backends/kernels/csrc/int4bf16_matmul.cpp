// y = x @ w.T + bias for bf16 activations x (T, K) and 4-bit weights w (N, K) on
// AVX512-BF16, where w = q * s + m for a code q in 0..15 and one scale s and one offset m
// (float16) per row and group of 32 columns; y float32.
//
// Why: a decoding step reads every weight once; 4 bits a weight and two float16 numbers a
// group of 32 read 0.625 bytes a weight (llama.cpp's q4_K: 0.5625), 0.31 of bf16 and 0.63 of
// int8. torch's int4 kernel for bf16 (`_weight_int4pack_mm_for_cpu`) does not batch.
//
// How: a group's part of a row's product is s * (sum of x[k] * q[k]) + m * (sum of x[k]),
// so the codes themselves are the bf16 weights: each nibble becomes bf16(q), exactly, by
// one table lookup (VPERMW), and VDPBF16PS multiplies them with the activations' column
// pairs (bf16_tiles.h); per group and token, two fused multiply-adds add s times that sum
// and m times the group's sum of x (computed once per call). Rebuilding q * s + m per
// weight instead (an earlier version) cost 8 instructions per 32 weights: as slow as int8.
//
// Layout: [N/64 tiles][4 vectors of 16 rows][K/32 groups] of 320 bytes: the float16 s of the
// vector's 16 rows, then their m (64 bytes), then 4 lines of 64 bytes, line c holding 32
// 16-bit lanes, lane j (row j/2, column j%2 of a pair) with the codes of column pairs 4c,
// 4c+1, 4c+2, 4c+3 of the group in its nibbles 0-3. Each vector's codes are one stream.
//
// Exactness: each output (row, token) adds, group by group in column order, the group's 16
// pair products (from 0) times s, then m times the group's sum of x, whatever T and the
// blocking are: a row of a T-token product is bitwise the one-token product.
//
// Built at first use by dynaspec/backends/kernels/build.py with the system C++ compiler
// (-O3 -mavx512f -mavx512bw -mavx512bf16 -fopenmp), linked to torch's own OpenMP runtime.
#include <vector>

#include "bf16_tiles.h"

namespace {

using namespace bf16_tiles;

constexpr int GROUP = 32;          // columns a scale and offset cover
constexpr int GROUP_BYTES = 320;   // per vector of 16 rows: 64 bytes of s and m, 256 of codes
constexpr int BLOCK_GROUPS = 16;   // groups a block (more than 5 tokens): 512 columns
constexpr int TOKENS = 6;          // tokens a pass over a block

// bf16(i & 15) in lane i: VPERMW reads the low 5 bits of each index.
inline __m512i code_table() {
    alignas(64) uint16_t table[32];
    for (int i = 0; i < 32; ++i) {
        const float value = static_cast<float>(i & 15);
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        table[i] = static_cast<uint16_t>(bits >> 16);  // exact: integers up to 256 fit bf16
    }
    return _mm512_load_si512(table);
}

// Nibble n of every lane of a code line, as 32 bf16 weights.
inline __m512bh nibble(__m512i line, int n, __m512i table) {
    const __m512i index = n ? _mm512_srli_epi16(line, 4 * n) : line;
    return reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(index, table));
}

struct Int4 {
    const uint16_t* x;     // (T, K) bf16
    int K;
    const uint8_t* codes;  // [N/64][4][K/32][320]
    const float* sums;     // (T, K/32): each group's sum of x
    Out out;

    int groups() const { return K / GROUP; }
    const uint8_t* stream(int tile, int v) const {
        return codes + (static_cast<int64_t>(tile) * V + v) * groups() * GROUP_BYTES;
    }

    // acc = acc + s * (the group's pair products) + m * (the group's sum of x), per token.
    template <int TT>
    static void finish(const uint8_t* group, const __m512* d, __m512* acc, const float* sums, int stride) {
        const __m512 s = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(group)));
        const __m512 m = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(group + 32)));
        for (int t = 0; t < TT; ++t) {
            acc[t] = _mm512_fmadd_ps(d[t], s, acc[t]);
            acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(sums[t * stride]), acc[t]);
        }
    }

    // Up to DIRECT_TOKENS tokens of one tile, the codes turned into bf16 as they stream in.
    template <int TT>
    void few(int tile) const {
        const __m512i table = code_table();
        for (int v = 0; v < V; ++v) {
            __m512 acc[TT];
            for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
            const uint8_t* group = stream(tile, v);
            for (int g = 0; g < groups(); ++g, group += GROUP_BYTES) {
                for (int b = 0; b < GROUP_BYTES; b += 64)
                    _mm_prefetch(reinterpret_cast<const char*>(group) + PREFETCH + b, _MM_HINT_T0);
                __m512 d[TT];
                for (int t = 0; t < TT; ++t) d[t] = _mm512_setzero_ps();
                for (int c = 0; c < 4; ++c) {
                    const __m512i line = _mm512_load_si512(group + 64 + c * 64);
                    for (int n = 0; n < 4; ++n) {
                        const __m512bh w = nibble(line, n, table);
                        const int k = g * GROUP + 2 * (4 * c + n);
                        for (int t = 0; t < TT; ++t)
                            d[t] = _mm512_dpbf16_ps(d[t], w, pair(x + static_cast<int64_t>(t) * K, k));
                    }
                }
                finish<TT>(group, d, acc, sums + g, groups());
            }
            for (int t = 0; t < TT; ++t) out.store(tile, v, t, acc[t]);
        }
    }

    // A block of `count` groups from group g0 of one vector, as bf16 codes in s.w:
    // [group][16 pairs][32 lanes].
    void widen(const uint8_t* group, int count, uint16_t* w) const {
        const __m512i table = code_table();
        for (int g = 0; g < count; ++g, group += GROUP_BYTES)
            for (int c = 0; c < 4; ++c) {
                const __m512i line = _mm512_load_si512(group + 64 + c * 64);
                for (int n = 0; n < 4; ++n, w += 32)
                    _mm512_store_si512(w, reinterpret_cast<__m512i>(nibble(line, n, table)));
            }
    }

    // Tokens tok .. tok+TT-1 over one widened block; their accumulators in `partial`.
    template <int TT>
    void block(const uint8_t* group, int g0, int count, const uint16_t* w, float* partial, int tok,
               const uint8_t* next, int next_bytes) const {
        __m512 acc[TT];
        for (int t = 0; t < TT; ++t) acc[t] = _mm512_load_ps(partial + t * 16);
        const uint16_t* xs = x + static_cast<int64_t>(tok) * K;
        for (int g = 0; g < count; ++g, group += GROUP_BYTES) {
            for (int b = g * 5 * 64; next && b < (g + 1) * 5 * 64 && b < next_bytes; b += 64)
                _mm_prefetch(reinterpret_cast<const char*>(next) + b, _MM_HINT_T0);
            __m512 d[TT];
            for (int t = 0; t < TT; ++t) d[t] = _mm512_setzero_ps();
            for (int i = 0; i < GROUP / 2; ++i, w += 32) {
                const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_load_si512(w));
                const int k = (g0 + g) * GROUP + 2 * i;
                for (int t = 0; t < TT; ++t)
                    d[t] = _mm512_dpbf16_ps(d[t], wv, pair(xs + static_cast<int64_t>(t) * K, k));
            }
            finish<TT>(group, d, acc, sums + static_cast<int64_t>(tok) * groups() + g0 + g, groups());
        }
        for (int t = 0; t < TT; ++t) _mm512_store_ps(partial + t * 16, acc[t]);
    }

    // Up to TB tokens from `tok` for one tile: per vector, block by block, each block's
    // codes turned into bf16 once, then TOKENS tokens at a time over it.
    void many(int tile, int tok, int count, Scratch& s) const {
        for (int v = 0; v < V; ++v) {
            for (int t = 0; t < count * 16; ++t) s.partial[t] = 0.0f;
            const uint8_t* base = stream(tile, v);
            for (int g0 = 0; g0 < groups(); g0 += BLOCK_GROUPS) {
                const int n = groups() - g0 < BLOCK_GROUPS ? groups() - g0 : BLOCK_GROUPS;
                const uint8_t* group = base + static_cast<int64_t>(g0) * GROUP_BYTES;
                widen(group, n, s.w);
                const int after = groups() - g0 - n;
                const uint8_t* next = after > 0 ? group + n * GROUP_BYTES : nullptr;
                const int next_bytes = (after < BLOCK_GROUPS ? after : BLOCK_GROUPS) * GROUP_BYTES;
                int t = 0;
                for (; t + TOKENS <= count; t += TOKENS, next = nullptr)
                    block<TOKENS>(group, g0, n, s.w, s.partial + t * 16, tok + t, next, next_bytes);
                switch (count - t) {
                    case 5: block<5>(group, g0, n, s.w, s.partial + t * 16, tok + t, next, next_bytes); break;
                    case 4: block<4>(group, g0, n, s.w, s.partial + t * 16, tok + t, next, next_bytes); break;
                    case 3: block<3>(group, g0, n, s.w, s.partial + t * 16, tok + t, next, next_bytes); break;
                    case 2: block<2>(group, g0, n, s.w, s.partial + t * 16, tok + t, next, next_bytes); break;
                    case 1: block<1>(group, g0, n, s.w, s.partial + t * 16, tok + t, next, next_bytes); break;
                    default: break;
                }
            }
            for (int t = 0; t < count; ++t)
                out.store(tile, v, tok + t, _mm512_load_ps(s.partial + t * 16));
        }
    }
};

static_assert(BLOCK_GROUPS * GROUP / 2 * 32 <= KB / 2 * ROWS * 2, "a block fits Scratch::w");
static_assert(TB * 16 <= TB * ROWS, "a vector's accumulators fit Scratch::partial");

}  // namespace

extern "C" {

// N a multiple of 64, K of 32; codes in the layout above; bias may be null.
void dynaspec_int4bf16_matmul(const uint16_t* x, int T, int K, const uint8_t* codes,
                              const float* bias, int N, void* y, int threads, int bf16) {
    const int groups = K / GROUP;
    std::vector<float> sums(static_cast<size_t>(T) * groups);
    for (int t = 0; t < T; ++t)
        for (int g = 0; g < groups; ++g) {
            float sum = 0.0f;  // in column order, the same for every T
            for (int k = g * GROUP; k < (g + 1) * GROUP; ++k) {
                const uint32_t bits = static_cast<uint32_t>(x[static_cast<int64_t>(t) * K + k]) << 16;
                float value;
                memcpy(&value, &bits, sizeof value);
                sum += value;
            }
            sums[static_cast<size_t>(t) * groups + g] = sum;
        }
    run(Int4{x, K, codes, sums.data(), Out{nullptr, bias, N, y, bf16 != 0}}, T, threads);
}

}  // extern "C"
