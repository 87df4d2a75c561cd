/* The warm pool: for each kernelspec named by --pool NAME=N, N kernels
 * started ahead of time, each in its own sandbox with the default limits,
 * warmed by the kernelspec's pre-import code and invisible until a start
 * request takes one. A pooled kernel serves exactly one client: taken once,
 * never given back; the pool starts another in its place. The pool pauses
 * and shrinks while the machine is short of memory. */
#ifndef GLOVEBOX_POOL_H
#define GLOVEBOX_POOL_H

#include "gateway/core/config.h"
#include "gateway/kernels/kernels.h"

#include <jansson.h>

/* Parses --pool and --pool-preimport against the kernelspecs and starts
 * filling. 0, or -EINVAL after logging what is wrong. */
int pool_init(const struct config *cfg, const struct jp_kernelspec_list *specs);
/* Stops refilling (the gateway is shutting down). */
void pool_stop(void);
/* Frees the pool's state, after every kernel is gone. */
void pool_free(void);

/* A warm kernel of spec, now the caller's, or NULL (no pool for spec, or
 * none ready). The pool refills behind it. */
struct kernel *pool_take(const struct jp_kernelspec *spec);

/* {"memory_available_mb", "paused", "kernelspecs": {NAME: {"target",
 * "ready", "starting", "taken", "failed"}}} */
json_t *pool_status(void);

#endif
