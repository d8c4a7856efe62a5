// What dynaspec's integer kernels on AVX512-VNNI share (w8a8_matmul.cpp, w4a8_matmul.cpp):
// bf16 activations quantized to int8 per token and group of GROUP columns (absmax / 127,
// round half to even: "dynamic quantization", as OpenVINO's CPU plugin does by default), the
// VPDPBUSD instruction (unsigned weight bytes x signed activation bytes, 64 multiply-adds an
// instruction), and the passes of up to TOKENS tokens over a tile of 64 output rows.
//
// Exactness: a token's codes, scale and sums depend on that token alone, and each kernel
// adds its integer group sums into float32 in a fixed order per output lane, so a row of a
// T-token product is bitwise the one-token product (tested against torch references).
#pragma once

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "bf16_tiles.h"

namespace int8_activations {

constexpr int GROUP = 128;   // activation columns sharing one scale
constexpr int SUM = 32;      // columns of each partial sum of codes (`Activations::sums`)
constexpr int TOKENS = 6;    // tokens a pass over a tile: 24 accumulators

// acc += the four products of unsigned bytes u and signed bytes s per 32-bit lane
// (VPDPBUSD). In assembly: around the intrinsic GCC 12 copies the accumulator out and back
// (two register moves an instruction in the inner loop; measured slower).
inline void dpbusd(__m512i& acc, __m512i u, __m512i s) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
}

// The same with the signed bytes a 32-bit word in memory, broadcast to every lane.
inline void dpbusd_broadcast(__m512i& acc, __m512i u, const int8_t* s) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(s)));
}

// Rows the activations are given: 1 token alone; 2 to 5 as a pass of TOKENS (measured: a
// first pass over 6 tokens costs about what one over 1 does and less than one over 2, 4 or
// 5, whose cause was not found); more as they are.
inline int padded_rows(int T) { return T == 1 || T >= TOKENS ? T : TOKENS; }

// Every token's activation codes (rows, K), scales (rows, K/GROUP) and sums of codes per
// GROUP (`corr`, times 128) and per SUM columns (`sums`). Rows past T are zeros: tokens that
// add nothing, computed and dropped. The tokens are quantized by `threads` threads once
// there are at least PARALLEL_TOKENS of them (a prompt's prefill; measured: one thread
// quantizing 300 tokens spent a third of a w4a8 prefill's time).
constexpr int PARALLEL_TOKENS = 8;

struct Activations {
    std::vector<int8_t> codes;
    std::vector<float> scale;
    std::vector<int32_t> corr;
    std::vector<int32_t> sums;

    Activations(const uint16_t* x, int T, int K, int rows, int threads = 1)
        : codes(static_cast<size_t>(rows) * K), scale(static_cast<size_t>(rows) * (K / GROUP)),
          corr(static_cast<size_t>(rows) * (K / GROUP)), sums(static_cast<size_t>(rows) * (K / SUM)) {
#pragma omp parallel for num_threads(threads) schedule(static) if (T >= PARALLEL_TOKENS)
        for (int t = 0; t < T; ++t)
            for (int g = 0; g < K / GROUP; ++g) quantize(x, K, t, g);
    }

    // One token's group: absmax / 127, then x / s rounded half to even and clamped, 16
    // columns a vector; every step exact as the scalar one (IEEE division and rounding).
    void quantize(const uint16_t* x, int K, int t, int g) {
        constexpr int VECTORS = GROUP / 16;
        const uint16_t* in = x + static_cast<int64_t>(t) * K + g * GROUP;
        int8_t* out = codes.data() + static_cast<int64_t>(t) * K + g * GROUP;
        __m512 values[VECTORS];
        __m512 top = _mm512_setzero_ps();
        for (int v = 0; v < VECTORS; ++v) {
            values[v] = bf16_tiles::from_bf16(in + 16 * v);
            top = _mm512_max_ps(top, _mm512_abs_ps(values[v]));
        }
        const float s = _mm512_reduce_max_ps(top) / 127.0f;
        const __m512 divisor = _mm512_set1_ps(s);
        const __m512 low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
        __m512i q[VECTORS];
        for (int v = 0; v < VECTORS; ++v) {
            __m512 r = _mm512_roundscale_ps(_mm512_div_ps(values[v], divisor),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = s > 0.0f ? _mm512_min_ps(_mm512_max_ps(r, low), high) : _mm512_setzero_ps();
            q[v] = _mm512_cvtps_epi32(r);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * v), _mm512_cvtepi32_epi8(q[v]));
        }
        int32_t sum = 0;
        constexpr int PER_SUM = SUM / 16;  // vectors a partial sum
        for (int part = 0; part < GROUP / SUM; ++part) {
            __m512i partial = q[part * PER_SUM];
            for (int v = 1; v < PER_SUM; ++v) partial = _mm512_add_epi32(partial, q[part * PER_SUM + v]);
            const int32_t total = _mm512_reduce_add_epi32(partial);
            sums[static_cast<int64_t>(t) * (K / SUM) + g * (GROUP / SUM) + part] = total;
            sum += total;
        }
        scale[static_cast<int64_t>(t) * (K / GROUP) + g] = s;
        corr[static_cast<int64_t>(t) * (K / GROUP) + g] = 128 * sum;
    }
};

// Every token of tile i by the kernel's `tokens<TT>(i, tok)`, TOKENS a pass: the first pass
// streams the tile from memory, later ones find it in the core's second-level cache.
// `pad`: 2 to 5 tokens as a pass of TOKENS (the activations given padded_rows(T) rows).
template <class Kernel>
void passes(const Kernel& k, int i, int T, bool pad = true) {
    if (T == 1) return k.template tokens<1>(i, 0);
    int t = 0;
    for (; t + TOKENS <= T || (pad && t == 0); t += TOKENS) k.template tokens<TOKENS>(i, t);
    switch (T - t) {
        case 5: k.template tokens<5>(i, t); break;
        case 4: k.template tokens<4>(i, t); break;
        case 3: k.template tokens<3>(i, t); break;
        case 2: k.template tokens<2>(i, t); break;
        case 1: k.template tokens<1>(i, t); break;
        default: break;
    }
}

}  // namespace int8_activations
