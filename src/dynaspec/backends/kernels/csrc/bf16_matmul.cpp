// y = x @ w.T + bias for bf16 activations x (T, K) and bf16 weights w (N, K) on AVX512-BF16,
// with a reduction order that does not depend on T: row t of a T-token product is bitwise
// the one-token product of x[t], whatever T, the other rows and the number of threads.
//
// Why: oneDNN's bf16 product (torch's F.linear and the prepacked weights) picks its blocking
// from the number of rows, and with it the order in which a row's K products are summed, so
// a verification over several tokens and a step over one differ in the last bit (on the
// 2-core AVX512-BF16 EPYC: from 4 rows for F.linear and 8 for prepacked weights, K = 1536),
// and at a tie of the target's two best logits the argmax flips. With this kernel a drafted
// token is accepted exactly when the target alone would have produced it.
//
// How (bf16_tiles.h): tiles of 64 output rows, a column pair of 16 rows one 512-bit vector,
// multiplied with VDPBF16PS by the pair (x[k], x[k+1]) broadcast; lane i of an accumulator is
// row i. Each output (row, token) is one lane of one accumulator that adds the K/2 pair
// products in column order, from zero, in every path: up to DIRECT_TOKENS tokens stream the
// tile once with the accumulators in registers (`few`); more run the tile block by block (BLOCK
// columns, 256 KB, read from memory once and then from the second-level cache), 6 tokens at a
// time over it, the accumulators carried between blocks in the thread's scratch (`many`).
// Storing an accumulator and loading it again changes no bit, so both paths sum in the same
// order. Blocks of 2048 columns rather than the 128 (16 KB, first-level cache) of the int8
// kernel: a token's pass over a block then stores and loads its 24 accumulators once per
// 1024 column pairs instead of 64, and those round trips, not the reads from the second-level
// cache, were what cost (AMD EPYC Zen 4, one thread, 300 rows: 0.89x oneDNN's time at
// K = 1536 and 0.91x at 8960, against 0.99x and 1.16x with blocks of 128, 1.8x with 64).
// The bias (float32) is added once at the end, then the sum is rounded to bf16 (to nearest,
// ties to even) or written as float32.
//
// Layout: [N/64][K/2][64 rows][2 columns] bf16: a tile is one sequential stream, as the int8
// kernel's codes (kernels/int8_bf16.py). N a multiple of 64, K even.
//
// Built at first use by dynaspec/backends/kernels/build.py with the system C++ compiler
// (-O3 -mavx512f -mavx512bw -mavx512bf16 -fopenmp), linked to torch's own OpenMP runtime.
#include <cstdlib>
#include <new>
#include <vector>

#include "bf16_tiles.h"

namespace {

// 64-byte aligned storage for the accumulators (aligned vector loads and stores).
struct Aligned {
    using value_type = float;
    Aligned() = default;
    template <class U>
    Aligned(const U&) {}
    float* allocate(size_t n) {
        void* p = std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        if (!p) throw std::bad_alloc();
        return static_cast<float*>(p);
    }
    void deallocate(float* p, size_t) { std::free(p); }
    template <class U>
    struct rebind {
        using other = Aligned;
    };
    bool operator==(const Aligned&) const { return true; }
    bool operator!=(const Aligned&) const { return false; }
};

using namespace bf16_tiles;

constexpr int PAIR_ELEMENTS = ROWS * 2;  // bf16 values of one column pair of a tile
constexpr int BLOCK = 2048;              // columns a block of `many`: 256 KB of a tile

// Tokens t0 .. t0+TT-1 over `pairs` column pairs from column kb, read from the tile itself at
// `w`; the accumulators carry over between blocks in `partial` ([T][64], fresh: from zero).
template <int TT>
inline void block(const uint16_t* x, int K, const uint16_t* w, float* partial, int pairs,
                  int kb, int t0, bool fresh) {
    __m512 acc[V][TT];
    partial += static_cast<int64_t>(t0) * ROWS;
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t)
            acc[v][t] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(partial + t * ROWS + v * 16);
    const uint16_t* xs = x + static_cast<int64_t>(t0) * K + kb;
    for (int i = 0; i < pairs; ++i, w += PAIR_ELEMENTS) {
        __m512bh xv[TT];
        for (int t = 0; t < TT; ++t) xv[t] = pair(xs + static_cast<int64_t>(t) * K, 2 * i);
        for (int v = 0; v < V; ++v) {
            const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + v * 32));
            for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv, xv[t]);
        }
    }
    for (int v = 0; v < V; ++v)
        for (int t = 0; t < TT; ++t) _mm512_store_ps(partial + t * ROWS + v * 16, acc[v][t]);
}

struct Bf16 {
    const uint16_t* x;  // (T, K) bf16
    int K;
    const uint16_t* w;  // [N/64][K/2][64][2] bf16
    Out out;

    const uint16_t* tile_weights(int tile) const {
        return w + static_cast<int64_t>(tile) * ROWS * K;
    }

    // Every token for one tile, block by block (each block read from memory once, then from
    // the second-level cache), 6 tokens at a time; `partial` holds (T, 64) accumulators.
    void many(int tile, int T, float* partial) const {
        for (int kb = 0; kb < K; kb += BLOCK) {
            const int pairs = (kb + BLOCK <= K ? BLOCK : K - kb) / 2;
            const uint16_t* wb = tile_weights(tile) + static_cast<int64_t>(kb) * ROWS;
            const bool fresh = kb == 0;
            int t = 0;
            for (; t + 6 <= T; t += 6) block<6>(x, K, wb, partial, pairs, kb, t, fresh);
            switch (T - t) {
                case 5: block<5>(x, K, wb, partial, pairs, kb, t, fresh); break;
                case 4: block<4>(x, K, wb, partial, pairs, kb, t, fresh); break;
                case 3: block<3>(x, K, wb, partial, pairs, kb, t, fresh); break;
                case 2: block<2>(x, K, wb, partial, pairs, kb, t, fresh); break;
                case 1: block<1>(x, K, wb, partial, pairs, kb, t, fresh); break;
                default: break;
            }
        }
        for (int t = 0; t < T; ++t)
            for (int v = 0; v < V; ++v)
                out.store(tile, v, t, _mm512_load_ps(partial + t * ROWS + v * 16));
    }

    // Up to DIRECT_TOKENS tokens of one tile, the weights multiplied as they stream in.
    template <int TT>
    void few(int tile) const {
        __m512 acc[V][TT];
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_setzero_ps();
        const uint16_t* line = tile_weights(tile);
        for (int k = 0; k < K; k += 2, line += PAIR_ELEMENTS) {
            const char* ahead = reinterpret_cast<const char*>(line) + 2 * PREFETCH;
            for (int b = 0; b < PAIR_ELEMENTS * 2; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
            __m512bh xv[TT];
            for (int t = 0; t < TT; ++t) xv[t] = pair(x + static_cast<int64_t>(t) * K, k);
            for (int v = 0; v < V; ++v) {
                const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(line + v * 32));
                for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv, xv[t]);
            }
        }
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT; ++t) out.store(tile, v, t, acc[v][t]);
    }
};

}  // namespace

extern "C" {

// N a multiple of 64, K even; weights in the tiled layout above; bias (float32) may be null.
void dynaspec_bf16_matmul(const uint16_t* x, int T, int K, const uint16_t* w, const float* bias,
                          int N, void* y, int threads, int bf16) {
    const Bf16 k{x, K, w, Out{nullptr, bias, N, y, bf16 != 0}};
    const int tiles = N / ROWS;
    if (T <= DIRECT_TOKENS) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int i = 0; i < tiles; ++i) {
            switch (T) {
                case 1: k.few<1>(i); break;
                case 2: k.few<2>(i); break;
                case 3: k.few<3>(i); break;
                case 4: k.few<4>(i); break;
                default: k.few<5>(i); break;
            }
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        // a thread's accumulators, (T, 64) float32, kept between calls
        thread_local std::vector<float, Aligned> partial;
        partial.resize(static_cast<size_t>(T) * ROWS);
#pragma omp for schedule(static)
        for (int i = 0; i < tiles; ++i) k.many(i, T, partial.data());
    }
}

}  // extern "C"
