// What dynaspec's low-bit kernels for bf16 activations on AVX512-BF16 share
// (int8bf16_matmul.cpp, int4bf16_matmul.cpp): y = x @ w.T for bf16 x (T, K) and weights w
// (N, K) held in fewer bits, which each kernel turns back into bf16 ("widens") in registers.
//
// Tiles of 64 output rows, each one sequential stream of the tile's codes. A widened column
// pair of 16 rows is one 512-bit vector of 32 bf16 (lane 2i: row i, column k; lane 2i+1:
// row i, column k+1), multiplied with VDPBF16PS by the pair (x[k], x[k+1]) broadcast, so
// lane i of an accumulator is row i: no horizontal sums, as in oneDNN's bf16 kernel.
//
// Up to DIRECT_TOKENS tokens widen the codes as they stream in (the kernel's `few<TT>`).
// More tokens widen a block of KB columns once into a scratch buffer that stays in the
// core's first-level cache, run every token over it 6 at a time, and prefetch the next
// block's codes meanwhile (widening and multiplying without reading memory would leave
// the memory idle; measured: 1.7x slower at 6 tokens).
//
// Exactness: each output (row, token) is one lane of one accumulator that adds the K/2 pair
// products in column order whatever T and the blocking are, so a row of a T-token product is
// bitwise the one-token product (a verification sees the logits a step would).
#pragma once

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include <memory>

namespace bf16_tiles {

constexpr int ROWS = 64;               // rows a tile: 4 vectors of 16
constexpr int V = ROWS / 16;
constexpr int DIRECT_TOKENS = 5;       // up to this many tokens: no scratch buffer
constexpr int KB = 128;                // columns a block: 16 KB of bf16 weights
constexpr int TB = 24;                 // tokens a pass over the codes: 6 KB of accumulators
constexpr int PREFETCH = 1024;         // bytes ahead in a tile's stream

// Columns k, k+1 of a token, in every 32-bit lane.
inline __m512bh pair(const uint16_t* x, int64_t k) {
    int32_t both;
    memcpy(&both, x + k, sizeof both);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(both));
}

// 16 bf16 values widened to float32 (exact).
inline __m512 from_bf16(const uint16_t* p) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// float32 lanes rounded to bf16 as torch's CPU conversion rounds them (to nearest, ties to
// even; a NaN becomes 0xFFFF), with AVX512-F alone (the VNNI kernels' CPUs may lack AVX512-BF16).
inline __m256i to_bf16(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0xFFFF));
    return _mm512_cvtepi32_epi16(rounded);
}

// Where the products go: y[tok, row] = acc * scale[row] (when given) + bias[row] (when given),
// float32, or rounded to bf16 (`bf16`: y holds uint16 bf16 values; saves the conversion
// that followed every layer).
struct Out {
    const float* scale;  // (N,) or null
    const float* bias;   // (N,) or null
    int N;
    void* y;             // (T, N) float32, or bf16
    bool bf16 = false;

    void store(int tile, int v, int tok, __m512 acc) const {
        const int row = tile * ROWS + v * 16;
        if (scale) acc = _mm512_mul_ps(acc, _mm512_loadu_ps(scale + row));
        if (bias) acc = _mm512_add_ps(acc, _mm512_loadu_ps(bias + row));
        const int64_t at = static_cast<int64_t>(tok) * N + row;
        if (bf16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(y) + at), to_bf16(acc));
        else
            _mm512_storeu_ps(static_cast<float*>(y) + at, acc);
    }
};

// A thread's scratch: one block of a tile's weights in bf16, the accumulators of TB tokens.
struct Scratch {
    alignas(64) uint16_t w[KB / 2 * ROWS * 2];  // [KB/2 pairs][64 rows][2 columns]
    alignas(64) float partial[TB * ROWS];       // [TB][64]
};

inline Scratch& scratch() {  // this thread's, kept while it lives (OpenMP keeps its threads)
    static thread_local std::unique_ptr<Scratch> s(new Scratch);
    return *s;
}

// Tokens tok .. tok+TT-1 (t0 .. in `partial`) over one block of `pairs` column pairs from
// column kb, widened in `s.w`; the accumulators carry over between blocks in `s.partial`.
// While the first tokens run, `next_bytes` of the next block's codes at `next` come in.
template <int TT>
inline void block(const uint16_t* x, int K, Scratch& s, int pairs, int kb, int tok, int t0,
                  bool fresh, const uint8_t* next, int next_bytes) {
    __m512 acc[V][TT];
    float* partial = s.partial + t0 * ROWS;
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t)
            acc[v][t] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(partial + t * ROWS + v * 16);
    const uint16_t* xs = x + static_cast<int64_t>(tok) * K + kb;
    const uint16_t* w = s.w;
    const int step = next ? (next_bytes + pairs - 1) / pairs : 0;  // bytes to fetch a pair
    for (int i = 0; i < pairs; ++i, w += ROWS * 2) {
        for (int b = i * step; b < (i + 1) * step && b < next_bytes; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(next) + b, _MM_HINT_T0);
        for (int v = 0; v < V; ++v) {
            const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_load_si512(w + v * 32));
            for (int t = 0; t < TT; ++t)
                acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv, pair(xs + static_cast<int64_t>(t) * K, 2 * i));
        }
    }
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t) _mm512_store_ps(partial + t * ROWS + v * 16, acc[v][t]);
}

// Up to TB tokens from `tok` for one tile, block by block: the kernel widens each block
// (`k.widen(tile, kb, pairs, s.w)`) and says where the next one's codes are
// (`k.codes_at(tile, kb)`, `k.block_bytes(pairs)`), then 6 tokens at a time run over it.
template <class Kernel>
void many_tokens(const Kernel& k, int tile, int tok, int count, Scratch& s) {
    for (int kb = 0; kb < k.K; kb += KB) {
        const int pairs = (kb + KB <= k.K ? KB : k.K - kb) / 2;
        k.widen(tile, kb, pairs, s.w);
        const bool more = kb + KB < k.K;
        const uint8_t* next = more ? k.codes_at(tile, kb + KB) : nullptr;
        const int next_pairs = more ? ((kb + 2 * KB <= k.K ? KB : k.K - kb - KB) / 2) : 0;
        const int bytes = k.block_bytes(next_pairs);
        const bool fresh = kb == 0;
        int t = 0;
        for (; t + 6 <= count; t += 6, next = nullptr)
            block<6>(k.x, k.K, s, pairs, kb, tok + t, t, fresh, next, bytes);
        switch (count - t) {
            case 5: block<5>(k.x, k.K, s, pairs, kb, tok + t, t, fresh, next, bytes); break;
            case 4: block<4>(k.x, k.K, s, pairs, kb, tok + t, t, fresh, next, bytes); break;
            case 3: block<3>(k.x, k.K, s, pairs, kb, tok + t, t, fresh, next, bytes); break;
            case 2: block<2>(k.x, k.K, s, pairs, kb, tok + t, t, fresh, next, bytes); break;
            case 1: block<1>(k.x, k.K, s, pairs, kb, tok + t, t, fresh, next, bytes); break;
            default: break;
        }
    }
    for (int t = 0; t < count; ++t)
        for (int v = 0; v < V; ++v)
            k.out.store(tile, v, tok + t, _mm512_load_ps(s.partial + t * ROWS + v * 16));
}

// The whole product on `threads` threads, tiles split among them: up to DIRECT_TOKENS
// tokens by the kernel's `few<T>(tile)`, more by its `many(tile, tok, count, scratch)` (the
// int8 kernel's is `many_tokens` above), TB tokens at a time.
template <class Kernel>
void run(const Kernel& k, int T, int threads) {
    const int tiles = k.out.N / ROWS;
    if (T <= DIRECT_TOKENS) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int i = 0; i < tiles; ++i) {
            switch (T) {
                case 1: k.template few<1>(i); break;
                case 2: k.template few<2>(i); break;
                case 3: k.template few<3>(i); break;
                case 4: k.template few<4>(i); break;
                default: k.template few<5>(i); break;
            }
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        Scratch& s = scratch();
#pragma omp for schedule(static)
        for (int i = 0; i < tiles; ++i)
            for (int tok = 0; tok < T; tok += TB) k.many(i, tok, T - tok < TB ? T - tok : TB, s);
    }
}

}  // namespace bf16_tiles
