#include "autoconf.h"

#include "gateway/kernels/pool.h"
#include "gateway/kernels/run_env.h"
#include "gateway/kernels/session.h"
#include "gateway/core/loop.h"
#include "gateway/core/tenants.h"
#include "protocol/share.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_TICK_MS 1000.0
/* Refills wait this long after the last take, so that a burst of creates is
 * served before new kernels compete with it for the CPU. */
#define POOL_REFILL_DELAY_MS 300.0
/* A pooled kernel's first cell costs more than the next ones: it runs one
 * (silently: no count, no history) before it is handed out. */
#define POOL_WARMUP_CODE   "pass"
#define POOL_PARALLEL      4 /* kernels of one kernelspec starting at once */
#define POOL_MAX_PREIMPORT 65536

struct pool_entry {
        const struct jp_kernelspec *spec;
        long long target;
        char **env;      /* the kernelspec's own environment, as a request without env gets */
        char *preimport; /* code run before a kernel is handed out, or NULL */
        unsigned long long taken, failed;
        double backoff;  /* seconds to wait after a failed start, doubling */
        double retry_at; /* no new start before this (monotonic seconds) */
        struct jp_share share; /* who took how many since the pool was last full */
};

/* One pooled kernel on its way: started, then warmed. */
struct pool_start {
        struct waiter w;
        struct pool_entry *e;
        bool warming;
};

static const struct config *cfg;
static char *python_warmup; /* pool_set_python_warmup's expression, or NULL */
static struct pool_entry *entries;
static size_t nentries;
static lws_sorted_usec_list_t tick;
static bool paused; /* short of memory */
static long long available_mb = -1;
static bool stopped; /* the gateway is shutting down */

static void schedule(double ms);

#define POOL_MAX_BACKOFF 60.0

static double now_seconds(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static long long memory_available_mb(void)
{
        FILE *f = fopen("/proc/meminfo", "re");
        char line[256];
        long long kb = -1;

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
                        break;
        }
        fclose(f);
        return kb < 0 ? -1 : kb / 1024;
}

/* Full, or as full as it gets for now with nothing on its way (what
 * --max-kernels, a start that failed or a shortage of memory leave it):
 * the tenants' shares start over, so that none is held back by a pool
 * that cannot fill. */
static void reset_shares_when_settled(struct pool_entry *e)
{
        size_t warm, pooled = kernels_pooled(e->spec, &warm);

        if (pooled == warm && ((long long)warm >= e->target || now_seconds() < e->retry_at ||
                               kernels_count() >= (size_t)cfg->max_kernels || paused))
                jp_share_reset(&e->share);
}

static void on_kernel(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct pool_start *ps = lws_container_of(w, struct pool_start, w);
        struct pool_entry *e = ps->e;

        if (status == 0 && !ps->warming) {
                const char *language =
                    json_string_value(json_object_get(e->spec->spec, "language"));
                /* "pass" warms IPython's execution path; other languages get
                 * an empty cell, which each of them answers. */
                const char *code = "", *expression = NULL;

                if (e->preimport) {
                        code = e->preimport;
                } else if (language && strcmp(language, "python") == 0) {
                        code = POOL_WARMUP_CODE;
                        expression = python_warmup;
                }

                ps->warming = true;
                if (kernel_warm_up(k, code, expression, &ps->w) == 0)
                        return;
                status = 500;
                message = "cannot send the pre-import";
        }
        if (status == 0 && k->pooled) {
                k->warm = true;
                e->backoff = 0;
                if (session_ahead_open(k) < 0)
                        klog_warn(k->id, "cannot open its first session's sockets ahead");
                klog_info(k->id, "warm in the pool (%s)", e->spec->name);
                reset_shares_when_settled(e);
        } else if (status != 0 && !stopped) {
                /* A kernelspec that cannot start must not be retried in a
                 * tight loop. */
                e->failed++;
                e->backoff = e->backoff ? e->backoff * 2 : 1;
                if (e->backoff > POOL_MAX_BACKOFF)
                        e->backoff = POOL_MAX_BACKOFF;
                e->retry_at = now_seconds() + e->backoff;
                log_warn("pool %s: a kernel did not get ready: %s", e->spec->name,
                         message ? message : "?");
                if (k->pooled && k->phase != KERNEL_STOPPING)
                        kernel_shutdown(k, NULL);
        }
        free(ps);
}

static void fill(struct pool_entry *e)
{
        size_t warm, pooled = kernels_pooled(e->spec, &warm);

        if (now_seconds() < e->retry_at) {
                reset_shares_when_settled(e);
                return;
        }
        while ((long long)pooled < e->target && pooled - warm < POOL_PARALLEL &&
               kernels_count() < (size_t)cfg->max_kernels) {
                struct pool_start *ps = calloc(1, sizeof(*ps));
                struct kernel *k;
                int rc;

                if (!ps)
                        return;
                ps->e = e;
                ps->w.done = on_kernel;
                rc = kernel_start_pooled(e->spec, e->env, &ps->w, &k);
                if (rc < 0) {
                        free(ps);
                        e->failed++;
                        return;
                }
                /* (A start can fail at once: the waiter has run and freed ps.) */
                pooled++;
        }
        reset_shares_when_settled(e);
}

/* Under memory pressure the pool gives back one kernel per tick, the
 * coldest first. */
static void shrink(struct pool_entry *e)
{
        struct kernel *k = kernel_pool_spare(e->spec);

        if (k) {
                klog_info(k->id, "shut down: the pool shrinks (%lld MiB available)", available_mb);
                kernel_shutdown(k, NULL);
        }
}

static void on_tick(lws_sorted_usec_list_t *sul)
{
        (void)sul;
        available_mb = memory_available_mb();
        if (available_mb >= 0 && available_mb < cfg->pool_min_available_mb) {
                if (!paused)
                        log_warn("pool paused: %lld MiB available, under --pool-min-available-mb",
                                 available_mb);
                paused = true;
        } else if (paused) {
                log_info("pool resumed: %lld MiB available", available_mb);
                paused = false;
        }
        for (size_t i = 0; i < nentries; i++) {
                if (paused)
                        shrink(&entries[i]);
                else
                        fill(&entries[i]);
        }
        schedule(POOL_TICK_MS);
}

static void schedule(double ms)
{
        if (nentries && !stopped)
                loop_timer_start(&tick, on_tick, ms);
}

static struct pool_entry *entry_of(const struct jp_kernelspec *spec)
{
        for (size_t i = 0; i < nentries; i++) {
                if (entries[i].spec == spec)
                        return &entries[i];
        }
        return NULL;
}

/* "NAME=VALUE": the kernelspec and the value. */
static int split(const char *flag, const char *item, const struct jp_kernelspec_list *specs,
                 const struct jp_kernelspec **spec, const char **value)
{
        const char *eq = strchr(item, '=');
        char name[256];

        if (!eq || eq == item || (size_t)(eq - item) >= sizeof(name)) {
                log_error("--%s takes NAME=VALUE, not '%s'", flag, item);
                return -EINVAL;
        }
        memcpy(name, item, (size_t)(eq - item));
        name[eq - item] = '\0';
        *spec = jp_kernelspec_find(specs, name);
        if (!*spec) {
                log_error("--%s %s: no kernelspec named '%s'", flag, item, name);
                return -EINVAL;
        }
        *value = eq + 1;
        return 0;
}

static int add_entry(const char *item, const struct jp_kernelspec_list *specs)
{
        const struct jp_kernelspec *spec;
        const char *value;
        struct pool_entry *e, *grown;
        json_t *meta;
        char *end, err[256];
        size_t nenv = 0;
        long long n;

        if (split("pool", item, specs, &spec, &value) < 0)
                return -EINVAL;
        n = strtoll(value, &end, 10);
        if (end == value || *end || n < 0 || n > cfg->max_kernels) {
                log_error("--pool %s: N must be a whole number from 0 to --max-kernels", item);
                return -EINVAL;
        }
        e = entry_of(spec);
        if (!e) {
                grown = realloc(entries, (nentries + 1) * sizeof(*entries));
                if (!grown)
                        return -ENOMEM;
                entries = grown;
                e = &entries[nentries++];
                memset(e, 0, sizeof(*e));
                e->spec = spec;
                e->env = calloc(1, sizeof(char *));
                if (!e->env || kernel_env_append(json_object_get(spec->spec, "env"), &e->env, &nenv,
                                                 err, sizeof(err)) < 0) {
                        log_error("--pool %s: the kernelspec's env: %s", item, err);
                        return -EINVAL;
                }
                /* The kernelspec may name its own pre-import. */
                meta = json_object_get(json_object_get(spec->spec, "metadata"), "glovebox");
                if (json_is_string(json_object_get(meta, "preimport")))
                        e->preimport =
                            strdup(json_string_value(json_object_get(meta, "preimport")));
        }
        e->target = n;
        return 0;
}

int pool_init(const struct config *config, const struct jp_kernelspec_list *specs)
{
        cfg = config;
        for (size_t i = 0; cfg->pool && cfg->pool[i]; i++) {
                if (add_entry(cfg->pool[i], specs) < 0)
                        return -EINVAL;
        }
        for (size_t i = 0; cfg->pool_preimport && cfg->pool_preimport[i]; i++) {
                const struct jp_kernelspec *spec;
                const char *code;
                struct pool_entry *e;

                if (split("pool-preimport", cfg->pool_preimport[i], specs, &spec, &code) < 0)
                        return -EINVAL;
                e = entry_of(spec);
                if (!e || strlen(code) > POOL_MAX_PREIMPORT) {
                        log_error("--pool-preimport %s: %s", spec->name,
                                  e ? "the code is too long" : "that kernelspec has no --pool");
                        return -EINVAL;
                }
                free(e->preimport);
                e->preimport = strdup(code);
        }
        for (size_t i = 0; i < nentries; i++)
                log_info("pool: %lld %s kernel(s)%s", entries[i].target, entries[i].spec->name,
                         entries[i].preimport ? ", pre-imported" : "");
        schedule(0);
        return 0;
}

void pool_stop(void)
{
        loop_timer_stop(&tick);
        stopped = true;
}

void pool_free(void)
{
        pool_stop();
        for (size_t i = 0; i < nentries; i++) {
                jp_strv_free(entries[i].env);
                free(entries[i].preimport);
                jp_share_free(&entries[i].share);
        }
        free(entries);
        entries = NULL;
        nentries = 0;
        free(python_warmup);
        python_warmup = NULL;
}

int pool_set_python_warmup(const char *expression)
{
        char *copy = expression ? strdup(expression) : NULL;

        if (expression && !copy)
                return -ENOMEM;
        free(python_warmup);
        python_warmup = copy;
        return 0;
}

/* A pooled kernel of e for the caller, not yet counted for it (count
 * does, once it is handed out), or NULL. A tenant that has had its half
 * since the pool was last full gets a kernel started for it instead: the
 * rest stays for the others; unless --max-kernels would refuse that start,
 * where holding back would only refuse the tenant. */
static struct kernel *claim(struct pool_entry *e, const char *who)
{
        struct kernel *k;

        reset_shares_when_settled(e);
        if (!jp_share_may_take(&e->share, who, (unsigned)e->target) &&
            kernels_count() < (size_t)cfg->max_kernels) {
                log_debug("pool %s: %s has had its share; the rest is kept for the others",
                          e->spec->name, who);
                return NULL;
        }
        k = kernel_pool_claim(e->spec);
        if (k) {
                e->taken++;
                /* Refill soon, not at the next tick (each take pushes it
                 * back: see POOL_REFILL_DELAY_MS). */
                schedule(POOL_REFILL_DELAY_MS);
        }
        return k;
}

static void count(struct pool_entry *e, const char *who)
{
        if (jp_share_took(&e->share, who) < 0)
                log_warn("pool %s: a take by %s not counted (out of memory)", e->spec->name, who);
}

struct kernel *pool_take(const struct jp_kernelspec *spec)
{
        struct pool_entry *e = entry_of(spec);
        const char *who = tenants_share_name();
        struct kernel *k = e ? claim(e, who) : NULL;

        if (k)
                count(e, who);
        return k;
}

/* Read by IPython and ipykernel as they start: a pooled kernel has (a
 * zygote's kernel starts them once its environment is set). */
static bool read_by_ipython(const char *entry)
{
        static const char *const prefixes[] = {"IPYTHON", "JUPYTER", "HOME="};

        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0)
                        return true;
        }
        return false;
}

/* Whether a running kernel of e can take own, a request's environment. */
static bool env_fits(const struct pool_entry *e, json_t *own)
{
        const char *language = json_string_value(json_object_get(e->spec->spec, "language"));
        const char *name;
        json_t *value;
        char entry[64];

        if (json_object_size(own) == 0)
                return true;
        /* The code that sets it is Python's. */
        if (!language || strcmp(language, "python") != 0)
                return false;
        json_object_foreach(own, name, value) {
                /* Enough of the entry for the rule's prefixes. */
                snprintf(entry, sizeof(entry), "%s=", name);
                if (jp_env_read_at_start(entry) || read_by_ipython(entry))
                        return false;
                /* sys.path has the kernelspec's own already. */
                if (strcmp(name, "PYTHONPATH") == 0) {
                        for (size_t i = 0; e->env[i]; i++) {
                                if (strncmp(e->env[i], "PYTHONPATH=", 11) == 0)
                                        return false;
                        }
                }
        }
        return true;
}

static bool limits_fit(const struct hostmsg_limits *limits)
{
        struct hostmsg_limits d;

        kernels_default_limits(&d);
        if (hostmsg_limits_equal(limits, &d))
                return true;
        /* Without a sandbox there is no cgroup to give them to. */
        return strcmp(cfg->sandbox, "none") != 0 && limits->disk_mb == d.disk_mb &&
               limits->memory_mb >= POOL_MIN_MEMORY_MB && limits->pids >= POOL_MIN_PIDS;
}

/* Python that sets own in os.environ (and PYTHONPATH's entries in
 * sys.path), in a namespace of its own so that the user's has no trace of
 * it; NULL when out of memory. own travels as hex: no quoting to get wrong. */
static char *env_code(json_t *own)
{
        static const char code[] =
            "exec(\"import json, os, sys\\n"
            "env = json.loads(bytes.fromhex(h))\\n"
            "os.environ.update(env)\\n"
            "sys.path[1:1] = [p for p in env.get('PYTHONPATH', '').split(':') if p]\\n\", "
            "{'h': '%s'})";
        char *hex = run_env_json_hex(own), *out = NULL;

        if (!hex || asprintf(&out, code, hex) < 0)
                out = NULL;
        free(hex);
        return out;
}

struct kernel *pool_take_for(const struct jp_kernelspec *spec, json_t *own, char *const *env,
                             const struct hostmsg_limits *limits)
{
        struct pool_entry *e = entry_of(spec);
        const char *who = tenants_share_name();
        char *code = NULL;
        struct kernel *k;

        if (!e || !limits_fit(limits) || !env_fits(e, own))
                return NULL;
        if (json_object_size(own) && !(code = env_code(own)))
                return NULL;
        k = claim(e, who);
        if (k && kernel_adapt(k, env, code, limits) < 0) {
                klog_warn(k->id, "cannot give the pooled kernel the request's env and limits");
                kernel_shutdown(k, NULL);
                k = NULL;
        }
        /* Counted once handed out: a kernel that could not take the
         * request's env and limits is not the tenant's take. */
        if (k)
                count(e, who);
        free(code);
        return k;
}

json_t *pool_status(void)
{
        json_t *specs = json_object();

        for (size_t i = 0; specs && i < nentries; i++) {
                const struct pool_entry *e = &entries[i];
                size_t warm, pooled = kernels_pooled(e->spec, &warm);

                json_object_set_new(
                    specs, e->spec->name,
                    json_pack("{s:I, s:I, s:I, s:I, s:I}", "target", (json_int_t)e->target, "ready",
                              (json_int_t)warm, "starting", (json_int_t)(pooled - warm), "taken",
                              (json_int_t)e->taken, "failed", (json_int_t)e->failed));
        }
        return json_pack("{s:I, s:b, s:o}", "memory_available_mb",
                         (json_int_t)(available_mb >= 0 ? available_mb : memory_available_mb()),
                         "paused", paused, "kernelspecs", specs);
}
