/* What an operator watches: GET /metrics (Prometheus text, see metrics.h),
 * GET /api/health (200 or 503, for probes and load balancers), and a
 * kernel's sandbox's CPU, memory and disk use (GET /api/kernels/{id}/metrics,
 * from kernels/usage.h). */
#ifndef GLOVEBOX_MONITOR_H
#define GLOVEBOX_MONITOR_H

#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* GET /metrics. */
void monitor_metrics(struct http_request *r);
/* GET /api/health: with or without the token; only the token shows more
 * than each check's name and whether it passes. */
void monitor_health(struct http_request *r);
/* GET /api/kernels/{id}/metrics: its sandbox's usage. */
void monitor_kernel_metrics(struct http_request *r, struct kernel *k);

#endif
