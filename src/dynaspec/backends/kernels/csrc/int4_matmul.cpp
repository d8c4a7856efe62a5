// y = x @ w.T + bias for float32 activations x (T, K) and 4-bit weights w (N, K) on AVX2 +
// FMA + F16C, where w = q * s + m for a code q in 0..15 and one scale s and one offset m
// (float16) per row and group of G columns (G a multiple of 8).
//
// Why: a decoding step on a CPU reads every weight once; 4 bits a weight and two float16
// numbers a group of 32 read 0.625 bytes a weight (llama.cpp's q4_K: 0.5625), 0.16 of
// float32 and 0.63 of int8.
//
// Per group: sum_k w_k x_k = s * sum_k q_k x_k + m * sum_k x_k. The codes' products with x
// are summed for the group (the partial sums), then s * partial + m * (the group's sum of
// x, computed once a token) is added to the row's accumulator.
//
// Layout: tiles of 8 rows, each one sequential stream, group after group: 32 bytes (float16
// s of the 8 rows, then their m), then G/8 chunks of 32 bytes, one 32-bit word a row, whose
// nibble k (bits 4k..4k+3) is the code of the chunk's column k. A lane of a vector is a
// row: one load gives the chunk, (word >> 4k) & 15 its column k for the 8 rows, multiplied
// by x's column k broadcast. The lanes are the rows: no horizontal sums.
//
// Each chunk is decoded once for up to 6 tokens (12 partial sums); more tokens take more
// passes. One token: two tiles at once, so that 4 chains of multiply-adds are in flight.
//
// Exactness: every (row, token) pair has 2 partial sums (columns k mod 2) and one
// accumulator, fed in the same order whatever T is, so a row of a T-token product is
// bitwise the one-token product (a verification sees the logits a step would). Built with
// -ffp-contract=off so that no path fuses differently.
#include <immintrin.h>
#include <stdint.h>

namespace {

constexpr int TILE = 8;          // rows a tile: the 8 lanes
constexpr int CHUNK_BYTES = 32;  // a tile's codes for 8 columns
constexpr int HEADER_BYTES = 32; // a tile's s and m for a group
constexpr int CHAINS = 2;        // partial sums a (row, token): columns k mod 2
constexpr int MAX_TOKENS = 6;    // tokens a pass: 12 partial sums
constexpr int PREFETCH = 1024;   // bytes ahead in a tile's stream

struct Problem {
    const float* x;        // (T, K)
    int K;
    const uint8_t* codes;  // (N/8) tile streams of K/G * (32 + 4 * G) bytes
    int G;
    const float* xsum;     // (T, K/G): each group's sum of x
    const float* bias;     // (N,) or null
    int N;
    float* y;              // (T, N)
};

// Column k of a chunk for the 8 rows, as floats.
template <int k>
inline __m256 column(__m256i words) {
    __m256i q = k == 0 ? words : _mm256_srli_epi32(words, 4 * k);
    if (k < 7) q = _mm256_and_si256(q, _mm256_set1_epi32(15));
    return _mm256_cvtepi32_ps(q);
}

template <int TT, int k>
inline void column_products(__m256i words, const float* const* xs, int c,
                            __m256 (&part)[TT][CHAINS]) {
    const __m256 q = column<k>(words);
    for (int t = 0; t < TT; ++t)
        part[t][k % CHAINS] =
            _mm256_fmadd_ps(q, _mm256_broadcast_ss(xs[t] + c * 8 + k), part[t][k % CHAINS]);
}

// Tokens tok .. tok+TT-1 of tiles tile_index .. tile_index+NT-1 (NT > 1 for one token: more
// independent chains).
template <int NT, int TT>
void tile_tokens(const Problem& p, int tile_index, int tok) {
    const int per_group = p.G / 8, groups = p.K / p.G;
    const int64_t stream = static_cast<int64_t>(groups) * (HEADER_BYTES + 4 * p.G);
    const uint8_t* at[NT];
    const float* xs[TT];
    __m256 acc[NT][TT];
    for (int n = 0; n < NT; ++n) {
        at[n] = p.codes + (tile_index + n) * stream;
        for (int t = 0; t < TT; ++t) acc[n][t] = _mm256_setzero_ps();
    }
    for (int t = 0; t < TT; ++t) xs[t] = p.x + static_cast<int64_t>(tok + t) * p.K;
    for (int g = 0; g < groups; ++g) {
        __m256 s[NT], m[NT], part[NT][TT][CHAINS];
        for (int n = 0; n < NT; ++n) {
            s[n] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at[n])));
            m[n] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at[n] + 16)));
            at[n] += HEADER_BYTES;
            for (int t = 0; t < TT; ++t)
                for (int j = 0; j < CHAINS; ++j) part[n][t][j] = _mm256_setzero_ps();
        }
        for (int c = g * per_group; c < (g + 1) * per_group; ++c) {
            for (int n = 0; n < NT; ++n) {
                _mm_prefetch(reinterpret_cast<const char*>(at[n]) + PREFETCH, _MM_HINT_T0);
                const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at[n]));
                at[n] += CHUNK_BYTES;
                column_products<TT, 0>(words, xs, c, part[n]);
                column_products<TT, 1>(words, xs, c, part[n]);
                column_products<TT, 2>(words, xs, c, part[n]);
                column_products<TT, 3>(words, xs, c, part[n]);
                column_products<TT, 4>(words, xs, c, part[n]);
                column_products<TT, 5>(words, xs, c, part[n]);
                column_products<TT, 6>(words, xs, c, part[n]);
                column_products<TT, 7>(words, xs, c, part[n]);
            }
        }
        for (int n = 0; n < NT; ++n)
            for (int t = 0; t < TT; ++t) {
                const __m256 partial = _mm256_add_ps(part[n][t][0], part[n][t][1]);
                const __m256 sx =
                    _mm256_set1_ps(p.xsum[static_cast<int64_t>(tok + t) * groups + g]);
                acc[n][t] = _mm256_fmadd_ps(partial, s[n], acc[n][t]);
                acc[n][t] = _mm256_fmadd_ps(m[n], sx, acc[n][t]);
            }
    }
    for (int n = 0; n < NT; ++n) {
        const int row = (tile_index + n) * TILE;
        for (int t = 0; t < TT; ++t) {
            __m256 out = acc[n][t];
            if (p.bias) out = _mm256_add_ps(out, _mm256_loadu_ps(p.bias + row));
            _mm256_storeu_ps(p.y + static_cast<int64_t>(tok + t) * p.N + row, out);
        }
    }
}

template <int TT>
void tokens_left(const Problem& p, int tile_index, int tok, int left) {
    if constexpr (TT > 1) {
        if (left < TT) return tokens_left<TT - 1>(p, tile_index, tok, left);
    }
    tile_tokens<1, TT>(p, tile_index, tok);
}

// Every token for one tile: MAX_TOKENS at a time, then the rest in one pass.
void tile_all_tokens(const Problem& p, int T, int tile_index) {
    for (int tok = 0; tok < T; tok += MAX_TOKENS) {
        const int left = T - tok < MAX_TOKENS ? T - tok : MAX_TOKENS;
        tokens_left<MAX_TOKENS>(p, tile_index, tok, left);
    }
}

// Each group's sum of x, token by token, in a fixed order: 8 lanes, then a fixed tree.
void group_sums(const float* x, int T, int K, int G, float* xsum) {
    const int groups = K / G;
    for (int t = 0; t < T; ++t) {
        for (int g = 0; g < groups; ++g) {
            const float* xg = x + static_cast<int64_t>(t) * K + g * G;
            __m256 v = _mm256_loadu_ps(xg);
            for (int k = 8; k < G; k += 8) v = _mm256_add_ps(v, _mm256_loadu_ps(xg + k));
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            h = _mm_add_ss(h, _mm_movehdup_ps(h));
            xsum[static_cast<int64_t>(t) * groups + g] = _mm_cvtss_f32(h);
        }
    }
}

}  // namespace

extern "C" {

// N a multiple of 8, K of G, G of 8; codes in the layout above; bias may be null;
// scratch: T * K / G floats (the groups' sums of x).
void dynaspec_int4_matmul(const float* x, int T, int K, const uint8_t* codes, int G,
                          const float* bias, int N, float* scratch, float* y, int threads) {
    group_sums(x, T, K, G, scratch);
    const Problem p{x, K, codes, G, scratch, bias, N, y};
    const int tiles = N / TILE;
    if (T == 1 && tiles % 2 == 0) {  // two tiles at once: 4 chains in flight
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int i = 0; i < tiles / 2; ++i) tile_tokens<2, 1>(p, 2 * i, 0);
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < tiles; ++i) tile_all_tokens(p, T, i);
}

}  // extern "C"
