#include <stdint.h>

typedef struct {
	float b1, b2, keep, step, inv_sqrt_bc2, eps;
} hdet_adamw_consts;

void hdet_relu_dropout(float *z, float *mask, int64_t n, uint64_t state, float p, float scale);
void hdet_back_mask(float *prev, const float *act, const float *mask, int64_t n);
void hdet_bias_grad(float *gb, const float *delta, int64_t cols, int64_t rows);
void hdet_average(float *avg, const float *p, int64_t n, float k);
void hdet_adamw(float *p, const float *g, float *m, float *v, int64_t n, const hdet_adamw_consts *c);
void hdet_sgd(float *p, const float *g, float *buf, int64_t n, float mu, float lr, float wd);
