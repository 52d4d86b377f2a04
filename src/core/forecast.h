/* sip — a forecast of a rate: Holt's linear trend (double exponential
 * smoothing) over a series of per-second observations.
 *
 * level_0 = x_0, trend_0 = 0; level_1 = x_1, trend_1 = x_1 - x_0; for t >= 2:
 *   level_t = alpha * x_t + (1 - alpha) * (level_{t-1} + trend_{t-1})
 *   trend_t = beta * (level_t - level_{t-1}) + (1 - beta) * trend_{t-1}
 * and the forecast h steps ahead is level + h * trend, never below 0 (a
 * rate). Plain C, no state beyond the two numbers: refitting over a window
 * of n points costs n steps. */
#ifndef SIP_CORE_FORECAST_H
#define SIP_CORE_FORECAST_H

#include <stddef.h>

typedef struct sip__holt {
  double alpha, beta;  /* smoothing of the level and of the trend, each 0 < x <= 1 */
  double level, trend;
  size_t n;            /* observations seen */
} sip__holt_t;

/* Starts an empty model with these factors. */
void sip__holt_init(sip__holt_t *h, double alpha, double beta);
/* Adds the next observation. */
void sip__holt_add(sip__holt_t *h, double x);
/* level + steps * trend, at least 0; 0 before any observation. */
double sip__holt_forecast(const sip__holt_t *h, double steps);
/* Fits x[0..n) from scratch (init, then add each) and forecasts `steps`
 * ahead of the last point. */
double sip__holt_fit_forecast(double alpha, double beta, const double *x, size_t n, double steps);

#endif
