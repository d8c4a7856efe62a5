// y = (x @ q.T) * scale + bias for bf16 activations x (T, K) and int8 weights q (N, K), one
// int8 code per weight and one float32 scale per output row, on AVX512-BF16; y float32.
//
// Why: a decoding step reads every weight once, so int8 reads half of bf16's bytes; but
// torch's int8 kernel for bf16 (`_weight_int8pack_mm`) does not batch, so a verification over
// 8-16 tokens cost 3-6 single steps and the int8 target kept a second, bf16 copy of its
// weights to verify with (numbers in int8_kernel.py). Here the codes are widened to bf16 in
// registers (integers up to 127 are exact in bf16) and multiplied with VDPBF16PS, two
// columns of 16 rows an instruction, the layout oneDNN's bf16 kernel uses for dense weights.
// Up to DIRECT_TOKENS tokens use the codes as they stream in; more tokens widen a block of
// columns once into a scratch buffer that stays in the core's first-level cache and run every
// token over it.
//
// Layout: [N/64][K/2][64 rows][2 codes]: a tile of 64 rows is one sequential stream, and one
// column pair of 16 rows is one vector once widened.
//
// Exactness: each output (row, token) is one lane of one accumulator that adds the K/2 pair
// products in column order whatever T and the blocking are, so a row of a T-token product is
// bitwise the one-token product (a verification sees the logits a step would).
//
// Built at first use by dynaspec/backends/kernel_build.py with the system C++ compiler
// (-O3 -mavx512f -mavx512bw -mavx512bf16 -fopenmp), linked to torch's own OpenMP runtime.
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include <memory>

namespace {

constexpr int ROWS = 64;  // rows a tile: 4 vectors of 16
constexpr int V = ROWS / 16;
constexpr int PAIR_BYTES = ROWS * 2;  // the codes of one column pair of a tile
constexpr int PREFETCH = 1024;        // bytes ahead in the codes' stream
constexpr int DIRECT_TOKENS = 5;      // up to this many tokens: no scratch buffer
constexpr int KB = 128;               // columns a block: 16 KB of bf16 weights
constexpr int TB = 24;                // tokens a pass over the codes: 24 KB of accumulators

struct Problem {
    const uint16_t* x;    // (T, K) bf16
    int K;
    const int8_t* codes;  // [N/64][K/2][64][2]
    const float* scale;   // (N,)
    const float* bias;    // (N,) or null
    int N;
    float* y;             // (T, N)
};

// 32 codes (a column pair of 16 rows) as 32 bf16 values, order kept.
inline __m512bh widen32(const int8_t* codes) {
    const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16));
    const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(low));
    const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(high));
    return _mm512_cvtne2ps_pbh(b, a);  // the second operand fills the low lanes
}

// Columns k, k+1 of a token, in every 32-bit lane.
inline __m512bh pair(const uint16_t* x, int k) {
    int32_t both;
    memcpy(&both, x + k, sizeof both);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(both));
}

inline const int8_t* tile_codes(const Problem& p, int tile) {
    return p.codes + static_cast<int64_t>(tile) * ROWS * p.K;
}

// y[tok, rows of vector v] = acc * scale + bias
inline void store(const Problem& p, int tile, int v, int tok, __m512 acc) {
    const int row = tile * ROWS + v * 16;
    __m512 out = _mm512_mul_ps(acc, _mm512_loadu_ps(p.scale + row));
    if (p.bias) out = _mm512_add_ps(out, _mm512_loadu_ps(p.bias + row));
    _mm512_storeu_ps(p.y + static_cast<int64_t>(tok) * p.N + row, out);
}

// Up to DIRECT_TOKENS tokens of one tile, the codes widened in registers as they stream in.
template <int TT>
void tile_few_tokens(const Problem& p, int tile) {
    __m512 acc[V][TT];
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_setzero_ps();
    const int8_t* line = tile_codes(p, tile);
    for (int k = 0; k < p.K; k += 2, line += PAIR_BYTES) {
        _mm_prefetch(reinterpret_cast<const char*>(line) + PREFETCH, _MM_HINT_T0);
        __m512bh xv[TT];
        for (int t = 0; t < TT; ++t) xv[t] = pair(p.x + static_cast<int64_t>(t) * p.K, k);
        for (int v = 0; v < V; ++v) {
            const __m512bh w = widen32(line + v * 32);
            for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], w, xv[t]);
        }
    }
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t) store(p, tile, v, t, acc[v][t]);
}

// A thread's scratch: one block of a tile's weights in bf16, the accumulators of TB tokens.
struct Scratch {
    alignas(64) uint16_t w[KB / 2 * ROWS * 2];  // [KB/2][64][2]
    alignas(64) float partial[TB * ROWS];       // [TB][64]
};

Scratch& scratch() {  // this thread's, kept while it lives (OpenMP's pool keeps its threads)
    static thread_local std::unique_ptr<Scratch> s(new Scratch);
    return *s;
}

// Tokens tok .. tok+TT-1 (t0 .. t0+TT-1 in `partial`) over one block of `pairs` column
// pairs from column kb, the block's bf16 weights in `w`; the accumulators carry over between
// blocks in `partial`.
template <int TT>
inline void block(const Problem& p, const Scratch& s, int pairs, int kb, int tok, int t0,
                  bool fresh, const int8_t* next) {
    __m512 acc[V][TT];
    const float* partial = s.partial + t0 * ROWS;
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t)
            acc[v][t] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(partial + t * ROWS + v * 16);
    const uint16_t* xs = p.x + static_cast<int64_t>(tok) * p.K + kb;
    const uint16_t* w = s.w;
    for (int i = 0; i < pairs; ++i, w += ROWS * 2) {
        if (next) {  // the next block's codes (as long as this one's), two lines a pair
            _mm_prefetch(reinterpret_cast<const char*>(next) + i * PAIR_BYTES, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(next) + i * PAIR_BYTES + 64, _MM_HINT_T0);
        }
        for (int v = 0; v < V; ++v) {
            const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_load_si512(w + v * 32));
            for (int t = 0; t < TT; ++t)
                acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv, pair(xs + static_cast<int64_t>(t) * p.K, 2 * i));
        }
    }
    float* out = const_cast<float*>(partial);
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t) _mm512_store_ps(out + t * ROWS + v * 16, acc[v][t]);
}

// Up to TB tokens from `tok` for one tile: block by block of KB columns, the codes widened
// once into the scratch, then up to 6 tokens at a time (24 accumulators, 4 weight vectors).
void tile_many_tokens(const Problem& p, int tile, int tok, int count, Scratch& s) {
    const int8_t* codes = tile_codes(p, tile);
    for (int kb = 0; kb < p.K; kb += KB) {
        const int pairs = (kb + KB <= p.K ? KB : p.K - kb) / 2;
        const int8_t* line = codes + static_cast<int64_t>(kb) * ROWS;
        for (int i = 0; i < pairs * V; ++i, line += 32) {
            _mm_prefetch(reinterpret_cast<const char*>(line) + PREFETCH, _MM_HINT_T0);
            _mm512_store_si512(s.w + i * 32, reinterpret_cast<__m512i>(widen32(line)));
        }
        const bool fresh = kb == 0;
        // While the first tokens run over this block, the next block's codes come in.
        const int8_t* next = kb + KB < p.K ? line : nullptr;
        int t = 0;
        for (; t + 6 <= count; t += 6, next = nullptr) block<6>(p, s, pairs, kb, tok + t, t, fresh, next);
        switch (count - t) {
            case 5: block<5>(p, s, pairs, kb, tok + t, t, fresh, next); break;
            case 4: block<4>(p, s, pairs, kb, tok + t, t, fresh, next); break;
            case 3: block<3>(p, s, pairs, kb, tok + t, t, fresh, next); break;
            case 2: block<2>(p, s, pairs, kb, tok + t, t, fresh, next); break;
            case 1: block<1>(p, s, pairs, kb, tok + t, t, fresh, next); break;
            default: break;
        }
    }
    for (int t = 0; t < count; ++t)
        for (int v = 0; v < V; ++v) store(p, tile, v, tok + t, _mm512_load_ps(s.partial + t * ROWS + v * 16));
}

}  // namespace

extern "C" {

// N a multiple of 64, K even; codes in the tiled layout above; bias may be null.
void dynaspec_int8bf16_matmul(const uint16_t* x, int T, int K, const int8_t* codes,
                              const float* scale, const float* bias, int N, float* y,
                              int threads) {
    const Problem p{x, K, codes, scale, bias, N, y};
    const int tiles = N / ROWS;
    if (T <= DIRECT_TOKENS) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int i = 0; i < tiles; ++i) {
            if (T == 1) tile_few_tokens<1>(p, i);
            if (T == 2) tile_few_tokens<2>(p, i);
            if (T == 3) tile_few_tokens<3>(p, i);
            if (T == 4) tile_few_tokens<4>(p, i);
            if (T == 5) tile_few_tokens<5>(p, i);
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        Scratch& s = scratch();
#pragma omp for schedule(static)
        for (int i = 0; i < tiles; ++i)
            for (int tok = 0; tok < T; tok += TB) tile_many_tokens(p, i, tok, T - tok < TB ? T - tok : TB, s);
    }
}

}  // extern "C"
