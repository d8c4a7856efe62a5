// Grouped-query attention of a few query tokens over the static decoder's bf16 key/value
// caches, in one pass: decoder.grouped_attention's arithmetic without its dozen torch calls a
// layer and oneDNN's bf16 batched matmul, which costs ~85 us for one query over 256 slots
// here (an fp32 one ~16 us) although it reads 130 KB.
//
// Per row b, key/value head h and query token i (a job is a row's key/value head and a run of
// its query tokens, whose keys and values it widens to float32 once when the run has several;
// the jobs split over the threads), for each of the `groups` query heads sharing head h:
//   score_j = bf16(q . k_j) * scaling          (q . k_j summed in float32, rounded to bf16
//                                               as torch's bf16 matmul writes it)
//   p_j     = bf16(softmax_j(score))           (float32; slots the mask hides: p_j = 0)
//   out     = bf16(sum_j p_j v_j)              (float32 sums)
// as grouped_attention computes, but for the order of the float32 sums (and expf), so the
// results agree with it to within a rounding of the bf16 output. A query's result depends
// on its own query, mask row and cache only: the same in any batch and block. A query that
// may attend to no slot gets NaN, as torch's softmax over only -inf gives. Scores are made
// 16 slots at a time and reduced by one tree that repeats _mm512_reduce_add_ps's for each, and
// a head's value sums stay in registers: the same bits as one slot at a time (2026-12-07,
// tested against the earlier build), about half the time for 8-33 queries.
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

// 16 keys' or values' lanes in float32: widened already, or from the bf16 cache (exact).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) { return from_bf16(p); }

// The 16 lane sums of 16 vectors, lane s the sum of v[s]'s lanes: each by the same tree of
// additions as _mm512_reduce_add_ps (halves of 8, then of 4, then lanes 0+2 and 1+3, then
// the two), so the bits of a sum are that of one vector's reduction, in a quarter of the
// instructions.
inline __m512 reduce16(const __m512* v) {
    __m512 half[8], quarter[4], pair[2];
    for (int i = 0; i < 8; ++i)  // lanes l + (l+8) of v[2i] and v[2i+1]
        half[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                                _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)  // then m + (m+4) of each: a 128-bit block a vector
        quarter[i] = _mm512_add_ps(_mm512_shuffle_f32x4(half[2 * i], half[2 * i + 1], 0x88),
                                   _mm512_shuffle_f32x4(half[2 * i], half[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; ++i)  // then lanes 0+2 and 1+3 of each block
        pair[i] = _mm512_add_ps(_mm512_shuffle_ps(quarter[2 * i], quarter[2 * i + 1], 0x44),
                                _mm512_shuffle_ps(quarter[2 * i], quarter[2 * i + 1], 0xEE));
    // then the two; lane 4k + m of `sums` is then vector k + 4m's sum: put vector s in lane s
    const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(pair[0], pair[1], 0x88),
                                      _mm512_shuffle_ps(pair[0], pair[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, sums);
}

// Scores of the group's queries (float32, (groups, d)) over the slots, from the keys
// (`keys`, at least (stride, d): widened to float32, zero past A, or the bf16 cache itself):
// p (groups, stride), -inf where hidden and past A. 16 slots at a time; a block with no
// visible slot is skipped.
template <class Src>
void scores(const float* queries, const Src* keys, const uint8_t* mask, const Shape& s,
            float* p) {
    const int chunks = s.d / 16, stride = s.stride();
    for (int j0 = 0; j0 < stride; j0 += 16) {
        bool seen = false;
        for (int j = j0; j < j0 + 16 && j < s.A; ++j) seen = seen || mask[j];
        if (!seen) {
            for (int g = 0; g < s.groups; ++g)
                _mm512_storeu_ps(p + g * stride + j0, _mm512_set1_ps(-INFINITY));
            continue;
        }
        const Src* block = keys + static_cast<size_t>(j0) * s.d;
        for (int g = 0; g < s.groups; ++g) {
            __m512 sums[16];
            for (int t = 0; t < 16; ++t) sums[t] = _mm512_setzero_ps();
            for (int c = 0; c < chunks; ++c) {
                const __m512 query = _mm512_loadu_ps(queries + g * s.d + 16 * c);
                for (int t = 0; t < 16; ++t)
                    sums[t] = _mm512_fmadd_ps(query, load16(block + t * s.d + 16 * c), sums[t]);
            }
            alignas(64) float row[16];
            _mm512_store_ps(row, reduce16(sums));
            for (int t = 0; t < 16; ++t) {
                const int j = j0 + t;
                const bool shown = j < s.A && mask[j];
                p[g * stride + j] = shown ? round_bf16(row[t]) * s.scaling : -INFINITY;
            }
        }
    }
}

// The first A slots of a row's key/value head widened to float32 (exact), once for all the
// queries of a job, and zeros up to `stride` slots: (stride, d) each.
void widen(const uint16_t* cache, const Shape& s, float* out) {
    const size_t count = static_cast<size_t>(s.A) * s.d;
    for (size_t e = 0; e < count; e += 16) _mm512_storeu_ps(out + e, from_bf16(cache + e));
    const size_t padded = static_cast<size_t>(s.stride()) * s.d;
    for (size_t e = count; e < padded; e += 16) _mm512_storeu_ps(out + e, _mm512_setzero_ps());
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

// Query token i of row b over key/value head h, from the head's keys and values (widened, or
// the bf16 cache: the same values).
// Per output lane the sums run as they always did: scores over the d/16 chunks then the 16
// lanes (_mm512_reduce_add_ps), values over the visible slots in slot order, one fused
// multiply-add each into an accumulator that starts at zero: so a query's result depends on
// its own query, mask row and cache alone, whatever the other queries of the call.
template <class Src>
void attend_one(const uint16_t* q, const Src* keys, const Src* values, const uint8_t* mask,
                uint16_t* out, const Shape& s, int b, int h, int i, float* queries, float* p) {
    const int chunks = s.d / 16, stride = s.stride();
    for (int g = 0; g < s.groups; ++g) {
        const int head = h * s.groups + g;
        const uint16_t* query = q + ((static_cast<size_t>(b) * s.heads + head) * s.n + i) * s.d;
        for (int c = 0; c < chunks; ++c)
            _mm512_storeu_ps(queries + g * s.d + 16 * c, from_bf16(query + 16 * c));
    }
    const uint8_t* visible = mask + (static_cast<size_t>(b) * s.n + i) * s.A;
    scores(queries, keys, visible, s, p);
    bool any = true;
    for (int g = 0; g < s.groups; ++g) any = softmax(p + g * stride, stride) && any;
    uint16_t* token = out + (static_cast<size_t>(b) * s.n + i) * s.heads * s.d;
    constexpr int CB = 8;  // chunks of the head's d whose accumulators stay in registers
    for (int g = 0; g < s.groups; ++g) {
        uint16_t* head = token + static_cast<size_t>(h * s.groups + g) * s.d;
        const float* weights = p + g * stride;
        for (int c0 = 0; c0 < chunks; c0 += CB) {
            const int cs = chunks - c0 < CB ? chunks - c0 : CB;
            __m512 acc[CB];
            for (int c = 0; c < CB; ++c) acc[c] = _mm512_setzero_ps();
            for (int j = 0; any && j < s.A; ++j) {
                if (!visible[j]) continue;
                const __m512 w = _mm512_set1_ps(weights[j]);
                const Src* value = values + static_cast<size_t>(j) * s.d + 16 * c0;
                if (cs == CB) {
                    for (int c = 0; c < CB; ++c)
                        acc[c] = _mm512_fmadd_ps(w, load16(value + 16 * c), acc[c]);
                } else {
                    for (int c = 0; c < cs; ++c)
                        acc[c] = _mm512_fmadd_ps(w, load16(value + 16 * c), acc[c]);
                }
            }
            for (int c = 0; c < cs; ++c) {
                const __m512 sum = any ? acc[c] : _mm512_set1_ps(NAN);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(head + 16 * (c0 + c)),
                                    bf16_tiles::to_bf16(sum));
            }
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
    // A job: row b, key/value head h and a run of query tokens, whose keys and values are
    // widened once; runs short enough that every thread gets work.
    const int heads_total = B * kv_heads;
    const int runs = heads_total >= threads ? 1 : (threads + heads_total - 1) / heads_total;
    const int run = (n + runs - 1) / runs;
    const int per_head = (n + run - 1) / run;
    const int jobs = heads_total * per_head;
#pragma omp parallel num_threads(threads)
    {
        // a thread's scratch, kept between calls
        thread_local std::vector<float> queries, p, keys, values;
        queries.resize(s.groups * d);
        p.resize(static_cast<size_t>(s.groups) * s.stride());
        keys.resize(static_cast<size_t>(s.stride()) * d);
        values.resize(static_cast<size_t>(s.stride()) * d);
#pragma omp for schedule(static)
        for (int job = 0; job < jobs; ++job) {
            const int part = job % per_head, bh = job / per_head;
            const int h = bh % kv_heads, b = bh / kv_heads;
            const size_t cache = (static_cast<size_t>(b) * kv_heads + h) * L * d;
            const int first = part * run, last = (part + 1) * run < n ? (part + 1) * run : n;
            if (last - first == 1 && s.stride() <= L) {  // one query: no widening pays
                attend_one(q, kc + cache, vc + cache, mask, out, s, b, h, first, queries.data(),
                           p.data());
                continue;
            }
            widen(kc + cache, s, keys.data());
            widen(vc + cache, s, values.data());
            for (int i = first; i < last; ++i)
                attend_one(q, keys.data(), values.data(), mask, out, s, b, h, i, queries.data(),
                           p.data());
        }
    }
}
