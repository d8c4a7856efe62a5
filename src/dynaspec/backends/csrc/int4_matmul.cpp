// y = x @ w.T + bias for float32 activations x (T, K) and 4-bit weights w (N, K) on AVX2 +
// FMA + F16C, where w = q * s + m for a code q in 0..15 and one scale s and one minimum m
// (float16) per row and group of G columns (G a multiple of 8).
//
// Why: a decoding step on a CPU reads every weight once; 4 bits a weight and two float16
// numbers a group of 32 read 0.625 bytes a weight (llama.cpp's q4_K: 0.5625), 0.16 of
// float32 and 0.63 of int8.
//
// Layout: tiles of 8 rows (4 pairs), each one sequential stream, group after group: 32
// bytes (float16 s of the 8 rows, then their m), then G/8 chunks of 32 bytes, 8 bytes a
// pair of rows: 4 bytes of its first row, 4 of its second, where byte j of a row holds the
// codes of the chunk's columns j (low nibble) and j + 4 (high nibble). Zero-extended to 8
// int32 lanes, 8 bytes give both rows of a pair at once: AND 15 the columns 0-3, a shift by
// 4 the columns 4-7 (lanes 0-3 the first row, 4-7 the second), decoded to w = q * s + m
// and multiplied by x's columns 0-3 (4-7) repeated twice (`expanded`, built once a call).
//
// Each chunk is decoded once for up to 3 tokens and used at once (12 accumulators: 4 pairs by
// 3 tokens); more tokens take more passes. Measured (see int4_kernel.py): decoding costs
// more than the memory it saves from about 4 tokens on, where the int8 kernel is faster.
//
// Exactness: every weight is decoded by the same instructions in every pass, and every
// (row, token) pair has its own accumulator, fed chunk by chunk in the same order whatever
// T is, then one fixed sum of 4 lanes, so a row of a T-token product is bitwise the
// one-token product (a verification sees the logits a step would). Built with
// -ffp-contract=off so that no path fuses differently.
#include <immintrin.h>
#include <stdint.h>

namespace {

constexpr int PAIRS = 4;        // pairs of rows a tile
constexpr int CHUNK_BYTES = 32; // a tile's codes for 8 columns
constexpr int HEADER_BYTES = 32;
constexpr int PREFETCH = 1024;  // bytes ahead in a tile's stream

inline float sum4(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

struct Problem {
    const float* expanded;  // (T, K/8, 16): x's columns 0-3, 0-3, 4-7, 4-7 of each chunk
    int K;
    const uint8_t* codes;   // (N/8) tile streams of K/G * (32 + 4 * G) bytes
    int G;
    const float* bias;      // (N,) or null
    int N;
    float* y;               // (T, N)
};

struct Scales {  // a group's s and m of each pair, lanes 0-3 its first row, 4-7 its second
    __m256 s[PAIRS], m[PAIRS];
};

inline Scales group_header(const uint8_t* at) {
    const __m256 s8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
    const __m256 m8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16)));
    Scales out;
    for (int r = 0; r < PAIRS; ++r) {
        const int a = 2 * r;
        const __m256i index = _mm256_setr_epi32(a, a, a, a, a + 1, a + 1, a + 1, a + 1);
        out.s[r] = _mm256_permutevar8x32_ps(s8, index);
        out.m[r] = _mm256_permutevar8x32_ps(m8, index);
    }
    return out;
}

// The weights of pair r of a chunk: columns 0-3 (`lo`) and 4-7 (`hi`).
inline void decode(const uint8_t* chunk, const Scales& h, int r, __m256& lo, __m256& hi) {
    const __m256i bytes =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(chunk + r * 8)));
    const __m256 qlo = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(15)));
    const __m256 qhi = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
    lo = _mm256_fmadd_ps(qlo, h.s[r], h.m[r]);
    hi = _mm256_fmadd_ps(qhi, h.s[r], h.m[r]);
}

inline const uint8_t* tile_stream(const Problem& p, int tile_index) {
    const int64_t bytes = static_cast<int64_t>(p.K / p.G) * (HEADER_BYTES + 4 * p.G);
    return p.codes + tile_index * bytes;
}

inline void store(const Problem& p, int tile_index, int token, int r, __m256 acc) {
    const int row = tile_index * 8 + 2 * r;
    float* out = p.y + static_cast<int64_t>(token) * p.N + row;
    const float v0 = sum4(_mm256_castps256_ps128(acc));
    const float v1 = sum4(_mm256_extractf128_ps(acc, 1));
    out[0] = p.bias ? v0 + p.bias[row] : v0;
    out[1] = p.bias ? v1 + p.bias[row + 1] : v1;
}

// Tokens tok .. tok+TT-1 of a tile: each chunk decoded once and used for all of them.
template <int TT>
void tile_tokens(const Problem& p, int tile_index, int tok) {
    const int per_group = p.G / 8, groups = p.K / p.G;
    const int64_t token_stride = static_cast<int64_t>(p.K / 8) * 16;
    const uint8_t* at = tile_stream(p, tile_index);
    __m256 acc[PAIRS][TT];
    for (int r = 0; r < PAIRS; ++r)
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();
    const float* x = p.expanded + tok * token_stride;
    for (int g = 0; g < groups; ++g) {
        const Scales h = group_header(at);
        at += HEADER_BYTES;
        for (int c = 0; c < per_group; ++c, at += CHUNK_BYTES, x += 16) {
            _mm_prefetch(reinterpret_cast<const char*>(at) + PREFETCH, _MM_HINT_T0);
            for (int r = 0; r < PAIRS; ++r) {
                __m256 lo, hi;
                decode(at, h, r, lo, hi);
                for (int t = 0; t < TT; ++t) {
                    const float* xt = x + t * token_stride;
                    acc[r][t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xt), acc[r][t]);
                    acc[r][t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xt + 8), acc[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < PAIRS; ++r)
        for (int t = 0; t < TT; ++t) store(p, tile_index, tok + t, r, acc[r][t]);
}

// Every token for one tile: 3 at a time (12 accumulators), then the rest.
void tile_all_tokens(const Problem& p, int T, int tile_index) {
    int tok = 0;
    for (; tok + 3 <= T; tok += 3) tile_tokens<3>(p, tile_index, tok);
    if (T - tok == 2) tile_tokens<2>(p, tile_index, tok);
    if (T - tok == 1) tile_tokens<1>(p, tile_index, tok);
}

// x's chunks with their halves repeated: (T, K/8, 16).
void expand(const float* x, int T, int K, float* expanded) {
    const int64_t chunks = static_cast<int64_t>(T) * K / 8;
    for (int64_t c = 0; c < chunks; ++c) {
        const __m128 lo = _mm_loadu_ps(x + c * 8), hi = _mm_loadu_ps(x + c * 8 + 4);
        _mm256_storeu_ps(expanded + c * 16, _mm256_set_m128(lo, lo));
        _mm256_storeu_ps(expanded + c * 16 + 8, _mm256_set_m128(hi, hi));
    }
}

}  // namespace

extern "C" {

// N a multiple of 8, K of G, G of 8; codes in the layout above; bias may be null.
// scratch: T * K * 2 floats (x's halves repeated).
void dynaspec_int4_matmul(const float* x, int T, int K, const uint8_t* codes, int G,
                          const float* bias, int N, float* scratch, float* y, int threads) {
    expand(x, T, K, scratch);
    const Problem p{scratch, K, codes, G, bias, N, y};
    const int tiles = N / 8;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < tiles; ++i) tile_all_tokens(p, T, i);
}

}  // extern "C"
