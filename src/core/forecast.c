/* sip — Holt's linear trend (see forecast.h). */
#include "core/forecast.h"

void sip__holt_init(sip__holt_t *h, double alpha, double beta) {
  h->alpha = alpha;
  h->beta = beta;
  h->level = h->trend = 0;
  h->n = 0;
}

void sip__holt_add(sip__holt_t *h, double x) {
  if (h->n == 0) {
    h->level = x;
    h->trend = 0;
  } else if (h->n == 1) {
    /* The second point sets the first trend, then smooths as any other. */
    h->trend = x - h->level;
    h->level = x;
  } else {
    double prev = h->level;
    h->level = h->alpha * x + (1 - h->alpha) * (h->level + h->trend);
    h->trend = h->beta * (h->level - prev) + (1 - h->beta) * h->trend;
  }
  h->n++;
}

double sip__holt_forecast(const sip__holt_t *h, double steps) {
  if (!h->n) return 0;
  double f = h->level + steps * h->trend;
  return f > 0 ? f : 0;
}

double sip__holt_fit_forecast(double alpha, double beta, const double *x, size_t n, double steps) {
  sip__holt_t h;
  sip__holt_init(&h, alpha, beta);
  for (size_t i = 0; i < n; i++) sip__holt_add(&h, x[i]);
  return sip__holt_forecast(&h, steps);
}
