/* The warm pool's kernels in the registry: counted, claimed (given a
 * request's own env and limits) and spared (kernels.h). */
#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/session.h"
#include "gateway/core/loop.h"
#include "gateway/core/tenants.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t kernels_pooled(const struct jp_kernelspec *spec, size_t *warm)
{
        size_t n = 0;

        *warm = 0;
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (k->pooled && k->spec == spec && k->phase != KERNEL_STOPPING) {
                        n++;
                        *warm += k->warm && k->phase == KERNEL_READY;
                }
        }
        return n;
}

struct kernel *kernel_pool_claim(const struct jp_kernelspec *spec)
{
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (k->pooled && k->warm && k->spec == spec && k->phase == KERNEL_READY) {
                        k->pooled = false;
                        if (k->sandbox)
                                host_sandbox_priority(k->sandbox->id, false);
                        /* Counted from now on for the tenant that takes it. */
                        snprintf(k->owner, sizeof(k->owner), "%s", tenants_owner_now());
                        k->restarts = 0;
                        kernel_touch(k);
                        session_ahead_claimed(k);
                        klog_info(k->id, "taken from the pool");
                        return k;
                }
        }
        return NULL;
}

/* A claimed kernel's new limits on their way: its id. */
struct adapt {
        char id[JP_UUID_SIZE];
};

static void adapt_failed(struct kernel *k, const char *why)
{
        klog_warn(k->id, "not handed out: %s", why);
        kernel_adapt_end(k);
        kernel_waiters_resolve(k, 503, why);
        kernel_shutdown(k, NULL);
}

/* The limits hold: the request's env and the startup code next; those of
 * kernel_when_adapted hear it once that is sent, the other waiters once it
 * has run. A startup expression (an E2B context's, set by the caller of
 * kernel_adapt before the loop runs again) goes with the env as one
 * silent execution, where two would cost the kernel two. */
static void adapt_run(struct kernel *k)
{
        char *code = k->adapt_code;
        bool together = code && k->startup_code && k->startup_expression;
        int rc = 0;

        k->adapt_code = NULL;
        k->adapting = false;
        if (code)
                rc = kernel_send_silent(k, code, together ? k->startup_code : NULL, k->startup_id);
        if (rc == 0 && k->startup_code && !together)
                rc = kernel_send_startup(k);
        if (rc < 0) {
                k->startup_id[0] = '\0';
                adapt_failed(k, "cannot send the request's environment to the kernel");
        } else if (!code && !k->startup_code) {
                kernel_waiters_resolve(k, 0, NULL);
        } else {
                kernel_adapt_waiters_resolve(k);
        }
        free(code);
}

void kernel_adapt_end(struct kernel *k)
{
        loop_timer_stop(&k->adapt_timer);
        k->adapting = false;
        free(k->adapt_code);
        k->adapt_code = NULL;
}

static void on_relimited(void *ctx, int error, const char *message, uint64_t bytes)
{
        struct adapt *a = ctx;
        struct kernel *k = kernel_by_id(a->id);
        char why[HOSTMSG_ERROR_SIZE + 64];

        (void)bytes;
        /* One that died meanwhile restarts with its new environment and
         * limits (or ends) and its waiters hear that. */
        if (k && k->adapting && k->phase == KERNEL_READY) {
                if (error) {
                        snprintf(why, sizeof(why), "the pooled kernel cannot take those limits: %s",
                                 message[0] ? message : strerror(error));
                        adapt_failed(k, why);
                } else {
                        adapt_run(k);
                }
        } else if (k) {
                kernel_adapt_end(k);
        }
        free(a);
}

static void on_adapt_timer(lws_sorted_usec_list_t *sul)
{
        struct kernel *k = lws_container_of(sul, struct kernel, adapt_timer);

        if (k->adapting && k->phase == KERNEL_READY)
                adapt_run(k);
}

int kernel_adapt(struct kernel *k, char *const *env, const char *code,
                 const struct hostmsg_limits *limits)
{
        bool relimit = !hostmsg_limits_equal(limits, &k->limits);
        char **copy = NULL, *code_copy = NULL;
        int rc;

        if (k->phase != KERNEL_READY || k->adapting ||
            (relimit && (!k->sandbox || !k->owns_sandbox)))
                return -EINVAL;
        if (jp_strv_dup(env, &copy) < 0 || (code && !(code_copy = strdup(code)))) {
                jp_strv_free(copy);
                return -ENOMEM;
        }
        if (relimit) {
                struct adapt *a = calloc(1, sizeof(*a));

                if (a)
                        snprintf(a->id, sizeof(a->id), "%s", k->id);
                rc = a ? host_sandbox_relimit(k->sandbox->id, limits, on_relimited, a) : -ENOMEM;
                if (rc < 0) {
                        free(a);
                        free(code_copy);
                        jp_strv_free(copy);
                        return rc;
                }
                k->limits = *limits;
                k->sandbox->limits = *limits;
        } else {
                /* On the loop's next turn: the caller may set a startup
                 * code to go with it first. */
                loop_timer_start(&k->adapt_timer, on_adapt_timer, 0);
        }
        k->adapting = true;
        k->adapt_code = code_copy;
        jp_strv_free(k->env);
        k->env = copy;
        return 0;
}

struct kernel *kernel_pool_spare(const struct jp_kernelspec *spec)
{
        struct kernel *found = NULL;

        /* A cold one first: it has cost the least so far. */
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (k->pooled && k->spec == spec && k->phase != KERNEL_STOPPING &&
                    (!found || found->warm))
                        found = k;
        }
        return found;
}
