#include "autoconf.h"

#include "gateway/kernels/kernels.h"
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

#define PROBE_INTERVAL_MS 500.0
/* variables of a kernel: its kernelspec's and a request's (or an E2B
 * sandbox's envVars), as many as a process may have */
#define MAX_KERNEL_ENV HOSTMSG_MAX_ENV

static const struct config *cfg;
static const struct jp_kernelspec_list *specs;
static struct kernel *kernels;
static char gateway_session[JP_UUID_SIZE];
static void (*all_gone)(void);
static bool shutting_down;
static lws_sorted_usec_list_t all_gone_timer;

static void launch(struct kernel *k);
static void on_iopub(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes);
static void on_iopub_dropped(void *arg, const struct jp_bytes *frames, size_t nframes);
static void on_own_reply(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes);

const struct jp_kernelspec_list *kernels_specs(void)
{
        specs_refresh();
        return specs;
}

static struct kernel *find_any(const char *id)
{
        for (struct kernel *k = kernels; k; k = k->next) {
                if (strcmp(k->id, id) == 0)
                        return k;
        }
        return NULL;
}

struct kernel *kernel_find_any(const char *id)
{
        struct kernel *k = find_any(id);

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

/* Whether k counts in owner's quota: handed out and not deleted. A dead
 * one counts too: it is listed, and a restart asked for brings it back. */
static bool held_by(const struct kernel *k, const char *owner)
{
        return k->phase != KERNEL_STOPPING && !k->pooled && strcmp(k->owner, owner) == 0;
}

#define USAGE_MAX_HOLDERS 4

static kernels_usage_fn holders[USAGE_MAX_HOLDERS];
static size_t nholders;

int kernels_usage_register(kernels_usage_fn fn)
{
        if (nholders == USAGE_MAX_HOLDERS)
                return -ENOSPC;
        holders[nholders++] = fn;
        return 0;
}

void kernels_usage(const char *owner, struct tenant_usage *out)
{
        memset(out, 0, sizeof(*out));
        for (struct kernel *k = kernels; k; k = k->next) {
                bool counted = false;

                if (!held_by(k, owner))
                        continue;
                out->kernels++;
                /* A shared sandbox's limits are the sandbox's: counted
                 * with the first of its kernels in the list only. */
                for (struct kernel *o = kernels; k->sandbox && o != k; o = o->next)
                        counted |= o->sandbox == k->sandbox && held_by(o, owner);
                if (!counted) {
                        out->memory_mb += k->limits.memory_mb;
                        out->cpu_millicores += k->limits.cpu_millis;
                }
        }
        /* What the families hold beside kernels (a terminal's own sandbox
         * holds memory and CPU as a kernel's does). */
        for (size_t i = 0; i < nholders; i++)
                holders[i](owner, &out->memory_mb, &out->cpu_millicores);
}

static json_t *quota_value(int64_t v)
{
        return v == KEYS_NO_QUOTA ? json_null() : json_integer(v);
}

static int quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                       bool one_more_kernel, json_t **why);

int kernels_quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                        json_t **why)
{
        return quota_check(limits, shared, true, why);
}

int kernels_quota_check_sandbox(const struct hostmsg_limits *limits, json_t **why)
{
        return quota_check(limits, NULL, false, why);
}

static int quota_check(const struct hostmsg_limits *limits, const struct sandbox *shared,
                       bool one_more_kernel, json_t **why)
{
        const struct tenant_caller *c = tenants_caller();
        const struct key_entry *key = c ? tenants_key(c->name) : NULL;
        struct tenant_usage u;
        int64_t memory, cpu;
        const char *over = NULL;

        *why = NULL;
        if (!key)
                return 0; /* the gateway's own start (the pool) */
        kernels_usage(key->name, &u);
        memory = (int64_t)limits->memory_mb;
        cpu = (int64_t)limits->cpu_millis;
        for (struct kernel *k = kernels; shared && k; k = k->next) {
                if (k->sandbox == shared && held_by(k, key->name)) {
                        memory = cpu = 0; /* already counted */
                        break;
                }
        }
        if (one_more_kernel && key->max_kernels != KEYS_NO_QUOTA &&
            u.kernels + 1 > key->max_kernels)
                over = "kernels";
        else if (key->max_memory_mb != KEYS_NO_QUOTA && u.memory_mb + memory > key->max_memory_mb)
                over = "memory";
        else if (key->max_cpu_millicores != KEYS_NO_QUOTA &&
                 u.cpu_millicores + cpu > key->max_cpu_millicores)
                over = "CPU";
        if (!over)
                return 0;
        *why = json_pack("{s:s++, s:s, s:s, s:{s:o, s:o, s:o}, s:{s:I, s:I, s:I}, s:{s:I, s:I}}",
                         "message", "Quota of key \"", key->name, "\" reached", "reason", "quota",
                         "exceeded", over, "quota", "kernels", quota_value(key->max_kernels),
                         "memory_mb", quota_value(key->max_memory_mb), "cpu_millicores",
                         quota_value(key->max_cpu_millicores), "holding", "kernels",
                         (json_int_t)u.kernels, "memory_mb", (json_int_t)u.memory_mb,
                         "cpu_millicores", (json_int_t)u.cpu_millicores, "asked", "memory_mb",
                         (json_int_t)memory, "cpu_millicores", (json_int_t)cpu);
        return -EDQUOT;
}

json_t *kernels_owners(void)
{
        json_t *owners = json_object();

        for (struct kernel *k = kernels; owners && k; k = k->next) {
                const char *name = k->owner[0] ? k->owner : "(pool)";

                if (k->phase == KERNEL_STOPPING || k->pooled || !tenants_may_reach(k->owner))
                        continue;
                json_object_set_new(
                    owners, name,
                    json_integer(json_integer_value(json_object_get(owners, name)) + 1));
        }
        return owners;
}

size_t kernels_count(void)
{
        size_t n = 0;

        for (struct kernel *k = kernels; k; k = k->next)
                n++;
        return n;
}

static double monotonic(void)
{
        struct timespec now;

        clock_gettime(CLOCK_MONOTONIC, &now);
        return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

void kernel_touch(struct kernel *k)
{
        /* Every message touches: formatted only when a model is asked for. */
        clock_gettime(CLOCK_REALTIME, &k->last_activity);
        k->active_at = monotonic();
}

static void set_state(struct kernel *k, const char *state)
{
        snprintf(k->execution_state, sizeof(k->execution_state), "%s", state);
}

/* ---- waiters ------------------------------------------------------------ */

/* A waiter's cancel: off the kernel's queue, or off the list being told. */
static void waiter_remove(struct waiter *w)
{
        struct kernel *k = w->on;
        struct waiter **link;

        for (link = &k->waiters; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        for (link = &k->resolving; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        w->on = NULL;
        w->next = NULL;
}

static void waiter_add(struct kernel *k, struct waiter *w)
{
        if (!w || w->on)
                return;
        w->on = k;
        w->cancel = waiter_remove;
        w->next = k->waiters;
        k->waiters = w;
}

void kernel_when_ready(struct kernel *k, struct waiter *w)
{
        if (k->phase == KERNEL_READY && !k->startup_id[0]) {
                w->on = NULL;
                w->done(w, k, 0, NULL);
                return;
        }
        if (k->phase == KERNEL_DEAD || k->phase == KERNEL_STOPPING) {
                w->on = NULL;
                w->done(w, k, 500, k->phase == KERNEL_DEAD ? k->reason : "Kernel was deleted");
                return;
        }
        waiter_add(k, w);
}

/* Resolves every waiter; each is detached before its done() runs. */
static void waiters_resolve(struct kernel *k, int status, const char *message)
{
        struct waiter **tail = &k->resolving;

        /* Those waiting now, not those a callback adds (the pool waits
         * again, for its warm-up). A resolve nested in a callback hears
         * the rest. */
        while (*tail)
                tail = &(*tail)->next;
        *tail = k->waiters;
        k->waiters = NULL;
        while (k->resolving) {
                struct waiter *w = k->resolving;

                k->resolving = w->next;
                w->next = NULL;
                w->on = NULL;
                w->done(w, k, status, message);
        }
}

/* ---- messages the gateway itself sends ---------------------------------- */

int kernel_send(struct kernel *k, struct zio *z, struct jp_msg *msg)
{
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        char signature[JP_SIGNATURE_HEX_LEN + 1];
        int n = jp_wire_encode(msg, k->signer, signature, frames);

        if (n < 0)
                return n;
        return zio_send(z, frames, (size_t)n);
}

static void make_header(char *out, size_t size, const char *msg_id, const char *msg_type)
{
        char date[JP_TIMESTAMP_SIZE];

        jp_timestamp_now(date);
        snprintf(out, size,
                 "{\"msg_id\":\"%s\",\"msg_type\":\"%s\",\"session\":\"%s\","
                 "\"username\":\"glovebox\",\"date\":\"%s\",\"version\":\"5.3\"}",
                 msg_id, msg_type, gateway_session, date);
}

int kernel_send_request(struct kernel *k, struct zio *z, const char *msg_type, const char *content,
                        char msg_id_out[JP_UUID_SIZE + 8])
{
        char header[512], msg_id[JP_UUID_SIZE];
        struct jp_msg msg;

        if (!z)
                return -ENOTCONN;
        jp_uuid4(msg_id);
        make_header(header, sizeof(header), msg_id, msg_type);
        jp_msg_init(&msg);
        msg.header = (struct jp_bytes){(const uint8_t *)header, strlen(header)};
        msg.parent_header = (struct jp_bytes){(const uint8_t *)"{}", 2};
        msg.metadata = (struct jp_bytes){(const uint8_t *)"{}", 2};
        msg.content = (struct jp_bytes){(const uint8_t *)content, strlen(content)};
        if (msg_id_out)
                snprintf(msg_id_out, JP_UUID_SIZE + 8, "%s", msg_id);
        return kernel_send(k, z, &msg);
}

/* Gives m to every client session of k. A session may go away while it
 * takes it (an HTTP execution that ends), so the next is taken first. */
static void deliver_all(struct kernel *k, struct relay_msg *m)
{
        struct session *s = k->sessions;

        while (s) {
                struct session *next = s->next;

                session_deliver(s, m);
                s = next;
        }
}

/* Answers every session's pending executions (which may end sessions). */
static void fail_all_pending(struct kernel *k, const char *ename, const char *evalue)
{
        struct session *s = k->sessions;

        while (s) {
                struct session *next = s->next;

                session_fail_pending(s, ename, evalue);
                s = next;
        }
}

void kernel_broadcast_status(struct kernel *k, const char *state)
{
        json_t *content = json_pack("{s:s}", "execution_state", state);
        struct relay_msg *m = content ? relay_msg_make(JP_IOPUB, "status", NULL, content) : NULL;

        json_decref(content);
        if (!m)
                return;
        deliver_all(k, m);
        relay_msg_unref(&m);
}

/* ---- the kernel's sockets and the ready handshake ----------------------- */

static void close_own_sockets(struct kernel *k)
{
        zio_close(&k->iopub);
        zio_close(&k->shell);
        zio_close(&k->control);
        loop_timer_stop(&k->probe_timer);
}

static int open_own_sockets(struct kernel *k)
{
        char endpoint[PATH_MAX + 16];
        long long max = cfg->max_message_bytes;
        int rc;

        snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix, k->ipc_separator,
                 HOSTMSG_PORT(JP_IOPUB));
        rc = zio_open(ZMQ_SUB, endpoint, NULL, max, on_iopub, k, &k->iopub);
        if (rc == 0)
                /* Plus one message of the largest size, which must pass
                 * whole even right after another. */
                zio_set_queue(k->iopub, (size_t)(cfg->iopub_queue_bytes + cfg->max_message_bytes),
                              on_iopub_dropped);
        snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix, k->ipc_separator,
                 HOSTMSG_PORT(JP_SHELL));
        if (rc == 0)
                rc = zio_open(ZMQ_DEALER, endpoint, NULL, max, on_own_reply, k, &k->shell);
        snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix, k->ipc_separator,
                 HOSTMSG_PORT(JP_CONTROL));
        if (rc == 0)
                rc = zio_open(ZMQ_DEALER, endpoint, NULL, max, on_own_reply, k, &k->control);
        if (rc < 0)
                close_own_sockets(k);
        return rc;
}

/* Sends code as a silent execute_request on the gateway's own shell
 * socket: no execution count, no history, no execute_input for clients. */
static int send_silent(struct kernel *k, const char *code, char msg_id_out[JP_UUID_SIZE + 8])
{
        json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", true,
                                    "store_history", false, "user_expressions", "allow_stdin",
                                    false, "stop_on_error", true);
        char *text = content ? json_dumps(content, JSON_COMPACT) : NULL;
        int rc = text ? kernel_send_request(k, k->shell, "execute_request", text, msg_id_out)
                      : -ENOMEM;

        json_decref(content);
        free(text);
        return rc;
}

int kernel_set_startup_code(struct kernel *k, const char *code)
{
        char *copy = code ? strdup(code) : NULL;

        if (code && !copy)
                return -ENOMEM;
        free(k->startup_code);
        k->startup_code = copy;
        if (copy && k->phase == KERNEL_READY && send_silent(k, copy, k->startup_id) < 0) {
                klog_warn(k->id, "cannot send the startup code");
                k->startup_id[0] = '\0';
        }
        return 0;
}

static void become_ready(struct kernel *k)
{
        loop_timer_stop(&k->probe_timer);
        loop_timer_stop(&k->deadline_timer);
        k->phase = KERNEL_READY;
        if (!k->ever_ready)
                metrics_kernel_started(k->spec->name);
        k->ever_ready = true;
        if (k->adopting)
                klog_info(k->id, "re-adopted after a restart that kept it");
        k->adopting = false;
        k->reason[0] = '\0';
        set_state(k, "idle");
        kernel_touch(k);
        klog_info(k->id, "ready (%s, pid %d)", k->spec->name, k->pid);
        /* A restart needs it again; the waiters hear once it has run. */
        k->startup_id[0] = '\0';
        if (k->startup_code && send_silent(k, k->startup_code, k->startup_id) == 0)
                return;
        if (k->startup_code) {
                klog_warn(k->id, "cannot send the startup code");
                k->startup_id[0] = '\0';
        }
        waiters_resolve(k, 0, NULL);
}

static void probe_check(struct kernel *k)
{
        if (k->phase == KERNEL_CONNECTING && k->probe_replied && k->probe_iopub)
                become_ready(k);
}

/* The kernel's first messages may be sent before our sockets connect, so
 * ask for kernel_info until both a reply and an iopub message arrive. */
static void on_probe_timer(lws_sorted_usec_list_t *sul)
{
        struct kernel *k = lws_container_of(sul, struct kernel, probe_timer);

        if (k->phase != KERNEL_CONNECTING)
                return;
        kernel_send_request(k, k->shell, "kernel_info_request", "{}", k->probe_id);
        loop_timer_start(&k->probe_timer, on_probe_timer, PROBE_INTERVAL_MS);
}

static int decode_from_kernel(struct kernel *k, enum jp_channel channel,
                              const struct jp_bytes *frames, size_t nframes, struct jp_msg *msg)
{
        int rc;

        jp_msg_init(msg);
        msg->channel = channel;
        rc = jp_wire_decode(frames, nframes, k->signer, msg);
        if (rc < 0) {
                k->bad_signatures++;
                /* A kernel's code can send these as fast as it likes. */
                klog_warn_limited(&k->log_bad_message, k->id, "dropped a %s message: %s",
                                  jp_channel_name(channel),
                                  rc == -EACCES ? "bad signature" : "malformed");
        }
        return rc;
}

/* Whether a silent execution's reply says it ran; logs why not. */
static bool reply_ok(struct kernel *k, const struct jp_msg *msg, const char *what)
{
        json_t *content = json_loadb((const char *)msg->content.ptr, msg->content.len, 0, NULL);
        const char *status = json_string_value(json_object_get(content, "status"));
        bool ok = status && strcmp(status, "ok") == 0;

        if (!ok)
                klog_warn(k->id, "%s: %s", what,
                          json_string_value(json_object_get(content, "evalue")) ?: "?");
        json_decref(content);
        return ok;
}

static void on_own_reply(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes)
{
        struct kernel *k = arg;
        char msg_id[JP_MSG_ID_SIZE], msg_type[JP_MSG_TYPE_SIZE];
        char parent_id[JP_MSG_ID_SIZE], parent_type[JP_MSG_TYPE_SIZE];
        struct jp_msg msg;

        if (decode_from_kernel(k, z == k->shell ? JP_SHELL : JP_CONTROL, frames, nframes, &msg) < 0)
                return;
        if (jp_header_fields(msg.header, msg_id, msg_type) < 0)
                return;
        if (strcmp(msg_type, "kernel_info_reply") == 0) {
                k->probe_replied = true;
                probe_check(k);
                return;
        }
        if (strcmp(msg_type, "execute_reply") != 0 ||
            jp_header_fields(msg.parent_header, parent_id, parent_type) < 0)
                return;
        if (k->startup_id[0] && strcmp(parent_id, k->startup_id) == 0) {
                /* A failed startup code is logged; the kernel stays usable. */
                reply_ok(k, &msg, "the startup code failed");
                k->startup_id[0] = '\0';
                if (k->phase == KERNEL_READY)
                        waiters_resolve(k, 0, NULL);
        } else if (k->warmup_id[0] && strcmp(parent_id, k->warmup_id) == 0) {
                bool ok = reply_ok(k, &msg, "the pool's pre-import failed");

                k->warmup_id[0] = '\0';
                waiters_resolve(k, ok ? 0 : 500, ok ? NULL : "the pre-import failed");
        }
}

/* Picks execution_state out of a status message's content. The busy/idle
 * pair around a kernel_info_request is skipped: those of the gateway's own
 * start-up probes (several may be answered after the kernel is ready) made
 * a just-started kernel look busy, and none says anything of work. */
static void track_status(struct kernel *k, const struct jp_msg *msg)
{
        char parent_id[JP_MSG_ID_SIZE], parent_type[JP_MSG_TYPE_SIZE];
        json_t *content;
        const char *state;

        if (jp_header_fields(msg->parent_header, parent_id, parent_type) == 0 &&
            strcmp(parent_type, "kernel_info_request") == 0)
                return;
        content = json_loadb((const char *)msg->content.ptr, msg->content.len, 0, NULL);
        state = json_string_value(json_object_get(content, "execution_state"));

        if (state && k->phase == KERNEL_READY &&
            (strcmp(state, "idle") == 0 || strcmp(state, "busy") == 0))
                set_state(k, state);
        json_decref(content);
}

/* Counts m in the kernel's rate window; true when it must be held back
 * because the window's rate is over --iopub-msg-rate-limit or
 * --iopub-data-rate-limit (as Jupyter Server does; statuses and the
 * messages that frame an execution always pass). */
static bool rate_exceeded(struct kernel *k, const struct relay_msg *m)
{
        double window = cfg->rate_limit_window;
        int64_t tick = (int64_t)(monotonic() / (window / RATE_BUCKETS));
        uint64_t msgs = 0, bytes = 0;
        bool over;

        if (cfg->iopub_msg_rate_limit <= 0 && cfg->iopub_data_rate_limit <= 0)
                return false;
        if (strcmp(m->msg_type, "status") == 0 || strcmp(m->msg_type, "comm_open") == 0 ||
            strcmp(m->msg_type, "execute_input") == 0)
                return false;
        /* Empty the buckets that slid out of the window since the last message. */
        for (int64_t t = k->rate.tick + 1; t <= tick && t <= k->rate.tick + RATE_BUCKETS; t++) {
                k->rate.msgs[t % RATE_BUCKETS] = 0;
                k->rate.bytes[t % RATE_BUCKETS] = 0;
        }
        if (tick > k->rate.tick + RATE_BUCKETS)
                memset(&k->rate.msgs, 0, sizeof(k->rate.msgs) + sizeof(k->rate.bytes));
        k->rate.tick = tick;
        k->rate.msgs[tick % RATE_BUCKETS]++;
        if (strcmp(m->msg_type, "stream") == 0)
                k->rate.bytes[tick % RATE_BUCKETS] += m->size;
        for (int i = 0; i < RATE_BUCKETS; i++) {
                msgs += k->rate.msgs[i];
                bytes += k->rate.bytes[i];
        }
        over = (cfg->iopub_msg_rate_limit > 0 && msgs / window > cfg->iopub_msg_rate_limit) ||
               (cfg->iopub_data_rate_limit > 0 && bytes / window > cfg->iopub_data_rate_limit);
        if (over && !k->rate.exceeded) {
                char text[512];
                struct relay_msg *notice;

                snprintf(text, sizeof(text),
                         "[glovebox] IOPub rate exceeded: outputs are held back until the rate "
                         "falls below the limit (--iopub-msg-rate-limit %g messages/s, "
                         "--iopub-data-rate-limit %g bytes/s, over %g s).\n",
                         cfg->iopub_msg_rate_limit, cfg->iopub_data_rate_limit, window);
                /* In the cell whose output is held back. */
                char *parent =
                    strndup((const char *)m->msg.parent_header.ptr, m->msg.parent_header.len);

                notice = parent ? relay_msg_notice(parent, text) : NULL;
                if (notice)
                        deliver_all(k, notice);
                relay_msg_unref(&notice);
                free(parent);
                klog_warn(k->id, "iopub rate exceeded; holding outputs back");
        }
        k->rate.exceeded = over;
        return over;
}

/* A message dropped, unread, from the iopub queue: the kernel writes faster
 * than the gateway relays. Counted; the parent of the first is kept (if it
 * is a JSON object) so that the notice lands in that cell. */
static void on_iopub_dropped(void *arg, const struct jp_bytes *frames, size_t nframes)
{
        struct kernel *k = arg;

        if (k->iopub_dropped++ == 0) {
                for (size_t i = 0; i + 3 < nframes; i++) {
                        if (frames[i].len == JP_WIRE_DELIMITER_LEN &&
                            memcmp(frames[i].ptr, JP_WIRE_DELIMITER, JP_WIRE_DELIMITER_LEN) == 0) {
                                json_t *parent = json_loadb((const char *)frames[i + 3].ptr,
                                                            frames[i + 3].len, 0, NULL);

                                free(k->iopub_dropped_parent);
                                k->iopub_dropped_parent = json_is_object(parent)
                                                              ? json_dumps(parent, JSON_COMPACT)
                                                              : NULL;
                                json_decref(parent);
                                break;
                        }
                }
        }
        klog_warn_limited(&k->log_iopub_dropped, k->id,
                          "dropped an iopub message: the kernel writes faster than the gateway "
                          "relays (--iopub-queue-bytes)");
}

/* Tells every client how many outputs were dropped before the next one. */
static void tell_iopub_dropped(struct kernel *k)
{
        char text[384];
        struct relay_msg *notice;

        snprintf(text, sizeof(text),
                 "[glovebox] %llu output messages were dropped: the kernel wrote faster than "
                 "the gateway could relay, and %lld bytes (--iopub-queue-bytes) were already "
                 "waiting.\n",
                 (unsigned long long)k->iopub_dropped, (long long)cfg->iopub_queue_bytes);
        notice = relay_msg_notice(k->iopub_dropped_parent, text);
        if (notice)
                deliver_all(k, notice);
        relay_msg_unref(&notice);
        free(k->iopub_dropped_parent);
        k->iopub_dropped_parent = NULL;
        k->iopub_dropped = 0;
}

static void on_iopub(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes)
{
        struct kernel *k = arg;
        struct relay_msg *m;
        struct jp_msg msg;

        if (k->iopub_dropped)
                tell_iopub_dropped(k);

        if (decode_from_kernel(k, JP_IOPUB, frames, nframes, &msg) < 0)
                return;
        m = relay_msg_new(&msg, z);
        if (!m) {
                klog_warn_limited(&k->log_bad_message, k->id,
                                  "dropped an iopub message without msg_id/msg_type");
                return;
        }
        kernel_touch(k);
        metrics_relayed(false, m->size);
        if (strcmp(m->msg_type, "status") == 0)
                track_status(k, &msg);
        if (k->phase == KERNEL_CONNECTING) {
                k->probe_iopub = true;
                probe_check(k);
        }
        if (rate_exceeded(k, m)) {
                relay_msg_unref(&m);
                return;
        }
        deliver_all(k, m);
        relay_msg_unref(&m);
}

/* ---- the kernel-host's reports ------------------------------------------ */

static void kernel_free(struct kernel *k)
{
        struct kernel **link;

        for (link = &kernels; *link; link = &(*link)->next) {
                if (*link == k) {
                        *link = k->next;
                        break;
                }
        }
        while (k->sessions) {
                struct session *s = k->sessions;

                session_destroy(&s, 1001, "kernel shut down");
        }
        close_own_sockets(k);
        kernel_output_destroy(&k->output);
        if (k->ipc_root_fd >= 0)
                close(k->ipc_root_fd);
        loop_timer_stop(&k->deadline_timer);
        loop_timer_stop(&k->grace_timer);
        sandbox_waiter_cancel(&k->sandbox_wait);
        sandbox_unref(&k->sandbox);
        jp_signer_destroy(&k->signer);
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
        if (all_gone && !kernels) {
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
        waiters_resolve(k, status, message);
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
static int set_ipc_prefix(struct kernel *k, const char *reported)
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
        if (set_ipc_prefix(k, m->ipc_prefix) < 0 || open_own_sockets(k) < 0) {
                snprintf(k->reason, sizeof(k->reason), "cannot connect to the kernel's sockets");
                host_stop(k->id);
                return;
        }
        session_connect_all(k);
        /* The kernel's own "starting" is usually sent before anyone
         * listens; clients of a restarted kernel hear it from us. */
        kernel_broadcast_status(k, "starting");
        k->phase = KERNEL_CONNECTING;
        k->probe_replied = false;
        k->probe_iopub = false;
        on_probe_timer(&k->probe_timer);
}

/* A start that failed, or a kernel that died, for the reason in k->reason. */
static void handle_death(struct kernel *k)
{
        bool retry;

        close_own_sockets(k);
        loop_timer_stop(&k->deadline_timer);
        loop_timer_stop(&k->grace_timer);
        k->pid = 0;
        k->running = false;
        if (k->phase == KERNEL_STOPPING) {
                finish(k, 0, NULL);
                return;
        }
        if (k->phase == KERNEL_RESTARTING) {
                /* Asked for: the old process is gone, start the new one.
                 * Executions it was running will not finish. */
                fail_all_pending(k, "KernelRestarted", "the kernel was restarted");
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
        fail_all_pending(k, k->oom ? "KernelOutOfMemory" : "KernelDied", k->reason);
        set_state(k, "dead");
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
                waiters_resolve(k, 500, k->reason);
                return;
        }
        k->restarts++;
        metrics_kernel_restarted(k->spec->name, true);
        klog_info(k->id, "restarting automatically (%d of %lld)", k->restarts,
                  (long long)cfg->max_restarts);
        set_state(k, "restarting");
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

static const struct host_process_ops kernel_process_ops = {on_started, on_start_failed, on_exited};

/* ---- starting, restarting, stopping ------------------------------------- */

static void on_deadline(lws_sorted_usec_list_t *sul)
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
        int rc;

        k->phase = KERNEL_STARTING;
        k->reason[0] = '\0';
        loop_timer_start(&k->deadline_timer, on_deadline, cfg->kernel_start_timeout * 1000.0);
        if (k->sandbox && k->sandbox->phase == SANDBOX_GONE && k->owns_sandbox) {
                /* The new one gets the same egress (none if out of memory). */
                if (k->sandbox->network.enabled)
                        egress_network_copy(&k->sandbox->network, &network);
                sandbox_unref(&k->sandbox);
        }
        if (!k->sandbox) {
                rc = templates_sandbox_new(k->spec, &k->limits, strcmp(cfg->sandbox, "none") != 0,
                                           &network, &k->sandbox);
                egress_network_clear(&network);
                if (rc < 0) {
                        snprintf(k->reason, sizeof(k->reason), "cannot ask for a sandbox: %s",
                                 strerror(-rc));
                        handle_death(k);
                        return;
                }
                k->owns_sandbox = true;
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
        if (id && (strlen(id) >= JP_UUID_SIZE || find_any(id)))
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
        set_state(k, "starting");
        kernel_touch(k);
        k->next = kernels;
        kernels = k;
        waiter_add(k, w);
        klog_info(k->id, "starting %s%s", spec->name, pooled ? " for the pool" : "");
        launch(k);
        *out = find_any(k->id);
        return *out ? 0 : -EIO;
fail:
        jp_strv_free(k->env);
        jp_signer_destroy(&k->signer);
        free(k);
        return rc;
}

int kernel_start(const struct jp_kernelspec *spec, char *const *env,
                 const struct hostmsg_limits *limits, struct sandbox *sandbox,
                 struct waiter *w, struct kernel **out)
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

int kernel_warm_up(struct kernel *k, const char *code, struct waiter *w)
{
        int rc = send_silent(k, code, k->warmup_id);

        if (rc < 0) {
                k->warmup_id[0] = '\0';
                return rc;
        }
        waiter_add(k, w);
        return 0;
}

size_t kernels_pooled(const struct jp_kernelspec *spec, size_t *warm)
{
        size_t n = 0;

        *warm = 0;
        for (struct kernel *k = kernels; k; k = k->next) {
                if (k->pooled && k->spec == spec && k->phase != KERNEL_STOPPING) {
                        n++;
                        *warm += k->warm && k->phase == KERNEL_READY;
                }
        }
        return n;
}

struct kernel *kernel_pool_claim(const struct jp_kernelspec *spec)
{
        for (struct kernel *k = kernels; k; k = k->next) {
                if (k->pooled && k->warm && k->spec == spec && k->phase == KERNEL_READY) {
                        k->pooled = false;
                        /* Counted from now on for the tenant that takes it. */
                        snprintf(k->owner, sizeof(k->owner), "%s", tenants_owner_now());
                        k->restarts = 0;
                        kernel_touch(k);
                        klog_info(k->id, "taken from the pool");
                        return k;
                }
        }
        return NULL;
}

struct kernel *kernel_pool_spare(const struct jp_kernelspec *spec)
{
        struct kernel *found = NULL;

        /* A cold one first: it has cost the least so far. */
        for (struct kernel *k = kernels; k; k = k->next) {
                if (k->pooled && k->spec == spec && k->phase != KERNEL_STOPPING &&
                    (!found || found->warm))
                        found = k;
        }
        return found;
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
        waiter_add(k, w);
        klog_info(k->id, "restart requested");
        metrics_kernel_restarted(k->spec->name, false);
        k->restarts = 0;
        k->last_death[0] = '\0';
        /* No "restarting" status here: Jupyter clients read it as an
         * automatic restart and reconnect on their own. */
        switch (k->phase) {
        case KERNEL_READY:
                k->phase = KERNEL_RESTARTING;
                set_state(k, "restarting");
                request_exit(k, true);
                break;
        case KERNEL_DEAD:
                set_state(k, "restarting");
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
                waiter_add(k, w);
                return;
        }
        klog_info(k->id, "shutting down");
        /* Anyone waiting for it to become ready will not see that. */
        waiters_resolve(k, 404, "Kernel was deleted");
        waiter_add(k, w);
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

/* ---- models --------------------------------------------------------------- */

json_t *kernel_model(const struct kernel *k)
{
        char last_activity[JP_TIMESTAMP_SIZE];
        json_t *model, *not_enforced;

        jp_timestamp_format(&k->last_activity, last_activity);
        model = json_pack("{s:s, s:s, s:s, s:s, s:i}", "id", k->id, "name", k->spec->name,
                          "last_activity", last_activity, "execution_state", k->execution_state,
                          "connections", k->connections);

        /* Why the kernel last died, until a restart is asked for: after an
         * automatic restart it explains the lost state. */
        if (model && k->last_death[0])
                json_object_set_new(model, "reason", json_string(k->last_death));
        /* Egress, when its sandbox has any (gateway/kernels/egress.h). */
        if (model && k->sandbox && k->sandbox->network.enabled)
                json_object_set_new(model, "network", egress_describe(&k->sandbox->network));
        /* Limits this host cannot enforce, if any (README, limits). */
        not_enforced = limits_not_enforced(host_controllers(), strcmp(cfg->sandbox, "none") != 0);
        if (model && json_array_size(not_enforced))
                json_object_set(model, "limits_not_enforced", not_enforced);
        json_decref(not_enforced);
        return model;
}

json_t *kernels_model(void)
{
        json_t *list = json_array();

        for (struct kernel *k = kernels; list && k; k = k->next) {
                if (k->phase != KERNEL_STOPPING && !k->pooled && tenants_may_reach(k->owner))
                        json_array_append_new(list, kernel_model(k));
        }
        return list;
}

/* ---- environment -------------------------------------------------------- */

static bool env_name_valid(const char *name)
{
        if (!((name[0] >= 'A' && name[0] <= 'Z') || (name[0] >= 'a' && name[0] <= 'z') ||
              name[0] == '_'))
                return false;
        for (const char *p = name; *p; p++) {
                if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                      (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        }
        /* A kernel in a pid namespace must not watch for a parent pid: its
         * parent there is the sandbox's init (DESIGN §4). */
        return strcmp(name, "JPY_PARENT_PID") != 0 && strlen(name) <= 128;
}

/* Appends "NAME=value" for each member of obj to env. */
int kernel_env_append(json_t *obj, char ***env, size_t *n, char *err, size_t errlen)
{
        const char *name;
        json_t *value;

        json_object_foreach(obj, name, value) {
                const char *v = json_string_value(value);
                size_t len;
                char *entry, **grown;

                if (!env_name_valid(name)) {
                        snprintf(err, errlen, "invalid environment variable name \"%.64s\"", name);
                        return -EINVAL;
                }
                if (!v || strlen(v) != json_string_length(value)) {
                        snprintf(err, errlen,
                                 "environment variable %s must be a string without NUL", name);
                        return -EINVAL;
                }
                if (strlen(name) + 1 + json_string_length(value) > HOSTMSG_MAX_STRING) {
                        snprintf(err, errlen,
                                 "environment variable %s is %zu bytes as NAME=value; one may be "
                                 "at most %d bytes, Linux's limit (MAX_ARG_STRLEN)",
                                 name, strlen(name) + 1 + json_string_length(value),
                                 HOSTMSG_MAX_STRING);
                        return -EINVAL;
                }
                if (*n >= MAX_KERNEL_ENV) {
                        snprintf(err, errlen, "too many environment variables: at most %d",
                                 MAX_KERNEL_ENV);
                        return -EINVAL;
                }
                len = strlen(name) + strlen(v) + 2;
                entry = malloc(len);
                grown = realloc(*env, (*n + 2) * sizeof(char *));
                if (!entry || !grown) {
                        free(entry);
                        if (grown)
                                *env = grown;
                        return -ENOMEM;
                }
                *env = grown;
                snprintf(entry, len, "%s=%s", name, v);
                (*env)[(*n)++] = entry;
                (*env)[*n] = NULL;
        }
        return 0;
}

/* Reads {"memory_mb", "cpus", "pids", "disk_mb"} within the server maxima. */
/* ---- whole registry ------------------------------------------------------- */

static lws_sorted_usec_list_t cull_timer;

/* Shuts down kernels idle for --cull-idle-timeout, sparing connected and
 * busy ones unless told otherwise. */
static void on_cull(lws_sorted_usec_list_t *sul)
{
        double now = monotonic();
        struct kernel *k = kernels;

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
        if (jp_uuid4(gateway_session) < 0)
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
        struct kernel *k = kernels;

        shutting_down = true;
        loop_timer_stop(&cull_timer);
        if (!kernels) {
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
        while (kernels)
                kernel_free(kernels);
}

/* ---- restart and keep (gateway/kernels/keep.h) ----------------------------------- */

/* The path the kernel-host reported for the kernel's sockets: relative to
 * its sandbox's root when we reach it through a descriptor of that root. */
static const char *reported_ipc_prefix(const struct kernel *k)
{
        char through[64];
        size_t n;

        if (k->ipc_root_fd < 0)
                return k->ipc_prefix;
        n = (size_t)snprintf(through, sizeof(through), "/proc/self/fd/%d/", k->ipc_root_fd);
        return strncmp(k->ipc_prefix, through, n) == 0 ? k->ipc_prefix + n : NULL;
}

json_t *kernels_keep_record(void)
{
        json_t *list = json_array();

        for (struct kernel *k = kernels; list && k; k = k->next) {
                const char *ipc = reported_ipc_prefix(k);
                struct sandbox *sb = k->sandbox;
                json_t *env, *entry;

                /* Only a ready kernel in a sandbox of its own can be taken
                 * over as it is; the rest is shut down with the old image. */
                if (k->pooled || k->phase != KERNEL_READY || !k->owns_sandbox || !sb || !ipc ||
                    sandbox_keep(sb) < 0) {
                        if (!k->pooled)
                                klog_warn(k->id, "not kept across the restart (%s)",
                                          k->phase != KERNEL_READY ? "not ready"
                                          : !k->owns_sandbox       ? "in a shared sandbox"
                                                                   : "its sandbox has egress");
                        continue;
                }
                env = json_array();
                for (size_t i = 0; env && k->env && k->env[i]; i++)
                        json_array_append_new(env, json_string(k->env[i]));
                entry = json_pack(
                    "{s:s, s:s, s:s, s:s, s:o, s:i, s:s, s:{s:s, s:I, s:I, s:I, s:I, s:i, s:i, "
                    "s:b, s:i, s:i, s:s, s:i, s:i}}",
                    "id", k->id, "kernelspec", k->spec->name, "owner", k->owner, "key", k->key,
                    "env", env ? env : json_array(), "pid", k->pid, "ipc", ipc, "sandbox", "id",
                    sb->id, "memory_mb", (json_int_t)sb->limits.memory_mb, "cpu_millis",
                    (json_int_t)sb->limits.cpu_millis, "pids", (json_int_t)sb->limits.pids,
                    "disk_mb", (json_int_t)sb->limits.disk_mb, "init_pid", sb->init_pid, "user_uid",
                    (int)sb->user_uid, "has_root", sb->has_root, "root_uid", (int)sb->root_uid,
                    "root_gid", (int)sb->root_gid, "root", sb->root, "root_fd", sb->root_fd,
                    "user_gid", (int)sb->user_gid);
                if (entry && json_object_set_new(entry, "sessions", session_keep_record(k)) < 0) {
                        json_decref(entry);
                        entry = NULL;
                }
                if (!entry || json_array_append_new(list, entry) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

int kernel_adopt(const struct kernel_kept *kept, struct sandbox *sb, struct kernel **out)
{
        const struct jp_kernelspec *spec = jp_kernelspec_find(specs, kept->kernelspec);
        struct kernel *k;
        size_t nenv = 0;
        int rc = -ENOMEM;

        *out = NULL;
        if (!spec)
                return -ENOENT;
        if (find_any(kept->id))
                return -EEXIST;
        k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        snprintf(k->id, sizeof(k->id), "%s", kept->id);
        snprintf(k->owner, sizeof(k->owner), "%s", kept->owner);
        snprintf(k->key, sizeof(k->key), "%s", kept->key);
        while (kept->env && kept->env[nenv])
                nenv++;
        k->env = calloc(nenv + 1, sizeof(char *));
        for (size_t i = 0; k->env && i < nenv; i++) {
                k->env[i] = strdup(kept->env[i]);
                if (!k->env[i])
                        goto fail;
        }
        if (!k->env)
                goto fail;
        rc = jp_signer_new(k->key, strlen(k->key), &k->signer);
        if (rc < 0)
                goto fail;
        rc = host_listen(k->id, NULL, &kernel_process_ops, k);
        if (rc < 0)
                goto fail;
        k->spec = spec;
        k->ipc_separator = specs_ipc_separator(spec);
        k->ipc_root_fd = -1;
        k->limits = sb->limits;
        k->sandbox = sb;
        k->owns_sandbox = true;
        k->ever_ready = true;
        k->running = true;
        k->adopting = true;
        k->pid = kept->pid;
        set_state(k, "starting");
        kernel_touch(k);
        k->next = kernels;
        kernels = k;
        k->phase = KERNEL_CONNECTING;
        loop_timer_start(&k->deadline_timer, on_deadline, cfg->keep_grace * 1000.0);
        if (set_ipc_prefix(k, kept->ipc) < 0 || open_own_sockets(k) < 0) {
                snprintf(k->reason, sizeof(k->reason),
                         "cannot connect to the kept kernel's sockets");
                klog_warn(k->id, "%s", k->reason);
                host_stop(k->id);
        } else {
                on_probe_timer(&k->probe_timer);
        }
        *out = k;
        return 0;
fail:
        jp_strv_free(k->env);
        jp_signer_destroy(&k->signer);
        free(k);
        return rc;
}
