// y = dq(x) @ q.T * scale + bias for bf16 activations x (T, K) and int8 weights q (N, K):
// the activations are quantized here to int8 per token and group of GROUP columns
// (absmax / 127, "dynamic quantization", as OpenVINO's CPU plugin does by default), and the
// products run in integers with VPDPBUSD (AVX512-VNNI); y float32.
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
// bitwise the one-token product, and w8a8_kernel.reference computes the same bits.
//
// Built at first use by dynaspec/backends/kernel_build.py (-O3 -mavx512f -mavx512bw
// -mavx512vnni -fopenmp), linked to torch's own OpenMP runtime.
#include "bf16_tiles.h"

#include <math.h>

#include <vector>

namespace {

using bf16_tiles::Out;
using bf16_tiles::ROWS;
using bf16_tiles::V;

constexpr int GROUP = 128;             // activation columns sharing one scale
constexpr int QUADS = GROUP / 4;       // column quads a group
constexpr int TOKENS = 6;              // tokens a pass over a tile: 24 accumulators
constexpr int PREFETCH = 1024;         // bytes ahead in a tile's stream

// acc += the four products of unsigned bytes u and signed bytes s per 32-bit lane
// (VPDPBUSD). In assembly: around the intrinsic GCC 12 copies the accumulator out and back
// (two register moves an instruction in the inner loop; measured slower).
inline void dpbusd(__m512i& acc, __m512i u, __m512i s) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
}

inline float bf16_to_float(uint16_t v) {
    const uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// The activations of every token as int8 codes (T, K), scales and corrections (T, K/GROUP).
struct Activations {
    std::vector<int8_t> codes;
    std::vector<float> scale;
    std::vector<int32_t> corr;

    // Rows past T (up to `rows`) are zeros: tokens that add nothing, computed and dropped.
    Activations(const uint16_t* x, int T, int K, int rows) : codes(static_cast<size_t>(rows) * K),
        scale(static_cast<size_t>(rows) * (K / GROUP)), corr(static_cast<size_t>(rows) * (K / GROUP)) {
        const int groups = K / GROUP;
        for (int t = 0; t < T; ++t)
            for (int g = 0; g < groups; ++g) quantize(x, K, t, g, groups);
    }

    void quantize(const uint16_t* x, int K, int t, int g, int groups) {
        const uint16_t* in = x + static_cast<int64_t>(t) * K + g * GROUP;
        int8_t* out = codes.data() + static_cast<int64_t>(t) * K + g * GROUP;
        float top = 0.0f;
        for (int k = 0; k < GROUP; ++k) top = fmaxf(top, fabsf(bf16_to_float(in[k])));
        const float s = top / 127.0f;
        int32_t sum = 0;
        for (int k = 0; k < GROUP; ++k) {
            const float q = s > 0.0f ? nearbyintf(bf16_to_float(in[k]) / s) : 0.0f;
            out[k] = static_cast<int8_t>(fminf(fmaxf(q, -127.0f), 127.0f));
            sum += out[k];
        }
        scale[t * groups + g] = s;
        corr[t * groups + g] = 128 * sum;
    }
};

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

    // Every token of one tile, TOKENS a pass: the first pass streams the tile from memory,
    // later ones find it in the core's second-level cache (64 rows x K bytes). Measured, a
    // first pass over 6 tokens costs about what one over 1 does and less than one over 2, 4
    // or 5, so 2 to 5 tokens run as 6, the others zeros (computed and dropped).
    void tile(int i) const {
        if (T == 1) return tokens<1>(i, 0);
        int t = 0;
        for (; t + TOKENS <= T || t == 0; t += TOKENS) tokens<TOKENS>(i, t);
        switch (T - t) {
            case 5: tokens<5>(i, t); break;
            case 4: tokens<4>(i, t); break;
            case 3: tokens<3>(i, t); break;
            case 2: tokens<2>(i, t); break;
            case 1: tokens<1>(i, t); break;
            default: break;
        }
    }
};

}  // namespace

extern "C" {

// N a multiple of 64, K a multiple of GROUP; codes in the tiled layout above; bias may be null.
void dynaspec_w8a8_matmul(const uint16_t* x, int T, int K, const uint8_t* codes,
                          const float* scale, const float* bias, int N, float* y, int threads) {
    const int rows = T == 1 || T >= TOKENS ? T : TOKENS;
    const Activations a(x, T, K, rows);
    const W8A8 kernel{a, K, codes, Out{scale, bias, N, y}, T};
    const int tiles = N / ROWS;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < tiles; ++i) kernel.tile(i);
}

}  // extern "C"
