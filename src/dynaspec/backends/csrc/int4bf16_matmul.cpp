// y = x @ w.T + bias for bf16 activations x (T, K) and 4-bit weights w (N, K) on
// AVX512-BF16, where w = bf16(q * s + m) for a code q in 0..15 and one scale s and one
// offset m (float16) per row and group of 32 columns; y float32.
//
// Why: a decoding step reads every weight once; 4 bits a weight and two float16 numbers a
// group of 32 read 0.625 bytes a weight (llama.cpp's q4_K: 0.5625), 0.31 of bf16 and 0.63 of
// int8. torch's int4 kernel for bf16 (`_weight_int4pack_mm_for_cpu`) does not batch. Here
// each weight is rebuilt in registers as q * s + m (one fused multiply-add in float32),
// rounded to bf16 and multiplied as bf16_tiles.h says. The rounding to bf16 is part of the
// model's definition: the same weights for every token count.
//
// Layout: [N/64 tiles][K/32 groups] of 1280 bytes: the float16 s of the tile's 64 rows, then
// their m (256 bytes), then for each vector of 16 rows and each of the group's 16 column
// pairs, 16 bytes: byte j holds in its low nibble lane j of the widened vector (row j/2,
// column j%2 of the pair) and in its high nibble lane j+16 (row 8 + j/2).
//
// Built at first use by dynaspec/backends/kernel_build.py with the system C++ compiler
// (-O3 -mavx512f -mavx512bw -mavx512bf16 -fopenmp), linked to torch's own OpenMP runtime.
#include "bf16_tiles.h"

namespace {

using namespace bf16_tiles;

constexpr int GROUP = 32;                      // columns a scale and offset cover
constexpr int HEADER_BYTES = ROWS * 2 * 2;     // float16 s and m of 64 rows
constexpr int GROUP_BYTES = HEADER_BYTES + ROWS * GROUP / 2;

// A vector's s and m, lanes in the widened order: low (rows 0-7) and high (rows 8-15) half.
struct Params {
    __m512 s_low, s_high, m_low, m_high;
};

inline Params params(const uint8_t* group, int v) {
    const uint16_t* header = reinterpret_cast<const uint16_t*>(group);
    const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + v * 16)));
    const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + ROWS + v * 16)));
    const __m512i low = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
    return Params{_mm512_permutexvar_ps(low, s), _mm512_permutexvar_ps(high, s),
                  _mm512_permutexvar_ps(low, m), _mm512_permutexvar_ps(high, m)};
}

// 16 bytes of codes (a column pair of 16 rows) as 32 bf16 weights q * s + m.
inline __m512bh widen32(const uint8_t* codes, const Params& p) {
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    const __m512 low = _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(15)));
    const __m512 high = _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4));
    return _mm512_cvtne2ps_pbh(_mm512_fmadd_ps(high, p.s_high, p.m_high),
                               _mm512_fmadd_ps(low, p.s_low, p.m_low));  // 2nd: low lanes
}

struct Int4 {
    const uint16_t* x;     // (T, K) bf16
    int K;
    const uint8_t* codes;  // [N/64][K/32][1280]
    Out out;

    const uint8_t* codes_at(int tile, int kb) const {
        return codes + (static_cast<int64_t>(tile) * (K / GROUP) + kb / GROUP) * GROUP_BYTES;
    }
    int block_bytes(int pairs) const { return pairs * 2 / GROUP * GROUP_BYTES; }

    void widen(int tile, int kb, int pairs, uint16_t* w) const {
        const uint8_t* group = codes_at(tile, kb);
        for (int g = 0; g < pairs * 2 / GROUP; ++g, group += GROUP_BYTES)
            for (int v = 0; v < V; ++v) {
                const Params p = params(group, v);
                const uint8_t* line = group + HEADER_BYTES + v * (GROUP / 2) * 16;
                for (int i = 0; i < GROUP / 2; ++i, line += 16) {
                    uint16_t* to = w + (g * GROUP / 2 + i) * ROWS * 2 + v * 32;
                    _mm512_store_si512(to, reinterpret_cast<__m512i>(widen32(line, p)));
                }
            }
    }

    // Up to DIRECT_TOKENS tokens of one tile, the codes widened as they stream in.
    template <int TT>
    void few(int tile) const {
        __m512 acc[V][TT];
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_setzero_ps();
        const uint8_t* group = codes_at(tile, 0);
        for (int k0 = 0; k0 < K; k0 += GROUP, group += GROUP_BYTES) {
            for (int b = 0; b < GROUP_BYTES; b += 64)
                _mm_prefetch(reinterpret_cast<const char*>(group) + PREFETCH + b, _MM_HINT_T0);
            for (int v = 0; v < V; ++v) {
                const Params p = params(group, v);
                const uint8_t* line = group + HEADER_BYTES + v * (GROUP / 2) * 16;
                for (int i = 0; i < GROUP / 2; ++i, line += 16) {
                    const __m512bh w = widen32(line, p);
                    for (int t = 0; t < TT; ++t)
                        acc[v][t] = _mm512_dpbf16_ps(acc[v][t], w, pair(x + static_cast<int64_t>(t) * K, k0 + 2 * i));
                }
            }
        }
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT; ++t) out.store(tile, v, t, acc[v][t]);
    }
};

}  // namespace

extern "C" {

// N a multiple of 64, K of 32; codes in the layout above; bias may be null.
void dynaspec_int4bf16_matmul(const uint16_t* x, int T, int K, const uint8_t* codes,
                              const float* bias, int N, float* y, int threads) {
    run(Int4{x, K, codes, Out{nullptr, bias, N, y}}, T, threads);
}

}  // extern "C"
