// y = dq(x) @ q.T * scale + bias for bf16 activations x (T, K) and int8 weights q (N, K):
// the activations are quantized here to int8 per token and group of GROUP columns
// (absmax / 127, "dynamic quantization", as OpenVINO's CPU plugin does by default), and the
// products run in integers with VPDPBUSD (AVX512-VNNI); y float32, or bf16
// (bf16_tiles.h's Out).
//
// Why: the bf16 int8 kernel (int8bf16_matmul.cpp) widens each code to bf16 and multiplies
// with VDPBF16PS, 32 multiply-adds an instruction; past 5 tokens it is bound by that
// arithmetic, so a verification of 8 tokens cost about 2 single steps. VPDPBUSD does 64
// multiply-adds an instruction on the codes as they are (no widening).
//
// Layout: [N/64][K/4][64 rows][4 codes] as unsigned bytes q + 128 (VPDPBUSD multiplies
// unsigned bytes by signed ones): one column quad of 16 rows is one 512-bit vector, lane i
// row i, and a token's quad of activation codes is broadcast to every lane. Per group g of
// token t: acc = sum (q + 128) a = sum q a + 128 sum a, so the group's integer dot product
// is acc - corr[t][g] with corr = 128 * sum a, a scalar per token and group.
//
// Exactness: a token's codes, scales and corrections depend on that token alone; each
// output (row, token) is one lane: exact integer sums per group, then float32 adds of
// float(sum) * s[t][g] in group order (separate multiply and add, no fused ones:
// -ffp-contract=off), whatever T and the blocking are. So a row of a T-token product is
// bitwise the one-token product, and W8a8Kernel.reference computes the same bits.
//
// Passes of 6 tokens (2 to 5 padded with zero tokens) as int8_activations.h says. Built at
// first use by dynaspec/backends/kernels/build.py (-O3 -mavx512f -mavx512bw -mavx512vnni
// -fopenmp), linked to torch's own OpenMP runtime.
#include "bf16_tiles.h"
#include "int8_activations.h"

namespace {

using bf16_tiles::Out;
using bf16_tiles::ROWS;
using bf16_tiles::V;
using namespace int8_activations;

constexpr int QUADS = GROUP / 4;       // column quads an activation group
constexpr int PREFETCH = 1024;         // bytes ahead in a tile's stream

struct W8A8 {
    const Activations& a;
    int K;
    const uint8_t* codes;  // [N/64][K/4][64][4], q + 128
    Out out;
    int T;                 // tokens stored (a pass may compute more: zeros)

    // Tokens tok .. tok+TT-1 of one tile (V vectors of 16 rows).
    template <int TT>
    void tokens(int tile, int tok) const {
        const int groups = K / GROUP;
        const uint8_t* line = codes + static_cast<int64_t>(tile) * ROWS * K ;
        alignas(64) float total[V][TT][16] = {};  // in memory: the registers hold acc
        for (int g = 0; g < groups; ++g) {
            __m512i acc[V][TT];
            for (int v = 0; v < V; ++v)
                for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_setzero_si512();
            const int8_t* xq = a.codes.data() + static_cast<int64_t>(tok) * K + g * GROUP;
            for (int q = 0; q < QUADS; ++q, line += ROWS * 4) {
                for (int b = 0; b < V * 64; b += 64)  // this pass's lines of the quad, ahead
                    _mm_prefetch(reinterpret_cast<const char*>(line) + PREFETCH + b, _MM_HINT_T0);
                __m512i w[V];
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) w[v] = _mm512_load_si512(line + v * 64);
#pragma GCC unroll 6
                for (int t = 0; t < TT; ++t) {  // a token's quad of codes, in every lane
                    int32_t quad;
                    memcpy(&quad, xq + static_cast<int64_t>(t) * K + 4 * q, sizeof quad);
                    const __m512i xv = _mm512_set1_epi32(quad);
#pragma GCC unroll 4
                    for (int v = 0; v < V; ++v) dpbusd(acc[v][t], w[v], xv);
                }
            }
            for (int t = 0; t < TT; ++t) {
                const int at = (tok + t) * groups + g;
                const __m512i corr = _mm512_set1_epi32(a.corr[at]);
                const __m512 s = _mm512_set1_ps(a.scale[at]);
                for (int v = 0; v < V; ++v) {
                    const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[v][t], corr));
                    const __m512 sum = _mm512_add_ps(_mm512_load_ps(total[v][t]), _mm512_mul_ps(dot, s));
                    _mm512_store_ps(total[v][t], sum);
                }
            }
        }
        for (int v = 0; v < V; ++v)
            for (int t = 0; t < TT && tok + t < T; ++t)
                out.store(tile, v, tok + t, _mm512_load_ps(total[v][t]));
    }
};

}  // namespace

extern "C" {

// N a multiple of 64, K a multiple of GROUP; codes in the tiled layout above; bias may be null.
void dynaspec_w8a8_matmul(const uint16_t* x, int T, int K, const uint8_t* codes,
                          const float* scale, const float* bias, int N, void* y, int threads,
                          int bf16) {
    const Activations a(x, T, K, padded_rows(T), threads);
    const W8A8 kernel{a, K, codes, Out{scale, bias, N, y, bf16 != 0}, T};
    const int tiles = N / ROWS;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < tiles; ++i) passes(kernel, i, T);
}

}  // extern "C"
