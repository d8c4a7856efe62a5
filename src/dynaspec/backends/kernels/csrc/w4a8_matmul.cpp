// y = dq(x) @ w.T + bias for bf16 activations x (T, K) and 4-bit weights w = q * s + m (a
// code q in 0..15 and float16 s, m per row and group of 32 columns: int4_codes.quantize),
// the activations quantized to int8 per token and group of 128 columns (int8_activations.h),
// the products in integers with VPDPBUSD (AVX512-VNNI); y float32, or bf16
// (bf16_tiles.h's Out).
//
// Why: the bf16 int4 kernel widens every code to bf16 and is bound by that arithmetic, so a
// step reads 0.625 bytes a weight but costs about what an int8 one does, and its
// verification of 6-8 tokens costs 1.8-2.2 steps. The codes 0..15 are unsigned bytes as
// VPDPBUSD wants them once a nibble is masked out: 64 multiply-adds an instruction.
//
// Per weight group g (32 columns) of token t and row n, with a the token's codes and
// A its activation scale for the group's 128 columns:
//   sum_k (A a_k)(q_k s + m) = A (s sum_k a_k q_k + m sum_k a_k)
// sum a q is the group's VPDPBUSD sum, sum a the token's `sums` (int8_activations.h).
//
// Layout, per tile of 64 rows and group of 32 columns, 1,280 bytes: the codes as 4 column
// quad pairs x 4 vectors of 16 rows x 64 bytes (byte 4i + c of a vector: row i, the low
// nibble column 8j + c, the high nibble column 8j + 4 + c, for quad pair j), then s for the
// 64 rows (float16), then m. The groups of a tile follow one another: one stream.
//
// Exactness: each output (row, token) is one lane: exact integer sums per group (at most 32
// x 15 x 127, exact in float32), then per group, in group order, float32 products and adds
// ((sum * s + m * sum a) * A added to the total; no fused multiply-adds: -ffp-contract=off),
// whatever T is: a row of a T-token product is bitwise the one-token product, and
// W4a8Kernel.reference computes the same bits.
//
// Built at first use by dynaspec/backends/kernels/build.py (-O3 -mavx512f -mavx512bw
// -mavx512vnni -fopenmp), linked to torch's own OpenMP runtime.
#include "bf16_tiles.h"
#include "int8_activations.h"

namespace {

using bf16_tiles::Out;
using bf16_tiles::ROWS;
using bf16_tiles::V;
using namespace int8_activations;

constexpr int WGROUP = SUM;                        // weight columns sharing s and m
constexpr int CODE_BYTES = ROWS * WGROUP / 2;      // a tile's codes of one weight group
constexpr int GROUP_BYTES = CODE_BYTES + ROWS * 4; // + s and m, float16
constexpr int PREFETCH = 1024;                     // bytes ahead in a tile's stream

struct W4A8 {
    const Activations& a;
    int K;
    const uint8_t* packed;  // [N/64][K/32][1280 bytes], as above
    Out out;
    int T;                  // tokens stored (a pass may compute more: zeros)

    // Tokens tok .. tok+TT-1 of one tile (V vectors of 16 rows).
    template <int TT>
    void tokens(int tile, int tok) const {
        const int wgroups = K / WGROUP;
        const uint8_t* line = packed + static_cast<int64_t>(tile) * wgroups * GROUP_BYTES;
        const __m512i low = _mm512_set1_epi8(0x0F);
        alignas(64) float total[V][TT][16] = {};  // in memory: the registers hold acc
        for (int g = 0; g < wgroups; ++g, line += GROUP_BYTES) {
            for (int b = 0; b < GROUP_BYTES; b += 64)
                _mm_prefetch(reinterpret_cast<const char*>(line) + PREFETCH + b, _MM_HINT_T0);
            __m512i acc[V][TT];
            for (int v = 0; v < V; ++v)
                for (int t = 0; t < TT; ++t) acc[v][t] = _mm512_setzero_si512();
            const int8_t* xq = a.codes.data() + static_cast<int64_t>(tok) * K + g * WGROUP;
            for (int j = 0; j < WGROUP / 8; ++j) {  // column quad pairs
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) {
                    const __m512i raw = _mm512_load_si512(line + (j * V + v) * 64);
                    const __m512i first = _mm512_and_si512(raw, low);
                    const __m512i second = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
#pragma GCC unroll 6
                    for (int t = 0; t < TT; ++t) {
                        const int8_t* x = xq + static_cast<int64_t>(t) * K + 8 * j;
                        dpbusd_broadcast(acc[v][t], first, x);
                        dpbusd_broadcast(acc[v][t], second, x + 4);
                    }
                }
            }
            const __m256i* s16 = reinterpret_cast<const __m256i*>(line + CODE_BYTES);
            float sum_a[TT], scale[TT];
            for (int t = 0; t < TT; ++t) {
                const int64_t row = tok + t;
                sum_a[t] = static_cast<float>(a.sums[row * wgroups + g]);
                scale[t] = a.scale[row * (K / GROUP) + g * WGROUP / GROUP];
            }
            for (int v = 0; v < V; ++v) {
                const __m512 s = _mm512_cvtph_ps(_mm256_load_si256(s16 + v));
                const __m512 m = _mm512_cvtph_ps(_mm256_load_si256(s16 + V + v));
                for (int t = 0; t < TT; ++t) {
                    const __m512 dot = _mm512_cvtepi32_ps(acc[v][t]);
                    const __m512 offset = _mm512_mul_ps(m, _mm512_set1_ps(sum_a[t]));
                    const __m512 group = _mm512_add_ps(_mm512_mul_ps(dot, s), offset);
                    const __m512 sum = _mm512_add_ps(_mm512_load_ps(total[v][t]),
                                                     _mm512_mul_ps(group, _mm512_set1_ps(scale[t])));
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

// N a multiple of 64, K a multiple of 128; `packed` in the layout above (64-byte aligned);
// bias may be null.
void dynaspec_w4a8_matmul(const uint16_t* x, int T, int K, const uint8_t* packed,
                          const float* bias, int N, void* y, int threads, int bf16) {
    const Activations a(x, T, K, T, threads);
    const W4A8 kernel{a, K, packed, Out{nullptr, bias, N, y, bf16 != 0}, T};
    const int tiles = N / ROWS;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < tiles; ++i) passes(kernel, i, T, false);
}

}  // extern "C"
