// y = (x @ q.T) * scale + bias for bf16 activations x (T, K) and int8 weights q (N, K), one
// int8 code per weight and one float32 scale per output row, on AVX512-BF16; y float32.
//
// Why: a decoding step reads every weight once, so int8 reads half of bf16's bytes; but
// torch's int8 kernel for bf16 (`_weight_int8pack_mm`) does not batch, so a verification over
// 8-16 tokens cost 3-6 single steps and the int8 target kept a second, bf16 copy of its
// weights to verify with (numbers in kernels/int8_bf16.py). Here the codes are widened to bf16
// in registers (integers up to 127 are exact in bf16) and multiplied as bf16_tiles.h says;
// the scale is applied to each finished row.
//
// Layout: [N/64][K/2][64 rows][2 codes]: a tile of 64 rows is one sequential stream, and one
// column pair of 16 rows (32 bytes) is one vector once widened.
//
// Built at first use by dynaspec/backends/kernels/build.py with the system C++ compiler
// (-O3 -mavx512f -mavx512bw -mavx512bf16 -fopenmp), linked to torch's own OpenMP runtime.
#include "bf16_tiles.h"

namespace {

using namespace bf16_tiles;

constexpr int PAIR_BYTES = ROWS * 2;  // the codes of one column pair of a tile

// 32 codes (a column pair of 16 rows) as 32 bf16 values, order kept.
inline __m512bh widen32(const int8_t* codes) {
    const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16));
    const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(low));
    const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(high));
    return _mm512_cvtne2ps_pbh(b, a);  // the second operand fills the low lanes
}

struct Int8 {
    const uint16_t* x;    // (T, K) bf16
    int K;
    const int8_t* codes;  // [N/64][K/2][64][2]
    Out out;

    const int8_t* tile_codes(int tile) const { return codes + static_cast<int64_t>(tile) * ROWS * K; }
    const uint8_t* codes_at(int tile, int kb) const {
        return reinterpret_cast<const uint8_t*>(tile_codes(tile) + static_cast<int64_t>(kb) * ROWS);
    }
    int block_bytes(int pairs) const { return pairs * PAIR_BYTES; }

    void widen(int tile, int kb, int pairs, uint16_t* w) const {
        const int8_t* line = tile_codes(tile) + static_cast<int64_t>(kb) * ROWS;
        for (int i = 0; i < pairs * V; ++i, line += 32)
            _mm512_store_si512(w + i * 32, reinterpret_cast<__m512i>(widen32(line)));
    }

    void many(int tile, int tok, int count, Scratch& s) const { many_tokens(*this, tile, tok, count, s); }

    // Up to DIRECT_TOKENS tokens of one tile, the codes widened as they stream in.
    template <int TT>
    void few(int tile) const {
        __m512 acc[V][TT];
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_setzero_ps();
        const int8_t* line = tile_codes(tile);
        for (int k = 0; k < K; k += 2, line += PAIR_BYTES) {
            _mm_prefetch(reinterpret_cast<const char*>(line) + PREFETCH, _MM_HINT_T0);
            __m512bh xv[TT];
            for (int t = 0; t < TT; ++t) xv[t] = pair(x + static_cast<int64_t>(t) * K, k);
            for (int v = 0; v < V; ++v) {
                const __m512bh w = widen32(line + v * 32);
                for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], w, xv[t]);
            }
        }
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT; ++t) out.store(tile, v, t, acc[v][t]);
    }
};

}  // namespace

extern "C" {

// N a multiple of 64, K even; codes in the tiled layout above; bias may be null.
void dynaspec_int8bf16_matmul(const uint16_t* x, int T, int K, const int8_t* codes,
                              const float* scale, const float* bias, int N, void* y,
                              int threads, int bf16) {
    run(Int8{x, K, codes, Out{scale, bias, N, y, bf16 != 0}}, T, threads);
}

}  // extern "C"
