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
/* A Python expression (copied; NULL for none) that the pool's Python
 * kernels evaluate as they are warmed, after "pass", where their
 * kernelspec has no pre-import of its own: work an API family would
 * otherwise do in each kernel it takes (the E2B display extension's
 * compiling). Before pool_init, or kernels warmed already go without.
 * 0 or -ENOMEM. */
int pool_set_python_warmup(const char *expression);
/* Stops refilling (the gateway is shutting down). */
void pool_stop(void);
/* Frees the pool's state, after every kernel is gone. */
void pool_free(void);

/* A warm kernel of spec, now the caller's, or NULL (no pool for spec, or
 * none ready). The pool refills behind it. */
struct kernel *pool_take(const struct jp_kernelspec *spec);

/* The least memory and processes a request's own limits may ask of a
 * pooled kernel: a warm kernel already holds some (a zygote's, about
 * 20 MiB and 10 threads); below these a request gets a kernel of its own. */
#define POOL_MIN_MEMORY_MB 256
#define POOL_MIN_PIDS      64

/* The same for a request with its own environment and limits, when a
 * pooled kernel can take them: own (the request's "env" object; NULL or
 * empty: none) is set in the running kernel (Python kernels only, and no
 * variable read only at a start: jp_env_read_at_start), env (the
 * kernelspec's and own, as "NAME=value") is what its restarts get, and
 * limits go to its sandbox's cgroup (the same disk size, at least
 * POOL_MIN_MEMORY_MB and POOL_MIN_PIDS). Waiters (kernel_when_ready) hear
 * that it is ready once all of that holds. NULL: none fits or is ready. */
struct kernel *pool_take_for(const struct jp_kernelspec *spec, json_t *own, char *const *env,
                             const struct hostmsg_limits *limits);

/* {"memory_available_mb", "paused", "kernelspecs": {NAME: {"target",
 * "ready", "starting", "taken", "failed"}}} */
json_t *pool_status(void);

#endif
