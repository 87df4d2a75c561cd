#include "autoconf.h"

#include "gateway/kernels/kernels.h"
#include "gateway/kernels/kernel_private.h"
#include "gateway/core/loop.h"
#include "gateway/core/metrics.h"
#include "gateway/kernels/session.h"
#include "gateway/kernels/usage.h"
#include "protocol/log.h"
#include "protocol/wire.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each kernel's own sockets to it (the gateway's session), the handshake
 * that makes it ready, the messages the gateway itself sends, and its
 * iopub: fanned out, rate-limited, told when dropped. */

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
                 msg_id, msg_type, kernel_gateway_session, date);
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
void kernel_fail_all_pending(struct kernel *k, const char *ename, const char *evalue)
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

void kernel_close_sockets(struct kernel *k)
{
        zio_close(&k->iopub);
        zio_close(&k->shell);
        zio_close(&k->control);
        loop_timer_stop(&k->probe_timer);
}

int kernel_open_sockets(struct kernel *k)
{
        char endpoint[PATH_MAX + 16];
        long long max = config_get()->max_message_bytes;
        int rc;

        snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix, k->ipc_separator,
                 HOSTMSG_PORT(JP_IOPUB));
        rc = zio_open(ZMQ_SUB, endpoint, NULL, max, kernel_on_iopub, k, &k->iopub);
        if (rc == 0)
                /* Plus one message of the largest size, which must pass
                 * whole even right after another. */
                zio_set_queue(
                    k->iopub,
                    (size_t)(config_get()->iopub_queue_bytes + config_get()->max_message_bytes),
                    kernel_on_iopub_dropped);
        snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix, k->ipc_separator,
                 HOSTMSG_PORT(JP_SHELL));
        if (rc == 0)
                rc = zio_open(ZMQ_DEALER, endpoint, NULL, max, kernel_on_own_reply, k, &k->shell);
        snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix, k->ipc_separator,
                 HOSTMSG_PORT(JP_CONTROL));
        if (rc == 0)
                rc = zio_open(ZMQ_DEALER, endpoint, NULL, max, kernel_on_own_reply, k, &k->control);
        if (rc < 0)
                kernel_close_sockets(k);
        return rc;
}

/* Sends code as a silent execute_request on the gateway's own shell
 * socket: no execution count, no history, no execute_input for clients.
 * Never stop_on_error: a failure of the gateway's own code must not abort
 * the cells clients have queued behind it (ipykernel aborts only after a
 * cell that is not silent, but not every kernel reads it so). expression,
 * if not NULL, goes as its one user expression. */
int kernel_send_silent(struct kernel *k, const char *code, const char *expression,
                       char msg_id_out[JP_UUID_SIZE + 8])
{
        json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", true,
                                    "store_history", false, "user_expressions", "allow_stdin",
                                    false, "stop_on_error", false);
        char *text = NULL;
        int rc;

        if (content && expression &&
            json_object_set_new(json_object_get(content, "user_expressions"), "startup",
                                json_string(expression)) < 0) {
                json_decref(content);
                content = NULL;
        }
        text = content ? json_dumps(content, JSON_COMPACT) : NULL;
        rc = text ? kernel_send_request(k, k->shell, "execute_request", text, msg_id_out) : -ENOMEM;
        json_decref(content);
        free(text);
        return rc;
}

/* The startup code, as a cell or as a user expression. */
int kernel_send_startup(struct kernel *k)
{
        if (k->startup_expression)
                return kernel_send_silent(k, "", k->startup_code, k->startup_id);
        return kernel_send_silent(k, k->startup_code, NULL, k->startup_id);
}

int kernel_set_startup_code(struct kernel *k, const char *code, bool expression)
{
        char *copy = code ? strdup(code) : NULL;

        if (code && !copy)
                return -ENOMEM;
        free(k->startup_code);
        k->startup_code = copy;
        k->startup_expression = expression;
        /* A kernel being adapted sends it with the request's env. */
        if (copy && k->phase == KERNEL_READY && !k->adapting && kernel_send_startup(k) < 0) {
                klog_warn(k->id, "cannot send the startup code");
                k->startup_id[0] = '\0';
        }
        return 0;
}

static void become_ready(struct kernel *k)
{
        bool again = k->ever_ready;

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
        kernel_set_state(k, "idle");
        /* Clients of a restarted kernel heard "starting" from us; its own
         * "idle" may have gone out before their sockets joined (a
         * subscriber misses what was published before it connected): they
         * hear it from us too. */
        if (again)
                kernel_broadcast_status(k, "idle");
        kernel_touch(k);
        klog_info(k->id, "ready (%s, pid %d)", k->spec->name, k->pid);
        /* A restart needs it again; the waiters hear once it has run. */
        k->startup_id[0] = '\0';
        if (k->startup_code && kernel_send_startup(k) == 0)
                return;
        if (k->startup_code) {
                klog_warn(k->id, "cannot send the startup code");
                k->startup_id[0] = '\0';
        }
        kernel_waiters_resolve(k, 0, NULL);
}

static void probe_check(struct kernel *k)
{
        if (k->phase == KERNEL_CONNECTING && k->probe_replied && k->probe_iopub)
                become_ready(k);
}

/* The kernel's first messages may be sent before our sockets connect, so
 * ask for kernel_info until both a reply and an iopub message arrive. */
void kernel_on_probe_timer(lws_sorted_usec_list_t *sul)
{
        struct kernel *k = lws_container_of(sul, struct kernel, probe_timer);

        if (k->phase != KERNEL_CONNECTING)
                return;
        kernel_send_request(k, k->shell, "kernel_info_request", "{}", k->probe_id);
        loop_timer_start(&k->probe_timer, kernel_on_probe_timer, KERNEL_PROBE_INTERVAL_MS);
}

void kernel_probe_start(struct kernel *k)
{
        k->probe_replied = false;
        k->probe_iopub = false;
        k->probe_quick_ms = KERNEL_PROBE_QUICK_MS;
        if (config_has_zygote(config_get(), k->spec->name))
                loop_timer_start(&k->probe_timer, kernel_on_probe_timer, KERNEL_WELCOME_WAIT_MS);
        else
                kernel_on_probe_timer(&k->probe_timer);
}

int kernel_decode(struct kernel *k, const struct jp_bytes *frames, size_t nframes,
                  struct jp_msg *msg)
{
        enum jp_channel channel = msg->channel;
        int rc = jp_wire_decode(frames, nframes, k->signer, msg);

        if (rc != -EACCES || !k->old_signer) {
                /* Under the new key: the old one is done with. */
                if (rc == 0 && k->old_signer)
                        jp_signer_destroy(&k->old_signer);
                return rc;
        }
        jp_msg_init(msg);
        msg->channel = channel;
        return jp_wire_decode(frames, nframes, k->old_signer, msg);
}

static int decode_from_kernel(struct kernel *k, enum jp_channel channel,
                              const struct jp_bytes *frames, size_t nframes, struct jp_msg *msg)
{
        int rc;

        jp_msg_init(msg);
        msg->channel = channel;
        rc = kernel_decode(k, frames, nframes, msg);
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
        json_t *expression =
            json_object_get(json_object_get(content, "user_expressions"), "startup");
        const char *evaluated = json_string_value(json_object_get(expression, "status"));
        bool ok = status && strcmp(status, "ok") == 0;
        json_t *why = content;

        /* A user expression's failure is its own, in a reply that is "ok". */
        if (ok && evaluated && strcmp(evaluated, "error") == 0) {
                ok = false;
                why = expression;
        }
        if (!ok)
                klog_warn(k->id, "%s: %s: %s", what,
                          json_string_value(json_object_get(why, "ename")) ?: "?",
                          json_string_value(json_object_get(why, "evalue")) ?: "?");
        json_decref(content);
        return ok;
}

void kernel_on_own_reply(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes)
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
                if (k->phase == KERNEL_CONNECTING && !k->probe_iopub) {
                        loop_timer_start(&k->probe_timer, kernel_on_probe_timer, k->probe_quick_ms);
                        k->probe_quick_ms = fmin(2 * k->probe_quick_ms, KERNEL_PROBE_INTERVAL_MS);
                }
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
                        kernel_waiters_resolve(k, 0, NULL);
        } else if (k->warmup_id[0] && strcmp(parent_id, k->warmup_id) == 0) {
                bool ok = reply_ok(k, &msg, "the pool's pre-import failed");

                k->warmup_id[0] = '\0';
                kernel_waiters_resolve(k, ok ? 0 : 500, ok ? NULL : "the pre-import failed");
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
                kernel_set_state(k, state);
        json_decref(content);
}

/* Counts m in the kernel's rate window; true when it must be held back
 * because the window's rate is over --iopub-msg-rate-limit or
 * --iopub-data-rate-limit (as Jupyter Server does; statuses and the
 * messages that frame an execution always pass). */
static bool rate_exceeded(struct kernel *k, const struct relay_msg *m)
{
        double window = config_get()->rate_limit_window;
        int64_t tick = (int64_t)(usage_monotonic() / (window / RATE_BUCKETS));
        uint64_t msgs = 0, bytes = 0;
        bool over;

        if (config_get()->iopub_msg_rate_limit <= 0 && config_get()->iopub_data_rate_limit <= 0)
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
        over = (config_get()->iopub_msg_rate_limit > 0 &&
                msgs / window > config_get()->iopub_msg_rate_limit) ||
               (config_get()->iopub_data_rate_limit > 0 &&
                bytes / window > config_get()->iopub_data_rate_limit);
        if (over && !k->rate.exceeded) {
                char text[512];
                struct relay_msg *notice;

                snprintf(text, sizeof(text),
                         "[glovebox] IOPub rate exceeded: outputs are held back until the rate "
                         "falls below the limit (--iopub-msg-rate-limit %g messages/s, "
                         "--iopub-data-rate-limit %g bytes/s, over %g s).\n",
                         config_get()->iopub_msg_rate_limit, config_get()->iopub_data_rate_limit,
                         window);
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
void kernel_on_iopub_dropped(void *arg, const struct jp_bytes *frames, size_t nframes)
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
                 (unsigned long long)k->iopub_dropped, (long long)config_get()->iopub_queue_bytes);
        notice = relay_msg_notice(k->iopub_dropped_parent, text);
        if (notice)
                deliver_all(k, notice);
        relay_msg_unref(&notice);
        free(k->iopub_dropped_parent);
        k->iopub_dropped_parent = NULL;
        k->iopub_dropped = 0;
}

void kernel_on_iopub(void *arg, struct zio *z, const struct jp_bytes *frames, size_t nframes)
{
        struct kernel *k = arg;
        struct relay_msg *m;
        struct jp_msg msg;
        bool welcome;

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
        if (strcmp(m->msg_type, "status") == 0)
                track_status(k, &msg);
        /* JEP 65's answer to the gateway's own subscription (a zygote
         * kernel's loop sends it between requests, from the thread that
         * serves its shell): IOPub is heard and the kernel answers, which
         * is all a kernel_info_reply would have told the probe; no client
         * hears it. */
        welcome = strcmp(m->msg_type, "iopub_welcome") == 0;
        if (k->phase == KERNEL_CONNECTING) {
                k->probe_replied |= welcome;
                k->probe_iopub = true;
                probe_check(k);
        }
        if (welcome) {
                relay_msg_unref(&m);
                return;
        }
        kernel_touch(k);
        metrics_relayed(false, m->size);
        if (rate_exceeded(k, m)) {
                relay_msg_unref(&m);
                return;
        }
        deliver_all(k, m);
        relay_msg_unref(&m);
}
