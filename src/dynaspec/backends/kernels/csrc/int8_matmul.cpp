// y = (x @ q.T) * scale + bias for float32 activations x (T, K) and int8 weights q (N, K),
// one int8 code per weight and one float32 scale per output row, on AVX2 + FMA.
//
// Why: a decoding step on a CPU reads every weight once; int8 reads a quarter of float32's
// bytes, and torch's int8 kernels do not pay on a CPU without AVX512 (numbers in
// kernels/int8.py). Here each code is read once per tile, widened to float32 in registers
// and multiplied into every token of the tile.
//
// Layout: the codes are stored in tiles of 8 rows, interleaved by 8 columns,
// [N/8][K/8][8 rows][8 codes], so that a tile is one sequential stream of cache lines (64
// bytes: 8 codes of each of its rows). Row by row, layers whose rows are short (1536 codes)
// ran at a quarter of the memory's speed: 8 streams of 24 cache lines each end before the
// hardware prefetcher has caught up.
//
// Exactness: every (row, token) pair has its own 8-lane accumulator that adds the K/8
// products in the same order whatever T and the tiling are, then one fixed horizontal sum,
// so a row of a T-token product is bitwise the one-token product (a verification sees the
// logits a step would). Built with -ffp-contract=off so that no path fuses differently.
//
// Built at first use by dynaspec/backends/kernels/build.py with the system C++ compiler
// (-O3 -mavx2 -mfma -fopenmp) and linked to torch's own OpenMP runtime.
#include <immintrin.h>
#include <stdint.h>

namespace {

constexpr int TILE = 8;  // rows a tile; also codes a row contributes to one cache line
constexpr int PREFETCH = 1024;  // bytes ahead: 12.7 GB/s for one token instead of 9.5

inline __m256 widen8(const int8_t* codes) {
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

inline float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

struct Problem {
    const float* x;       // (T, K)
    int K;
    const int8_t* codes;  // [N/8][K/8][8][8]
    const float* scale;   // (N,)
    const float* bias;    // (N,) or null
    int N;
    float* y;             // (T, N)
};

// Rows first .. first+R-1 of tile `tile_index`, tokens tok .. tok+TT-1.
template <int R, int TT>
inline void tile(const Problem& p, int tile_index, int first, int tok) {
    __m256 acc[R][TT];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();
    const int chunks = p.K / 8;
    const int8_t* line = p.codes + static_cast<int64_t>(tile_index) * chunks * 64 + first * 8;
    const float* xs[TT];
    for (int t = 0; t < TT; ++t) xs[t] = p.x + static_cast<int64_t>(tok + t) * p.K;
    for (int c = 0; c < chunks; ++c, line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(line) + PREFETCH, _MM_HINT_T0);
        __m256 xv[TT];
        for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(xs[t] + c * 8);
        for (int r = 0; r < R; ++r) {
            const __m256 w = widen8(line + r * 8);
            for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r) {
        const int row = tile_index * TILE + first + r;
        for (int t = 0; t < TT; ++t) {
            const float v = sum8(acc[r][t]) * p.scale[row];
            p.y[static_cast<int64_t>(tok + t) * p.N + row] = p.bias ? v + p.bias[row] : v;
        }
    }
}

// Every token for one tile: half a tile (4 rows) by 3 tokens at a time (12 accumulators, 3
// activations and a weight fill the 16 registers), then the rest.
inline void tile_all_tokens(const Problem& p, int T, int tile_index) {
    for (int first = 0; first < TILE; first += 4) {
        int tok = 0;
        for (; tok + 3 <= T; tok += 3) tile<4, 3>(p, tile_index, first, tok);
        if (T - tok == 2) tile<4, 2>(p, tile_index, first, tok);
        if (T - tok == 1) tile<4, 1>(p, tile_index, first, tok);
    }
}

}  // namespace

extern "C" {

// N and K multiples of 8; codes in the tiled layout above; bias may be null.
void dynaspec_int8_matmul(const float* x, int T, int K, const int8_t* codes,
                          const float* scale, const float* bias, int N, float* y, int threads) {
    const Problem p{x, K, codes, scale, bias, N, y};
    const int tiles = N / TILE;
    if (T == 1) {  // one token: a whole tile, 8 independent FMA chains
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int i = 0; i < tiles; ++i) tile<TILE, 1>(p, i, 0, 0);
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < tiles; ++i) tile_all_tokens(p, T, i);
}

}  // extern "C"
