//go:build cgo && amd64

// AVX2 versions of the built-in workload's reference loops
// (internal/workload/mnist/kernels.go). Each computes every element
// with the float32 operations of the Go code, in its order, and the build
// forbids contracting a*b+c into a fused multiply-add (-std=c11 in
// kernels_avx2.go: GCC's ISO modes do not contract), so the results are bit-identical to the Go loops as the
// Go compiler builds them for amd64 below GOAMD64=v3 (the default).

#include <immintrin.h>
#include <stdint.h>

#include "kernels_avx2.h"

#define AVX2 __attribute__((target("avx2")))

// max(v, 0) as Go defines it: NaN stays NaN, -0 becomes +0.
AVX2 static inline __m256 relu8(__m256 z) {
	__m256 r = _mm256_max_ps(z, _mm256_setzero_ps()); // NaN or ±0 -> +0
	return _mm256_blendv_ps(r, z, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
}

static inline float relu1(float v) { return v != v ? v : (v > 0 ? v : 0.0f); }

// splitmix64's mixer (rand.go), on four lanes.
AVX2 static inline __m256i mul64(__m256i a, uint64_t c) {
	__m256i lo = _mm256_set1_epi64x(c & 0xffffffffu), hi = _mm256_set1_epi64x(c >> 32);
	__m256i ll = _mm256_mul_epu32(a, lo);
	__m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), lo), _mm256_mul_epu32(a, hi));
	return _mm256_add_epi64(ll, _mm256_slli_epi64(cross, 32));
}

AVX2 static inline __m256i mix4(__m256i z) {
	z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ull);
	z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94d049bb133111ebull);
	return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

static inline uint64_t mix1(uint64_t z) {
	z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ z >> 27) * 0x94d049bb133111ebull;
	return z ^ z >> 31;
}

#define GOLDEN 0x9e3779b97f4a7c15ull

// The uniform float32 of draws a (lanes 0-3) and b (lanes 4-7): the top 24
// bits of each, as an exact float, times 2^-24.
AVX2 static inline __m256 uniform8(__m256i a, __m256i b) {
	const __m256i low = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
	a = _mm256_permutevar8x32_epi32(_mm256_srli_epi64(a, 40), low);
	b = _mm256_permutevar8x32_epi32(_mm256_srli_epi64(b, 40), low);
	__m256i k = _mm256_permute2x128_si256(a, b, 0x20);
	return _mm256_mul_ps(_mm256_cvtepi32_ps(k), _mm256_set1_ps(1.0f / 16777216.0f));
}

AVX2 void hdet_relu_dropout(float *z, float *mask, int64_t n, uint64_t state, float p, float scale) {
	int64_t i = 0;
	if (!(p > 0)) {
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(z + i, relu8(_mm256_loadu_ps(z + i)));
		for (; i < n; i++)
			z[i] = relu1(z[i]);
		return;
	}
	// Draw i uses the stream's state after i+1 steps: state + (i+1)*GOLDEN.
	__m256i sa = _mm256_add_epi64(_mm256_set1_epi64x(state), _mm256_setr_epi64x(GOLDEN, 2 * GOLDEN, 3 * GOLDEN, 4 * GOLDEN));
	__m256i sb = _mm256_add_epi64(sa, _mm256_set1_epi64x(4 * GOLDEN));
	const __m256i step = _mm256_set1_epi64x(8 * GOLDEN);
	const __m256 pv = _mm256_set1_ps(p), sv = _mm256_set1_ps(scale);
	for (; i + 8 <= n; i += 8) {
		__m256 u = uniform8(mix4(sa), mix4(sb));
		__m256 m = _mm256_andnot_ps(_mm256_cmp_ps(u, pv, _CMP_LT_OQ), sv);
		_mm256_storeu_ps(mask + i, m);
		_mm256_storeu_ps(z + i, _mm256_mul_ps(relu8(_mm256_loadu_ps(z + i)), m));
		sa = _mm256_add_epi64(sa, step);
		sb = _mm256_add_epi64(sb, step);
	}
	for (; i < n; i++) {
		float u = (float)(mix1(state + (uint64_t)(i + 1) * GOLDEN) >> 40) * (1.0f / 16777216.0f);
		float m = u < p ? 0.0f : scale;
		mask[i] = m;
		z[i] = relu1(z[i]) * m;
	}
}

AVX2 void hdet_back_mask(float *prev, const float *act, const float *mask, int64_t n) {
	int64_t i = 0;
	const __m256 zero = _mm256_setzero_ps();
	for (; i + 8 <= n; i += 8) {
		__m256 pass = _mm256_cmp_ps(_mm256_loadu_ps(act + i), zero, _CMP_GT_OQ);
		__m256 d = _mm256_loadu_ps(prev + i);
		if (mask)
			d = _mm256_mul_ps(d, _mm256_loadu_ps(mask + i));
		_mm256_storeu_ps(prev + i, _mm256_and_ps(pass, d));
	}
	for (; i < n; i++)
		prev[i] = act[i] > 0 ? (mask ? prev[i] * mask[i] : prev[i]) : 0.0f;
}

AVX2 void hdet_bias_grad(float *gb, const float *delta, int64_t cols, int64_t rows) {
	int64_t k = 0;
	for (; k + 8 <= cols; k += 8) {
		__m256 s = _mm256_setzero_ps();
		for (int64_t r = 0; r < rows; r++)
			s = _mm256_add_ps(s, _mm256_loadu_ps(delta + r * cols + k));
		_mm256_storeu_ps(gb + k, s);
	}
	for (; k < cols; k++) {
		float s = 0;
		for (int64_t r = 0; r < rows; r++)
			s += delta[r * cols + k];
		gb[k] = s;
	}
}

AVX2 void hdet_average(float *avg, const float *p, int64_t n, float k) {
	const __m256 kv = _mm256_set1_ps(k);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 a = _mm256_loadu_ps(avg + i);
		_mm256_storeu_ps(avg + i, _mm256_add_ps(a, _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(p + i), a), kv)));
	}
	for (; i < n; i++)
		avg[i] = avg[i] + (p[i] - avg[i]) / k;
}

// flushTiny of kernels.go: +0 for a subnormal or ±0, as the comparisons
// x > -2^-126 and x < 2^-126 (false for NaN) decide.
AVX2 static inline __m256 flush_tiny8(__m256 x) {
	const __m256 lim = _mm256_set1_ps(0x1p-126f), nlim = _mm256_set1_ps(-0x1p-126f);
	__m256 tiny = _mm256_and_ps(_mm256_cmp_ps(x, nlim, _CMP_GT_OQ), _mm256_cmp_ps(x, lim, _CMP_LT_OQ));
	return _mm256_andnot_ps(tiny, x);
}

static inline float flush_tiny1(float x) { return (x > -0x1p-126f && x < 0x1p-126f) ? 0.0f : x; }

AVX2 void hdet_adamw(float *p, const float *g, float *m, float *v, int64_t n, const hdet_adamw_consts *c) {
	const __m256 b1 = _mm256_set1_ps(c->b1), nb1 = _mm256_set1_ps(1 - c->b1);
	const __m256 b2 = _mm256_set1_ps(c->b2), nb2 = _mm256_set1_ps(1 - c->b2);
	const __m256 keep = _mm256_set1_ps(c->keep), step = _mm256_set1_ps(c->step);
	const __m256 isb = _mm256_set1_ps(c->inv_sqrt_bc2), eps = _mm256_set1_ps(c->eps);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 gi = _mm256_loadu_ps(g + i);
		__m256 mi = flush_tiny8(_mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(nb1, gi)));
		__m256 vi = flush_tiny8(_mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(nb2, gi), gi)));
		_mm256_storeu_ps(m + i, mi);
		_mm256_storeu_ps(v + i, vi);
		__m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), isb), eps);
		__m256 pi = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), keep), _mm256_div_ps(_mm256_mul_ps(step, mi), den));
		_mm256_storeu_ps(p + i, pi);
	}
	for (; i < n; i++) {
		float gi = g[i];
		float mi = flush_tiny1(c->b1 * m[i] + (1 - c->b1) * gi);
		float vi = flush_tiny1(c->b2 * v[i] + (1 - c->b2) * gi * gi);
		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * c->keep - c->step * mi / (_mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(vi))) * c->inv_sqrt_bc2 + c->eps);
	}
}

AVX2 void hdet_sgd(float *p, const float *g, float *buf, int64_t n, float mu, float lr, float wd) {
	const __m256 muv = _mm256_set1_ps(mu), lrv = _mm256_set1_ps(lr), wdv = _mm256_set1_ps(wd);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 pi = _mm256_loadu_ps(p + i);
		__m256 b = flush_tiny8(_mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(muv, _mm256_loadu_ps(buf + i)), _mm256_loadu_ps(g + i)), _mm256_mul_ps(wdv, pi)));
		_mm256_storeu_ps(buf + i, b);
		_mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lrv, b)));
	}
	for (; i < n; i++) {
		float b = flush_tiny1(mu * buf[i] + g[i] + wd * p[i]);
		buf[i] = b;
		p[i] -= lr * b;
	}
}
