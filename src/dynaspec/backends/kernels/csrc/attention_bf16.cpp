// Grouped-query attention of a few query tokens over the static decoder's bf16 key/value
// caches, in one pass: decoder.grouped_attention's arithmetic without its dozen torch calls a
// layer and oneDNN's bf16 batched matmul, which costs ~85 us for one query over 256 slots
// here (an fp32 one ~16 us) although it reads 130 KB.
//
// Per row b, key/value head h and query token i (one job; the jobs split over the threads),
// for each of the `groups` query heads sharing head h:
//   score_j = bf16(q . k_j) * scaling          (q . k_j summed in float32, rounded to bf16
//                                               as torch's bf16 matmul writes it)
//   p_j     = bf16(softmax_j(score))           (float32; slots the mask hides: p_j = 0)
//   out     = bf16(sum_j p_j v_j)              (float32 sums)
// as grouped_attention computes, but for the order of the float32 sums (and expf), so the
// results agree with it to within a rounding of the bf16 output. A query's result depends
// on its own query, mask row and cache only: the same in any batch and block. A query that
// may attend to no slot gets NaN, as torch's softmax over only -inf gives.
//
// Layouts: q (B, heads, n, d) and the caches (B, kv_heads, L, d) bf16, contiguous; mask
// (B, n, A) bytes (0: hidden), A <= L; out (B, n, heads, d) bf16: the merged heads of each
// token, what o_proj takes. d a multiple of 16, heads / kv_heads at most MAX_GROUPS
// (AttentionKernel.supports).
//
// Built at first use by dynaspec/backends/kernels/build.py (-O3 -mavx512f -fopenmp), linked to
// torch's own OpenMP runtime.
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "bf16_tiles.h"

namespace {

using bf16_tiles::from_bf16;

constexpr int MAX_GROUPS = 16;

inline float bf16_float(uint16_t h) {
    uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t float_bf16(float f) {  // round to nearest even, as torch's .to(bfloat16)
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

inline float round_bf16(float f) { return bf16_float(float_bf16(f)); }

struct Shape {
    int n, d, heads, kv_heads, groups, L, A;
    float scaling;
    int stride() const { return (A + 15) / 16 * 16; }  // a head's scores, -inf padded
};

// Scores of the group's queries (float32, (groups, d)) over the slots: p (groups, stride),
// -inf where hidden and past A.
void scores(const float* queries, const uint16_t* keys, const uint8_t* mask, const Shape& s,
            float* p) {
    const int chunks = s.d / 16, stride = s.stride();
    for (int j = 0; j < stride; ++j) {
        if (j >= s.A || !mask[j]) {
            for (int g = 0; g < s.groups; ++g) p[g * stride + j] = -INFINITY;
            continue;
        }
        __m512 sums[MAX_GROUPS];
        for (int g = 0; g < s.groups; ++g) sums[g] = _mm512_setzero_ps();
        const uint16_t* key = keys + static_cast<size_t>(j) * s.d;
        for (int c = 0; c < chunks; ++c) {
            __m512 k = from_bf16(key + 16 * c);
            for (int g = 0; g < s.groups; ++g)
                sums[g] = _mm512_fmadd_ps(_mm512_loadu_ps(queries + g * s.d + 16 * c), k, sums[g]);
        }
        for (int g = 0; g < s.groups; ++g)
            p[g * stride + j] = round_bf16(_mm512_reduce_add_ps(sums[g])) * s.scaling;
    }
}

// e^x for x <= 0 (16 lanes; -inf gives 0): x = k ln 2 + r, |r| <= ln 2 / 2, e^r by the
// degree-7 Taylor polynomial (relative error < 2e-7 on that range, below a float32 rounding
// of the result's bf16 rounding), scaled by 2^k.
inline __m512 exp_nonpositive(__m512 x) {
    const __m512 hidden = _mm512_set1_ps(-INFINITY);
    const __mmask16 finite = _mm512_cmp_ps_mask(x, hidden, _CMP_NEQ_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // e^-104 is 0 in float32
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // k ln 2 in two parts (355/512 and the rest), the first product exact
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.0f / 5040);
    const float inverse_factorials[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f,
                                        1.0f};
    for (float c : inverse_factorials) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(c));
    return _mm512_maskz_scalef_ps(finite, y, k);
}

// Round 16 finite floats to bf16 (nearest even) and back to float32: bf16_tiles::to_bf16's
// rounding without its NaN case and its narrowing, for the softmax's finite probabilities.
inline __m512 round_bf16(__m512 x) {
    __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    bits = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(0xffff0000)));
}

// Softmax of one query head's scores in place (A padded to whole vectors with -inf), each
// probability rounded to bf16; false when every slot is hidden.
bool softmax(float* row, int A) {
    __m512 top = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < A; j += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(row + j));
    const float most = _mm512_reduce_max_ps(top);
    if (most == -INFINITY) return false;
    __m512 total = _mm512_setzero_ps();
    for (int j = 0; j < A; j += 16) {
        __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + j), _mm512_set1_ps(most)));
        _mm512_storeu_ps(row + j, e);
        total = _mm512_add_ps(total, e);
    }
    const __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
    for (int j = 0; j < A; j += 16)
        _mm512_storeu_ps(row + j, round_bf16(_mm512_mul_ps(_mm512_loadu_ps(row + j), inverse)));
    return true;
}

// One job: row b, key/value head h, query token i.
void attend_one(const uint16_t* q, const uint16_t* kc, const uint16_t* vc, const uint8_t* mask,
                uint16_t* out, const Shape& s, int b, int h, int i, float* queries, float* p,
                float* acc) {
    const int chunks = s.d / 16, stride = s.stride();
    const size_t cache = (static_cast<size_t>(b) * s.kv_heads + h) * s.L * s.d;
    for (int g = 0; g < s.groups; ++g) {
        const int head = h * s.groups + g;
        const uint16_t* query = q + ((static_cast<size_t>(b) * s.heads + head) * s.n + i) * s.d;
        for (int c = 0; c < chunks; ++c)
            _mm512_storeu_ps(queries + g * s.d + 16 * c, from_bf16(query + 16 * c));
    }
    const uint8_t* visible = mask + (static_cast<size_t>(b) * s.n + i) * s.A;
    scores(queries, kc + cache, visible, s, p);
    bool any = true;
    for (int g = 0; g < s.groups; ++g) any = softmax(p + g * stride, stride) && any;
    for (int e = 0; e < s.groups * s.d; ++e) acc[e] = 0.0f;
    for (int j = 0; any && j < s.A; ++j) {
        if (!visible[j]) continue;
        const uint16_t* value = vc + cache + static_cast<size_t>(j) * s.d;
        for (int c = 0; c < chunks; ++c) {
            __m512 v = from_bf16(value + 16 * c);
            for (int g = 0; g < s.groups; ++g) {
                float* into = acc + g * s.d + 16 * c;
                __m512 w = _mm512_set1_ps(p[g * stride + j]);
                _mm512_storeu_ps(into, _mm512_fmadd_ps(w, v, _mm512_loadu_ps(into)));
            }
        }
    }
    uint16_t* token = out + (static_cast<size_t>(b) * s.n + i) * s.heads * s.d;
    for (int g = 0; g < s.groups; ++g) {
        uint16_t* head = token + static_cast<size_t>(h * s.groups + g) * s.d;
        for (int c = 0; c < chunks; ++c) {
            const __m512 sum = any ? _mm512_loadu_ps(acc + g * s.d + 16 * c) : _mm512_set1_ps(NAN);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(head + 16 * c), bf16_tiles::to_bf16(sum));
        }
    }
}

}  // namespace

extern "C" void dynaspec_attention_bf16(const uint16_t* q, int B, int heads, int n, int d,
                                       const uint16_t* kc, const uint16_t* vc, int kv_heads,
                                       int L, int A, const uint8_t* mask, float scaling,
                                       uint16_t* out, int threads) {
    if (d % 16 || kv_heads <= 0 || heads % kv_heads || heads / kv_heads > MAX_GROUPS || A > L)
        return;  // AttentionKernel.supports() refuses these first
    const Shape s{n, d, heads, kv_heads, heads / kv_heads, L, A, scaling};
    const int jobs = B * kv_heads * n;
#pragma omp parallel num_threads(threads)
    {
        // a thread's scratch, kept between calls
        thread_local std::vector<float> queries, p, acc;
        queries.resize(s.groups * d);
        p.resize(static_cast<size_t>(s.groups) * s.stride());
        acc.resize(s.groups * d);
#pragma omp for schedule(static)
        for (int job = 0; job < jobs; ++job) {
            const int i = job % n, h = (job / n) % kv_heads, b = job / (n * kv_heads);
            attend_one(q, kc, vc, mask, out, s, b, h, i, queries.data(), p.data(), acc.data());
        }
    }
}
