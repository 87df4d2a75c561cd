#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/kernels/usage.h"
#include "gateway/core/fleet.h"
#include "gateway/kernels/egress.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/limits.h"
#include "gateway/kernels/kernel_output.h"
#include "gateway/core/loop.h"
#include "gateway/core/metrics.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/kernels/session.h"
#include "gateway/kernels/templates.h"
#include "gateway/kernels/specs.h"
#include "protocol/log.h"
#include "protocol/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct config *cfg;
static const struct jp_kernelspec_list *specs;
struct kernel *kernels_head;
char kernel_gateway_session[JP_UUID_SIZE];
static void (*all_gone)(void);
static bool shutting_down;
static lws_sorted_usec_list_t all_gone_timer;

static void launch(struct kernel *k);

const struct jp_kernelspec_list *kernels_specs(void)
{
        specs_refresh();
        return specs;
}

struct kernel *kernel_by_id(const char *id)
{
        for (struct kernel *k = kernels_head; k; k = k->next) {
                if (strcmp(k->id, id) == 0)
                        return k;
        }
        return NULL;
}

struct kernel *kernel_find_any(const char *id)
{
        struct kernel *k = kernel_by_id(id);

        /* A pooled kernel is nobody's until a start request takes it. */
        return k && k->phase != KERNEL_STOPPING && !k->pooled ? k : NULL;
}

struct kernel *kernel_find(const char *id)
{
        struct kernel *k = kernel_find_any(id);

        /* Here, rather than in each route, so that every route that names
         * a kernel (and every one added later) is confined to the
         * caller's. */
        return k && tenants_may_reach(k->owner) ? k : NULL;
}

void kernel_touch(struct kernel *k)
{
        /* Every message touches: formatted only when a model is asked for. */
        clock_gettime(CLOCK_REALTIME, &k->last_activity);
        k->active_at = usage_monotonic();
}

void kernel_set_state(struct kernel *k, const char *state)
{
        snprintf(k->execution_state, sizeof(k->execution_state), "%s", state);
}

/* ---- waiters ------------------------------------------------------------ */

static bool unlink_waiter(struct waiter **list, struct waiter *w)
{
        for (struct waiter **link = list; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        return true;
                }
        }
        return false;
}

/* A waiter's cancel: off the kernel's queues, or off the list being told. */
static void waiter_remove(struct waiter *w)
{
        struct kernel *k = w->on;

        if (!unlink_waiter(&k->waiters, w) && !unlink_waiter(&k->adapt_waiters, w))
                unlink_waiter(&k->resolving, w);
        w->on = NULL;
        w->next = NULL;
}

static void waiter_add(struct kernel *k, struct waiter **queue, struct waiter *w)
{
        if (!w || w->on)
                return;
        w->on = k;
        w->cancel = waiter_remove;
        w->next = *queue;
        *queue = w;
}

void kernel_when_ready(struct kernel *k, struct waiter *w)
{
        if (k->phase == KERNEL_READY && !k->startup_id[0] && !k->adapting) {
                w->on = NULL;
                w->done(w, k, 0, NULL);
                return;
        }
        if (k->phase == KERNEL_DEAD || k->phase == KERNEL_STOPPING) {
                w->on = NULL;
                w->done(w, k, 500, k->phase == KERNEL_DEAD ? k->reason : "Kernel was deleted");
                return;
        }
        waiter_add(k, &k->waiters, w);
}

void kernel_when_adapted(struct kernel *k, struct waiter *w)
{
        if (k->adapting && k->phase == KERNEL_READY)
                waiter_add(k, &k->adapt_waiters, w);
        else
                kernel_when_ready(k, w);
}

/* Tells those of *queue now, not those a callback adds (the pool waits
 * again, for its warm-up); each is detached before its done() runs. A
 * resolve nested in a callback hears the rest. */
static void tell(struct kernel *k, struct waiter **queue, int status, const char *message)
{
        struct waiter **tail = &k->resolving;

        while (*tail)
                tail = &(*tail)->next;
        *tail = *queue;
        *queue = NULL;
        while (k->resolving) {
                struct waiter *w = k->resolving;

                k->resolving = w->next;
                w->next = NULL;
                w->on = NULL;
                w->done(w, k, status, message);
        }
}

void kernel_waiters_resolve(struct kernel *k, int status, const char *message)
{
        struct waiter **tail = &k->adapt_waiters;

        /* Those waiting for an env that was never sent hear it too. */
        while (*tail)
                tail = &(*tail)->next;
        *tail = k->waiters;
        k->waiters = NULL;
        tell(k, &k->adapt_waiters, status, message);
}

void kernel_adapt_waiters_resolve(struct kernel *k)
{
        tell(k, &k->adapt_waiters, 0, NULL);
}

/* ---- the kernel-host's reports ------------------------------------------ */

static void kernel_free(struct kernel *k)
{
        struct kernel **link;

        for (link = &kernels_head; *link; link = &(*link)->next) {
                if (*link == k) {
                        *link = k->next;
                        break;
                }
        }
        while (k->sessions) {
                struct session *s = k->sessions;

                session_destroy(&s, 1001, "kernel shut down");
        }
        session_ahead_close(k);
        kernel_close_sockets(k);
        kernel_output_destroy(&k->output);
        if (k->ipc_root_fd >= 0)
                close(k->ipc_root_fd);
        loop_timer_stop(&k->deadline_timer);
        loop_timer_stop(&k->grace_timer);
        kernel_adapt_end(k);
        sandbox_waiter_cancel(&k->sandbox_wait);
        sandbox_unref(&k->sandbox);
        jp_signer_destroy(&k->signer);
        jp_signer_destroy(&k->old_signer);
        jp_strv_free(k->env);
        free(k->startup_code);
        free(k->iopub_dropped_parent);
        {
                struct log_limit *limits[] = {&k->log_bad_message,  &k->log_bad_frame,
                                              &k->log_refused,      &k->log_send_failed,
                                              &k->log_slow_client,  &k->log_evicted,
                                              &k->log_iopub_dropped};

                for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
                        log_limit_release(limits[i]);
        }
        free(k);
        if (all_gone && !kernels_head) {
                void (*done)(void) = all_gone;

                all_gone = NULL;
                loop_timer_stop(&all_gone_timer);
                done();
        }
}

/* The kernel is gone for good: tell whoever waits and free it. */
static void finish(struct kernel *k, int status, const char *message)
{
        klog_info(k->id, "removed");
        /* Waiters must not act on it any more (it is freed after them). */
        k->phase = KERNEL_STOPPING;
        kernel_waiters_resolve(k, status, message);
        kernel_free(k);
}

/* Sets where the kernel's sockets are as the gateway reaches them. A
 * sandboxed kernel's are in its sandbox's own /run/kernel, a tmpfs mounted
 * nowhere on the host, so the kernel-host gives a path relative to the
 * sandbox's root and we go through our descriptor of that root
 * (/proc/self/fd/N/...). The kernel keeps its own copy of the descriptor
 * while any socket may use the path, so that the number never names
 * something else under them. When the path changes (the kernel restarted in
 * a new sandbox), every client session's sockets move too. */
int kernel_set_ipc_prefix(struct kernel *k, const char *reported)
{
        char prefix[sizeof(k->ipc_prefix)];
        int old_fd = k->ipc_root_fd, fd = -1;
        bool moved;

        if (reported[0] == '/') {
                snprintf(prefix, sizeof(prefix), "%s", reported);
        } else {
                if (!k->sandbox || k->sandbox->root_fd < 0)
                        return -ENOENT;
                if (old_fd >= 0 && strcmp(k->ipc_sandbox, k->sandbox->id) == 0)
                        fd = old_fd;
                else
                        fd = fcntl(k->sandbox->root_fd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0)
                        return -errno;
                if ((size_t)snprintf(prefix, sizeof(prefix), "/proc/self/fd/%d/%s", fd, reported) >=
                    sizeof(prefix)) {
                        if (fd != old_fd)
                                close(fd);
                        return -ENAMETOOLONG;
                }
        }
        moved = k->ipc_prefix[0] && strcmp(prefix, k->ipc_prefix) != 0;
        snprintf(k->ipc_prefix, sizeof(k->ipc_prefix), "%s", prefix);
        snprintf(k->ipc_sandbox, sizeof(k->ipc_sandbox), "%s", fd >= 0 ? k->sandbox->id : "");
        k->ipc_root_fd = fd;
        if (moved)
                session_reconnect_all(k);
        if (old_fd >= 0 && old_fd != fd)
                close(old_fd);
        return 0;
}

static void on_started(void *ctx, const struct hostmsg_started *m, int *fds, size_t nfds)
{
        struct kernel *k = ctx;

        kernel_output_destroy(&k->output);
        if (nfds > 0 && kernel_output_new(fds[0], k->id, &k->output) < 0)
                klog_warn(k->id, "cannot watch the kernel's output");
        for (size_t i = 1; i < nfds; i++)
                close(fds[i]);
        k->pid = m->pid;
        if (k->phase == KERNEL_STOPPING) {
                host_stop(k->id);
                return;
        }
        if (kernel_set_ipc_prefix(k, m->ipc_prefix) < 0 || kernel_open_sockets(k) < 0) {
                snprintf(k->reason, sizeof(k->reason), "cannot connect to the kernel's sockets");
                host_stop(k->id);
                return;
        }
        session_connect_all(k);
        /* The kernel's own "starting" is usually sent before anyone
         * listens; clients of a restarted kernel hear it from us. */
        kernel_broadcast_status(k, "starting");
        k->phase = KERNEL_CONNECTING;
        kernel_probe_start(k);
}

/* A start that failed, or a kernel that died, for the reason in k->reason. */
static void handle_death(struct kernel *k)
{
        bool retry;

        kernel_close_sockets(k);
        loop_timer_stop(&k->deadline_timer);
        loop_timer_stop(&k->grace_timer);
        /* It restarts with the env it was given, and runs its startup code. */
        kernel_adapt_end(k);
        k->pid = 0;
        k->running = false;
        if (k->phase == KERNEL_STOPPING) {
                finish(k, 0, NULL);
                return;
        }
        if (k->phase == KERNEL_RESTARTING) {
                /* Asked for: the old process is gone, start the new one.
                 * Executions it was running will not finish. */
                kernel_fail_all_pending(k, "KernelRestarted", "the kernel was restarted");
                launch(k);
                return;
        }
        if (!k->ever_ready) {
                char message[HOSTMSG_ERROR_SIZE + KERNEL_OUTPUT_TAIL + 64];
                char tail[KERNEL_OUTPUT_TAIL];

                kernel_output_drain(k->output);
                kernel_output_tail(k->output, tail, sizeof(tail));
                snprintf(message, sizeof(message), "Kernel failed to start: %s%s%s", k->reason,
                         tail[0] ? "; its last output: " : "", tail);
                metrics_kernel_start_failed(k->spec->name);
                finish(k, 500, message);
                return;
        }
        if (k->pooled) {
                /* Nobody has it yet: the pool starts a fresh one instead. */
                klog_warn(k->id, "pooled kernel died: %s", k->reason);
                finish(k, 500, k->reason);
                return;
        }
        klog_warn(k->id, "died: %s", k->reason);
        metrics_kernel_died(k->spec->name, k->oom);
        snprintf(k->last_death, sizeof(k->last_death), "%s", k->reason);
        /* Whoever waits for an execution hears why it ended. */
        kernel_fail_all_pending(k, k->oom ? "KernelOutOfMemory" : "KernelDied", k->reason);
        kernel_set_state(k, "dead");
        kernel_broadcast_status(k, "dead");
        /* Without a kernel-host (it died and no new one could start)
         * nothing can restart; nor can a kernel in a sandbox it shares (an
         * E2B sandbox's context) once that sandbox is gone. */
        /* A kept kernel that did not answer its new gateway in the grace
         * period is killed, not started afresh under its old id. */
        retry = !k->adopting && !cfg->no_autorestart && k->restarts < cfg->max_restarts &&
                host_running() &&
                !(k->sandbox && !k->owns_sandbox && k->sandbox->phase == SANDBOX_GONE);
        if (!retry) {
                k->phase = KERNEL_DEAD;
                kernel_waiters_resolve(k, 500, k->reason);
                return;
        }
        k->restarts++;
        metrics_kernel_restarted(k->spec->name, true);
        klog_info(k->id, "restarting automatically (%d of %lld)", k->restarts,
                  (long long)cfg->max_restarts);
        kernel_set_state(k, "restarting");
        kernel_broadcast_status(k, "restarting");
        launch(k);
}

static void on_start_failed(void *ctx, const struct hostmsg_failed *m)
{
        struct kernel *k = ctx;

        k->running = false;
        snprintf(k->reason, sizeof(k->reason), "%s", m->message);
        klog_warn(k->id, "start failed at %s: %s", m->step, m->message);
        handle_death(k);
}

/* A kernel that was ready and exited with an error says why in its last
 * output: as much of it as fits goes in the reason clients see (the
 * model's "reason", the error of a run it ends). */
static void append_output(struct kernel *k)
{
        size_t used = strlen(k->reason);
        char tail[KERNEL_OUTPUT_TAIL];

        kernel_output_drain(k->output);
        kernel_output_tail(k->output, tail, sizeof(tail));
        if (tail[0] && used + 32 < sizeof(k->reason)) {
                size_t room = sizeof(k->reason) - used - 20;
                size_t len = strlen(tail);

                snprintf(k->reason + used, sizeof(k->reason) - used, "; its last output: %s",
                         len > room ? tail + len - room : tail);
        }
}

static void on_exited(void *ctx, const struct hostmsg_exit *m)
{
        struct kernel *k = ctx;

        k->running = false;
        k->oom = strcmp(m->reason, "out-of-memory") == 0;
        if (k->oom)
                snprintf(k->reason, sizeof(k->reason),
                         "out of memory: the kernel used more than its limit of %llu MiB",
                         (unsigned long long)k->limits.memory_mb);
        else if (strcmp(m->reason, "host-lost") == 0)
                /* Its sandbox died with the kernel-host; it restarts in a new
                 * one, on the kernel-host that replaced it, if there is one. */
                snprintf(k->reason, sizeof(k->reason),
                         "the kernel-host died, and the kernel's sandbox with it");
        else if (strcmp(m->reason, "sandbox-died") == 0)
                snprintf(k->reason, sizeof(k->reason),
                         "the kernel's sandbox died (its init process was killed)");
        else if (k->reason[0] == '\0' || k->phase == KERNEL_READY)
                /* Keep a reason set before the exit (e.g. a start timeout). */
                snprintf(
                    k->reason, sizeof(k->reason),
                    m->signal ? "kernel killed by signal %d (%s)" : "kernel exited with code %d%s",
                    m->signal ? m->signal : m->exit_code, m->signal ? strsignal(m->signal) : "");
        if (k->ever_ready && !m->signal && m->exit_code != 0)
                append_output(k);
        handle_death(k);
}

const struct host_process_ops kernel_process_ops = {on_started, on_start_failed, on_exited};

/* ---- starting, restarting, stopping ------------------------------------- */

void kernel_on_deadline(lws_sorted_usec_list_t *sul)
{
        struct kernel *k = lws_container_of(sul, struct kernel, deadline_timer);

        if (k->adopting)
                snprintf(k->reason, sizeof(k->reason),
                         "kept kernel did not answer kernel_info within --keep-grace (%g s)",
                         cfg->keep_grace);
        else
                snprintf(k->reason, sizeof(k->reason),
                         "kernel did not answer kernel_info within %g s",
                         cfg->kernel_start_timeout);
        klog_warn(k->id, "%s", k->reason);
        if (k->running) {
                host_stop(k->id);
                return;
        }
        /* Still waiting for its sandbox. */
        sandbox_waiter_cancel(&k->sandbox_wait);
        handle_death(k);
}

/* Asks the kernel-host to run the kernel in its (ready) sandbox. */
static void start_process(struct kernel *k)
{
        json_t *argv = json_object_get(k->spec->spec, "argv");
        size_t n = json_array_size(argv);
        struct hostmsg_start req = {.kernel = true};
        int rc = -ENOMEM;

        snprintf(req.id, sizeof(req.id), "%s", k->id);
        snprintf(req.sandbox_id, sizeof(req.sandbox_id), "%s", k->sandbox->id);
        /* As its sandbox sees it: a template's tree is its root. */
        snprintf(req.kernelspec_dir, sizeof(req.kernelspec_dir), "%s",
                 k->spec->dir + k->spec->root_len);
        snprintf(req.key, sizeof(req.key), "%s", k->key);
        req.tcp_bridge = specs_tcp_only(k->spec);
        /* The kernel-host forks it from the zygote when it can. */
        if (config_has_zygote(cfg, k->spec->name))
                snprintf(req.zygote, sizeof(req.zygote), "%s", k->spec->name);
        req.env = k->env;
        /* The kernelspec's argv (validated strings), borrowed. */
        req.argv = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; req.argv && i < n; i++)
                req.argv[i] = (char *)json_string_value(json_array_get(argv, i));
        if (req.argv)
                rc = host_start(&req, &kernel_process_ops, k);
        free(req.argv);
        if (rc < 0) {
                snprintf(k->reason, sizeof(k->reason), "cannot reach the kernel-host: %s",
                         strerror(-rc));
                handle_death(k);
                return;
        }
        k->running = true;
}

static void on_sandbox_ready(struct sandbox_waiter *w, struct sandbox *sb, const char *error)
{
        struct kernel *k = lws_container_of(w, struct kernel, sandbox_wait);

        if (error) {
                snprintf(k->reason, sizeof(k->reason), "%s", error);
                handle_death(k);
                return;
        }
        start_process(k);
}

/* Starts the kernel: in its sandbox once that is ready. A kernel that owns
 * its sandbox gets a fresh one if the old one is gone. */
static void launch(struct kernel *k)
{
        struct hostmsg_network network = {0};
        struct sandbox_layers mounts = {0};
        char **volumes = NULL;
        int rc;

        k->phase = KERNEL_STARTING;
        k->reason[0] = '\0';
        loop_timer_start(&k->deadline_timer, kernel_on_deadline,
                         cfg->kernel_start_timeout * 1000.0);
        if (k->sandbox && k->sandbox->phase == SANDBOX_GONE && k->owns_sandbox) {
                /* The new one gets the same egress and volumes (none if
                 * out of memory). */
                if (k->sandbox->network.enabled)
                        egress_network_copy(&k->sandbox->network, &network);
                jp_strv_dup(k->sandbox->volumes, &volumes);
                sandbox_unref(&k->sandbox);
        }
        if (!k->sandbox) {
                mounts.volumes = volumes;
                rc = templates_sandbox_new_layered(k->spec, &k->limits,
                                                   strcmp(cfg->sandbox, "none") != 0, &network,
                                                   &mounts, &k->sandbox);
                egress_network_clear(&network);
                jp_strv_free(volumes);
                if (rc < 0) {
                        snprintf(k->reason, sizeof(k->reason), "cannot ask for a sandbox: %s",
                                 strerror(-rc));
                        handle_death(k);
                        return;
                }
                k->owns_sandbox = true;
                /* A pool's refill takes only the CPU that cells leave. */
                if (k->pooled)
                        host_sandbox_priority(k->sandbox->id, true);
        }
        k->sandbox_wait.ready = on_sandbox_ready;
        sandbox_when_ready(k->sandbox, &k->sandbox_wait);
}

int kernel_exec_check(const struct jp_kernelspec *spec, char *const *env, char *why, size_t size)
{
        json_t *argv = json_object_get(spec->spec, "argv");
        struct hostmsg_start req = {.kernel = true, .env = (char **)env};
        size_t n = json_array_size(argv);
        int rc = -ENOMEM;

        req.argv = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; req.argv && i < n; i++)
                req.argv[i] = (char *)json_string_value(json_array_get(argv, i));
        if (req.argv)
                rc = hostmsg_start_check(&req, why, size);
        free(req.argv);
        return rc == -EINVAL ? -E2BIG : rc;
}

static int start(const struct jp_kernelspec *spec, char *const *env,
                 const struct hostmsg_limits *limits, struct sandbox *sandbox, bool pooled,
                 const char *id, struct waiter *w, struct kernel **out)
{
        struct kernel *k;
        size_t nenv = 0;
        int rc = -ENOMEM;

        *out = NULL;
        if (shutting_down)
                return -ESHUTDOWN;
        if (kernels_count() >= (size_t)cfg->max_kernels)
                return -EAGAIN;
        /* A resumed kernel keeps its id; never two of one id, a stopping
         * one included. */
        if (id && (strlen(id) >= JP_UUID_SIZE || kernel_by_id(id)))
                return -EBUSY;
        /* What the kernel-host would refuse, refused now (its routes say
         * which bound with kernel_exec_check first). */
        if (kernel_exec_check(spec, env, NULL, 0) < 0)
                return -E2BIG;
        /* Every way of starting a kernel comes here: the quota holds for
         * routes that do not check it first. */
        if (!pooled) {
                json_t *why = NULL;

                rc = kernels_quota_check(sandbox ? &sandbox->limits : limits, sandbox, &why);
                json_decref(why);
                if (rc < 0)
                        return rc;
                rc = -ENOMEM;
        }
        k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        if (!pooled)
                snprintf(k->owner, sizeof(k->owner), "%s", tenants_owner_now());
        while (env && env[nenv])
                nenv++;
        k->env = calloc(nenv + 1, sizeof(char *));
        for (size_t i = 0; k->env && i < nenv; i++) {
                k->env[i] = strdup(env[i]);
                if (!k->env[i])
                        goto fail;
        }
        if (id)
                snprintf(k->id, sizeof(k->id), "%s", id);
        if (!k->env || (!id && fleet_new_uuid(k->id) < 0) || jp_random_hex(k->key, 32) < 0)
                goto fail;
        rc = jp_signer_new(k->key, strlen(k->key), &k->signer);
        if (rc < 0)
                goto fail;
        k->spec = spec;
        k->ipc_separator = specs_ipc_separator(spec);
        k->pooled = pooled;
        k->ipc_root_fd = -1;
        k->limits = sandbox ? sandbox->limits : *limits;
        /* In a given sandbox (an E2B sandbox's contexts), or one of its own. */
        if (sandbox)
                k->sandbox = sandbox_ref(sandbox);
        kernel_set_state(k, "starting");
        kernel_touch(k);
        k->next = kernels_head;
        kernels_head = k;
        waiter_add(k, &k->waiters, w);
        klog_info(k->id, "starting %s%s", spec->name, pooled ? " for the pool" : "");
        launch(k);
        *out = kernel_by_id(k->id);
        return *out ? 0 : -EIO;
fail:
        jp_strv_free(k->env);
        jp_signer_destroy(&k->signer);
        free(k);
        return rc;
}

int kernel_start(const struct jp_kernelspec *spec, char *const *env,
                 const struct hostmsg_limits *limits, struct sandbox *sandbox, struct waiter *w,
                 struct kernel **out)
{
        return start(spec, env, limits, sandbox, false, NULL, w, out);
}

int kernel_start_as(const struct jp_kernelspec *spec, char *const *env,
                    const struct hostmsg_limits *limits, const char *id, struct waiter *w,
                    struct kernel **out)
{
        return start(spec, env, limits, NULL, false, id, w, out);
}

/* ---- the warm pool's kernels --------------------------------------------- */

int kernel_start_pooled(const struct jp_kernelspec *spec, char *const *env, struct waiter *w,
                        struct kernel **out)
{
        struct hostmsg_limits limits;

        kernels_default_limits(&limits);
        return start(spec, env, &limits, NULL, true, NULL, w, out);
}

int kernel_warm_up(struct kernel *k, const char *code, const char *expression, struct waiter *w)
{
        int rc = kernel_send_silent(k, code, expression, k->warmup_id);

        if (rc < 0) {
                k->warmup_id[0] = '\0';
                return rc;
        }
        waiter_add(k, &k->waiters, w);
        return 0;
}

void kernels_default_limits(struct hostmsg_limits *out)
{
        *out = (struct hostmsg_limits){(uint64_t)cfg->memory_mb, (uint32_t)lround(cfg->cpus * 1000),
                                       (uint32_t)cfg->pids, (uint64_t)cfg->disk_mb};
}

int kernel_interrupt(struct kernel *k)
{
        /* Only a ready kernel has a cell to stop. One still starting (or
         * restarting) has not installed its SIGINT handler yet: the signal
         * would kill it and cost a restart. */
        if (k->phase != KERNEL_READY) {
                klog_info(k->id, "interrupt refused: the kernel is not ready");
                return -EAGAIN;
        }
        klog_info(k->id, "interrupt");
        if (k->spec->interrupt_by_message)
                return kernel_send_request(k, k->control, "interrupt_request", "{}", NULL);
        return host_signal(k->id, SIGINT);
}

static void on_grace_expired(lws_sorted_usec_list_t *sul)
{
        struct kernel *k = lws_container_of(sul, struct kernel, grace_timer);

        klog_info(k->id, "did not exit within %g s; killing it", cfg->shutdown_grace);
        host_stop(k->id);
}

/* Asks a running kernel to exit, then kills it after the grace period. */
static void request_exit(struct kernel *k, bool restart)
{
        if (kernel_send_request(k, k->control, "shutdown_request",
                                restart ? "{\"restart\":true}" : "{\"restart\":false}", NULL) < 0 ||
            cfg->shutdown_grace <= 0) {
                host_stop(k->id);
                return;
        }
        loop_timer_start(&k->grace_timer, on_grace_expired, cfg->shutdown_grace * 1000.0);
}

void kernel_restart(struct kernel *k, struct waiter *w)
{
        waiter_add(k, &k->waiters, w);
        klog_info(k->id, "restart requested");
        metrics_kernel_restarted(k->spec->name, false);
        k->restarts = 0;
        k->last_death[0] = '\0';
        /* No "restarting" status here: Jupyter clients read it as an
         * automatic restart and reconnect on their own. */
        switch (k->phase) {
        case KERNEL_READY:
                k->phase = KERNEL_RESTARTING;
                kernel_set_state(k, "restarting");
                request_exit(k, true);
                break;
        case KERNEL_DEAD:
                kernel_set_state(k, "restarting");
                launch(k);
                break;
        default:
                /* Already on its way up: the waiter hears when it is ready. */
                break;
        }
}

void kernel_shutdown(struct kernel *k, struct waiter *w)
{
        enum kernel_phase was = k->phase;

        if (was == KERNEL_STOPPING) {
                waiter_add(k, &k->waiters, w);
                return;
        }
        klog_info(k->id, "shutting down");
        /* Anyone waiting for it to become ready will not see that. */
        kernel_waiters_resolve(k, 404, "Kernel was deleted");
        waiter_add(k, &k->waiters, w);
        k->phase = KERNEL_STOPPING;
        loop_timer_stop(&k->deadline_timer);
        if (!k->running) {
                /* Dead, or still waiting for its sandbox. */
                finish(k, 0, NULL);
        } else if (was == KERNEL_STARTING) {
                /* on_started or on_start_failed finishes the job. */
        } else if (k->control) {
                request_exit(k, false);
        } else {
                host_stop(k->id);
        }
}

/* ---- whole registry ------------------------------------------------------- */

static lws_sorted_usec_list_t cull_timer;

/* Shuts down kernels idle for --cull-idle-timeout, sparing connected and
 * busy ones unless told otherwise. */
static void on_cull(lws_sorted_usec_list_t *sul)
{
        double now = usage_monotonic();
        struct kernel *k = kernels_head;

        while (k) {
                struct kernel *next = k->next;

                if (k->phase == KERNEL_READY && !k->pooled &&
                    now - k->active_at > cfg->cull_idle_timeout &&
                    (cfg->cull_connected || k->connections == 0) &&
                    (cfg->cull_busy || strcmp(k->execution_state, "busy") != 0)) {
                        klog_info(k->id, "culled after %.0f s idle", now - k->active_at);
                        kernel_shutdown(k, NULL);
                }
                k = next;
        }
        loop_timer_start(&cull_timer, on_cull, cfg->cull_interval * 1000.0);
}

int kernels_init(const struct config *config, const struct jp_kernelspec_list *list)
{
        cfg = config;
        specs = list;
        if (jp_uuid4(kernel_gateway_session) < 0)
                return -EIO;
        if (cfg->cull_idle_timeout > 0)
                loop_timer_start(&cull_timer, on_cull, cfg->cull_interval * 1000.0);
        return 0;
}

static void on_all_gone_timeout(lws_sorted_usec_list_t *sul)
{
        void (*done)(void) = all_gone;

        all_gone = NULL;
        if (done)
                done();
}

void kernels_shutdown_all(double timeout_ms, void (*done)(void))
{
        struct kernel *k = kernels_head;

        shutting_down = true;
        loop_timer_stop(&cull_timer);
        if (!kernels_head) {
                done();
                return;
        }
        all_gone = done;
        loop_timer_start(&all_gone_timer, on_all_gone_timeout, timeout_ms);
        while (k) {
                struct kernel *next = k->next;

                /* finish() may free k, so step first. */
                kernel_shutdown(k, NULL);
                k = next;
        }
}

void kernels_free_all(void)
{
        all_gone = NULL;
        while (kernels_head)
                kernel_free(kernels_head);
}
