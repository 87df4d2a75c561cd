#include "autoconf.h"

#include "gateway/kernels/session.h"
#include "gateway/core/loop.h"
#include "gateway/core/metrics.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"
#include "protocol/wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const enum jp_channel session_channels[3] = {JP_SHELL, JP_CONTROL, JP_STDIN};

static void park_soon(struct session *s);

/* The bytes of an execute_request's code (its "code" string decoded). */
static size_t code_bytes(struct jp_bytes content)
{
        struct jp_bytes token;
        json_t *code;
        size_t n;

        if (jp_json_string_token(content, "code", &token) < 0 || token.len < 2)
                return 0;
        if (!memchr(token.ptr, '\\', token.len))
                return token.len - 2;
        code = json_loadb((const char *)token.ptr, token.len, JSON_DECODE_ANY, NULL);
        n = json_string_length(code);
        json_decref(code);
        return n;
}

/* An execution ended: counted, timed, and one audit line (never its code). */
static void pending_done(struct session *s, const struct pending_exec *p, const char *outcome)
{
        double seconds = loop_now() - p->sent_at;
        /* The kernel's tenant: the key that started it (tenants.h). */
        const char *tenant = s->kernel->owner[0] ? s->kernel->owner : "(pool)";

        if (p->timed_out)
                outcome = "timeout";
        metrics_execution(tenant, s->kernel->spec->name, seconds, outcome, p->code_bytes);
        log_audit_execution(tenant, s->kernel->id, p->code_bytes, seconds, outcome);
}

void session_mark_timed_out(struct session *s)
{
        for (struct pending_exec *p = s ? s->pending : NULL; p; p = p->next)
                p->timed_out = true;
}

static void pending_free(struct pending_exec *p)
{
        free(p->header);
        free(p);
}

static void pending_add(struct session *s, const struct jp_msg *msg, const char *msg_id)
{
        struct pending_exec *p = calloc(1, sizeof(*p)), **link;

        if (!p)
                return;
        snprintf(p->msg_id, sizeof(p->msg_id), "%s", msg_id);
        p->sent_at = loop_now();
        p->code_bytes = code_bytes(msg->content);
        p->header = strndup((const char *)msg->header.ptr, msg->header.len);
        if (!p->header) {
                free(p);
                return;
        }
        p->next = s->pending;
        s->pending = p;
        /* A client that never reads replies must not grow this forever:
         * forget the oldest. */
        if (++s->npending > SESSION_MAX_PENDING) {
                for (link = &s->pending; (*link)->next; link = &(*link)->next)
                        ;
                pending_free(*link);
                *link = NULL;
                s->npending--;
        }
}

static void pending_remove(struct session *s, const struct jp_msg *reply)
{
        char msg_id[JP_MSG_ID_SIZE], msg_type[JP_MSG_TYPE_SIZE];

        if (!s->pending || jp_header_fields(reply->parent_header, msg_id, msg_type) < 0)
                return;
        for (struct pending_exec **link = &s->pending; *link; link = &(*link)->next) {
                if (strcmp((*link)->msg_id, msg_id) == 0) {
                        struct pending_exec *p = *link;
                        struct jp_bytes status;
                        char outcome[16] = "error";

                        if (jp_json_string_token(reply->content, "status", &status) == 0 &&
                            status.len < sizeof(outcome) && status.len >= 2)
                                snprintf(outcome, sizeof(outcome), "%.*s", (int)status.len - 2,
                                         (const char *)status.ptr + 1);
                        if (strcmp(outcome, "ok") != 0 && strcmp(outcome, "aborted") != 0)
                                snprintf(outcome, sizeof(outcome), "error");
                        pending_done(s, p, outcome);
                        *link = p->next;
                        pending_free(p);
                        s->npending--;
                        park_soon(s);
                        return;
                }
        }
}

void session_fail_pending(struct session *s, const char *ename, const char *evalue)
{
        struct pending_exec *list = NULL;

        /* Oldest first, the order the client sent them in. */
        while (s->pending) {
                struct pending_exec *p = s->pending;

                s->pending = p->next;
                p->next = list;
                list = p;
        }
        s->npending = 0;
        while (list) {
                struct pending_exec *p = list;
                char line[512];
                json_t *error, *reply;
                struct relay_msg *m;

                list = p->next;
                pending_done(s, p, strcmp(ename, "KernelRestarted") == 0 ? "aborted" : "error");
                snprintf(line, sizeof(line), "%s: %s", ename, evalue);
                error = json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", evalue,
                                  "traceback", line);
                reply = json_pack("{s:s, s:s, s:s, s:[s], s:n}", "status", "error", "ename",
                                  ename, "evalue", evalue, "traceback", line, "execution_count");
                m = error ? relay_msg_make(JP_IOPUB, "error", p->header, error) : NULL;
                if (m)
                        session_deliver(s, m);
                relay_msg_unref(&m);
                m = reply ? relay_msg_make(JP_SHELL, "execute_reply", p->header, reply) : NULL;
                if (m)
                        session_deliver(s, m);
                relay_msg_unref(&m);
                json_decref(error);
                json_decref(reply);
                pending_free(p);
        }
}

static void on_kernel_message(void *arg, struct zio *z, const struct jp_bytes *frames,
                              size_t nframes)
{
        struct session *s = arg;
        struct kernel *k = s->kernel;
        struct relay_msg *m;
        struct jp_msg msg;
        int rc;

        jp_msg_init(&msg);
        for (int i = 0; i < 3; i++) {
                if (s->sockets[i] == z)
                        msg.channel = session_channels[i];
        }
        rc = kernel_decode(k, frames, nframes, &msg);
        if (rc < 0) {
                /* Never relayed: a kernel's code can read its own key, but
                 * nothing else can forge a message to this client. */
                k->bad_signatures++;
                klog_warn_limited(&k->log_bad_message, k->id, "dropped a %s message: %s",
                                  jp_channel_name(msg.channel),
                                  rc == -EACCES ? "bad signature" : "malformed");
                return;
        }
        m = relay_msg_new(&msg, z);
        if (!m) {
                klog_warn_limited(&k->log_bad_message, k->id,
                                  "dropped a %s message without msg_id/msg_type",
                                  jp_channel_name(msg.channel));
                return;
        }
        kernel_touch(k);
        metrics_relayed(false, m->size);
        if (msg.channel == JP_SHELL && strcmp(m->msg_type, "execute_reply") == 0)
                pending_remove(s, &msg);
        session_deliver(s, m);
        relay_msg_unref(&m);
}

/* A fresh ZMQ identity for a session's sockets. Shell and stdin must share
 * one: the kernel sends an input_request to the identity that sent the
 * execute_request. 0 or -EIO. */
static int new_identity(char out[ZIO_IDENTITY_SIZE])
{
        snprintf(out, ZIO_IDENTITY_SIZE, "gb-");
        return jp_random_hex(out + 3, 16) < 0 ? -EIO : 0;
}

/* Connects those of socks (shell, control, stdin) not open yet to k's,
 * under identity, fn(arg) hearing them. 0 or -errno. */
static int connect_channels(struct kernel *k, const char *identity, zio_fn fn, void *arg,
                            struct zio *socks[3])
{
        long long max = config_get()->max_message_bytes;
        char endpoint[PATH_MAX + 16];
        int rc = 0;

        for (int i = 0; rc == 0 && i < 3; i++) {
                if (socks[i])
                        continue;
                snprintf(endpoint, sizeof(endpoint), "ipc://%s%c%d", k->ipc_prefix,
                         k->ipc_separator, HOSTMSG_PORT(session_channels[i]));
                rc = zio_open(ZMQ_DEALER, endpoint, identity, max, fn, arg, &socks[i]);
        }
        return rc;
}

/* Nothing is sent from the sockets opened ahead, so nothing is answered
 * to them before a session takes them. */
static void on_ahead_message(void *arg, struct zio *z, const struct jp_bytes *frames,
                             size_t nframes)
{
        struct kernel *k = arg;

        (void)z;
        (void)frames;
        (void)nframes;
        klog_warn_limited(&k->log_bad_message, k->id,
                          "dropped a message to sockets no session has taken");
}

void session_ahead_close(struct kernel *k)
{
        loop_timer_stop(&k->ahead_timer);
        for (int i = 0; i < 3; i++)
                zio_close(&k->ahead[i]);
}

int session_ahead_open(struct kernel *k)
{
        int rc;

        if (k->ahead[0] || !k->ipc_prefix[0])
                return 0;
        rc = new_identity(k->ahead_identity);
        if (rc == 0)
                rc = connect_channels(k, k->ahead_identity, on_ahead_message, k, k->ahead);
        if (rc < 0)
                session_ahead_close(k);
        return rc;
}

static void on_ahead_unused(lws_sorted_usec_list_t *sul)
{
        struct kernel *k = lws_container_of(sul, struct kernel, ahead_timer);

        session_ahead_close(k);
}

void session_ahead_claimed(struct kernel *k)
{
        if (k->ahead[0])
                loop_timer_start(&k->ahead_timer, on_ahead_unused, SESSION_PARK_SECONDS * 1000.0);
}

/* s, just made, takes the sockets opened ahead for k's next session. */
static void take_ahead(struct session *s)
{
        struct kernel *k = s->kernel;

        loop_timer_stop(&k->ahead_timer);
        snprintf(s->identity, sizeof(s->identity), "%s", k->ahead_identity);
        for (int i = 0; i < 3; i++) {
                s->sockets[i] = k->ahead[i];
                k->ahead[i] = NULL;
                zio_rebind(s->sockets[i], on_kernel_message, s);
        }
        klog_debug(k->id, "session %s took the sockets opened ahead", fleetid_short(s->id).s);
}

/* Connects the client's sockets once the kernel's socket paths are known. */
static int session_connect(struct session *s)
{
        if (s->parked)
                return 0;
        return connect_channels(s->kernel, s->identity, on_kernel_message, s, s->sockets);
}

static void on_park(lws_sorted_usec_list_t *sul)
{
        struct session *s = lws_container_of(sul, struct session, park_timer);

        if (s->sink || s->npending || s->parked)
                return;
        for (int i = 0; i < 3; i++)
                zio_close(&s->sockets[i]);
        s->parked = true;
        klog_debug(s->kernel->id, "session %s parked: its sockets are closed until it returns",
                   fleetid_short(s->id).s);
}

/* A lingering session that waits for no reply gives its three sockets
 * back (six descriptors here, three in the kernel) after
 * SESSION_PARK_SECONDS: a kernel's idle sessions then cost no descriptors,
 * so that a thousand kernels fit in a process's limit. Its queue and
 * history stay; it reconnects with its identity when it is used again. */
static void park_soon(struct session *s)
{
        if (!s->sink && !s->npending && !s->parked && !s->private)
                loop_timer_start(&s->park_timer, on_park, SESSION_PARK_SECONDS * 1000.0);
}

static int unpark(struct session *s)
{
        loop_timer_stop(&s->park_timer);
        if (!s->parked)
                return 0;
        s->parked = false;
        return s->kernel->ipc_prefix[0] ? session_connect(s) : 0;
}

static void on_linger_expired(lws_sorted_usec_list_t *sul)
{
        struct session *s = lws_container_of(sul, struct session, linger_timer);

        klog_debug(s->kernel->id, "session %s expired", fleetid_short(s->id).s);
        session_destroy(&s, 1001, "session expired");
}

/* 64-bit FNV-1a of a session id, never 0 (an empty slot): evicted ids are
 * remembered by hash, 8 bytes each instead of 128. */
static uint64_t id_hash(const char *id)
{
        uint64_t h = 14695981039346656037ULL;

        for (const unsigned char *p = (const unsigned char *)id; *p; p++)
                h = (h ^ *p) * 1099511628211ULL;
        return h ? h : 1;
}

/* Was id evicted (and not yet told)? Forgets it: the client is told once. */
static bool evicted_take(struct kernel *k, const char *id)
{
        uint64_t h = id_hash(id);

        for (unsigned i = 0; i < KERNEL_EVICTED_IDS; i++) {
                if (k->evicted_sessions[i] == h) {
                        k->evicted_sessions[i] = 0;
                        return true;
                }
        }
        return false;
}

/* Queues, for the client that comes back to an evicted session, what
 * happened to it: its queued outputs are gone. */
static void tell_evicted(struct session *s)
{
        char text[512];
        struct relay_msg *m;

        snprintf(text, sizeof(text),
                 "[glovebox] this session (%.64s) was closed while its client was away: more "
                 "than %lld disconnected sessions of this kernel were waiting for their clients "
                 "(--max-lingering-sessions) and it had waited longest. Outputs published "
                 "meanwhile were not kept.\n",
                 s->id, (long long)config_get()->max_lingering_sessions);
        m = relay_msg_notice(NULL, text);
        if (m)
                session_deliver(s, m);
        relay_msg_unref(&m);
}

/* Every lingering session holds three sockets (six descriptors here, three
 * in the kernel, whose own limit is a few thousand): past the bound the one
 * that has waited longest goes, so that clients that never come back (a
 * fresh session_id for each connect) cannot exhaust either side. */
static void evict_lingering(struct kernel *k, const struct session *keep)
{
        const int64_t max = config_get()->max_lingering_sessions;

        for (;;) {
                struct session *oldest = NULL;
                int64_t lingering = 0;

                for (struct session *s = k->sessions; s; s = s->next) {
                        if (s->sink || s->private)
                                continue;
                        lingering++;
                        if (s != keep && (!oldest || s->detached_at < oldest->detached_at))
                                oldest = s;
                }
                if (lingering <= max || !oldest)
                        return;
                klog_info_limited(&k->log_evicted, k->id,
                                  "evicted lingering session %s (--max-lingering-sessions)",
                                  fleetid_short(oldest->id).s);
                k->evicted_sessions[k->evicted_next] = id_hash(oldest->id);
                k->evicted_next = (k->evicted_next + 1) % KERNEL_EVICTED_IDS;
                session_destroy(&oldest, 1001, "session evicted");
        }
}

struct session *session_open(struct kernel *k, const char *id)
{
        const struct config *cfg = config_get();
        struct session *s;
        char fresh[JP_UUID_SIZE];

        if (!id || !*id) {
                if (jp_uuid4(fresh) < 0)
                        return NULL;
                id = fresh;
        }
        for (s = k->sessions; s; s = s->next) {
                if (strcmp(s->id, id) == 0)
                        return s;
        }
        s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->kernel = k;
        snprintf(s->id, sizeof(s->id), "%s", id);
        if (k->ahead[0]) {
                take_ahead(s);
        } else if (new_identity(s->identity) < 0) {
                free(s);
                return NULL;
        }
        /* Room for --replay-bytes of backlog plus one message of the largest
         * size, which must pass whole even right after another. */
        outbox_init(&s->outbox, (size_t)(cfg->replay_bytes + cfg->max_message_bytes),
                    (size_t)cfg->replay_messages);
        if (k->ipc_prefix[0] && session_connect(s) < 0) {
                klog_warn(k->id, "cannot open a client session's sockets");
                for (int i = 0; i < 3; i++)
                        zio_close(&s->sockets[i]);
                free(s);
                return NULL;
        }
        s->next = k->sessions;
        k->sessions = s;
        if (evicted_take(k, s->id))
                tell_evicted(s);
        return s;
}

void session_connect_all(struct kernel *k)
{
        for (struct session *s = k->sessions; s; s = s->next) {
                if (session_connect(s) < 0)
                        klog_warn(k->id, "cannot connect a client session's sockets");
        }
}

void session_disconnect_all(struct kernel *k)
{
        struct session *s = k->sessions;

        session_ahead_close(k);
        while (s) {
                struct session *next = s->next;

                for (int i = 0; i < 3; i++)
                        zio_close(&s->sockets[i]);
                /* May end the session (an HTTP execution): last. */
                session_fail_pending(s, "KernelPaused",
                                     "the kernel was paused before this request reached it");
                s = next;
        }
}

void session_reconnect_all(struct kernel *k)
{
        struct session *s = k->sessions;

        session_ahead_close(k);
        while (s) {
                struct session *next = s->next;

                for (int i = 0; i < 3; i++)
                        zio_close(&s->sockets[i]);
                /* May end the session (an HTTP execution): last. */
                session_fail_pending(s, "KernelRestarted",
                                     "the kernel restarted before this request reached it");
                s = next;
        }
        session_connect_all(k);
}

/* The history's byte bound: SESSION_HISTORY_BYTES, or --replay-bytes if
 * that is less (an operator who keeps little backlog keeps little here). */
static size_t history_max_bytes(void)
{
        int64_t replay = config_get()->replay_bytes;

        return replay < SESSION_HISTORY_BYTES ? (size_t)replay : SESSION_HISTORY_BYTES;
}

static struct relay_msg **history_slot(struct session_history *h, size_t i)
{
        return &h->ring[(h->head + i) % SESSION_HISTORY_MESSAGES];
}

static void history_forget_oldest(struct session_history *h)
{
        struct relay_msg **slot = history_slot(h, 0);

        h->bytes -= (*slot)->size;
        relay_msg_unref(slot);
        h->head = (h->head + 1) % SESSION_HISTORY_MESSAGES;
        h->count--;
        h->forgot = true;
}

static void history_clear(struct session_history *h)
{
        while (h->count)
                history_forget_oldest(h);
        free(h->ring);
        memset(h, 0, sizeof(*h));
}

void session_delivered(struct session *s, struct relay_msg *m)
{
        struct session_history *h = &s->history;

        /* Nobody comes back to a private session: nothing to replay. */
        if (s->private)
                return;
        if (!h->ring) {
                h->ring = calloc(SESSION_HISTORY_MESSAGES, sizeof(*h->ring));
                if (!h->ring)
                        return;
        }
        if (h->count == SESSION_HISTORY_MESSAGES)
                history_forget_oldest(h);
        *history_slot(h, h->count) = relay_msg_ref(m);
        h->count++;
        h->bytes += m->size;
        /* The newest stays whatever its size, as in the outbox. */
        while (h->count > 1 && h->bytes > history_max_bytes())
                history_forget_oldest(h);
}

/* Queues again, ahead of everything waiting, what the history holds after
 * last_msg_id; they leave the history, to join it again once written. */
static void history_replay(struct session *s, const char *last_msg_id)
{
        struct session_history *h = &s->history;
        struct relay_msg *notice;
        size_t found = h->count, replayed = 0;
        char text[256];

        /* (Newest first: the client handled one of the last, usually.) */
        for (size_t i = h->count; i-- > 0;) {
                if (strcmp((*history_slot(h, i))->msg_id, last_msg_id) == 0) {
                        found = i;
                        break;
                }
        }
        if (found < h->count) {
                while (h->count > found + 1) {
                        struct relay_msg **slot = history_slot(h, h->count - 1);
                        struct relay_msg *m = *slot;

                        *slot = NULL;
                        h->count--;
                        h->bytes -= m->size;
                        replayed++;
                        /* Newest first, so that the oldest ends at the head.
                         * (On failure m is released: it is lost, as before.) */
                        outbox_unpop(&s->outbox, m);
                }
                klog_debug(s->kernel->id, "session %s: replaying %zu delivered messages",
                           fleetid_short(s->id).s, replayed);
                return;
        }
        /* An id the history never held (a client's mistake, or a message
         * of another gateway) replays nothing: replaying all would repeat
         * what the client has. Only if the history has let messages go can
         * it be one of those, and then the client is told. */
        if (!h->forgot)
                return;
        snprintf(text, sizeof(text),
                 "[glovebox] outputs may be missing: the last message this client handled is "
                 "older than the %d messages (or %zu bytes) kept for its reconnect.\n",
                 SESSION_HISTORY_MESSAGES, history_max_bytes());
        notice = relay_msg_notice(NULL, text);
        if (notice)
                outbox_unpop(&s->outbox, notice);
}

void session_attach(struct session *s, struct session_sink *sink, const char *last_msg_id)
{
        struct session_sink *old = s->sink;

        if (old == sink)
                return;
        if (old) {
                /* A second connection with the same session_id replaces the
                 * first, as Jupyter Server does with a stale connection. */
                s->sink = NULL;
                s->kernel->connections--;
                old->closing(old, 1000, "replaced by a newer connection");
        }
        loop_timer_stop(&s->linger_timer);
        if (unpark(s) < 0)
                klog_warn(s->kernel->id, "cannot reopen a returning session's sockets");
        /* After the old sink let go: what it was writing is back in the
         * outbox, and what it wrote is in the history. */
        if (last_msg_id && *last_msg_id)
                history_replay(s, last_msg_id);
        s->sink = sink;
        s->kernel->connections++;
        if (s->outbox.count || s->outbox.dropped)
                sink->wake(sink);
}

void session_detach(struct session *s, struct session_sink *sink)
{
        if (s->sink != sink)
                return;
        s->sink = NULL;
        s->kernel->connections--;
        s->detached_at = loop_now();
        /* On the next turn of the loop: the sink may still be in use. */
        loop_timer_start(&s->linger_timer, on_linger_expired,
                         s->private || config_get()->max_lingering_sessions == 0
                             ? 0
                             : config_get()->session_linger * 1000.0);
        if (!s->private) {
                evict_lingering(s->kernel, s);
                park_soon(s);
        }
}

int session_send(struct session *s, struct jp_msg *msg)
{
        char msg_id[JP_MSG_ID_SIZE], msg_type[JP_MSG_TYPE_SIZE];
        struct zio *z = NULL;
        int rc;

        if (unpark(s) < 0)
                return -ENOTCONN;
        for (int i = 0; i < 3; i++) {
                if (session_channels[i] == msg->channel)
                        z = s->sockets[i];
        }
        if (!z)
                return -ENOTCONN;
        kernel_touch(s->kernel);
        rc = kernel_send(s->kernel, z, msg);
        if (rc == 0)
                metrics_relayed(true, msg->header.len + msg->parent_header.len + msg->metadata.len +
                                          msg->content.len);
        if (rc == 0 && msg->channel == JP_SHELL &&
            jp_header_fields(msg->header, msg_id, msg_type) == 0 &&
            strcmp(msg_type, "execute_request") == 0)
                pending_add(s, msg, msg_id);
        return rc;
}

void session_deliver(struct session *s, struct relay_msg *m)
{
        if (outbox_push(&s->outbox, m) < 0) {
                klog_warn(s->kernel->id, "out of memory queueing a message");
                return;
        }
        if (s->sink)
                s->sink->wake(s->sink);
}

struct relay_msg *session_next(struct session *s)
{
        char *parent = NULL;
        uint64_t dropped = outbox_take_dropped(&s->outbox, &parent);
        struct relay_msg *notice = NULL;
        char text[256];

        if (dropped == 0)
                return outbox_pop(&s->outbox);
        /* Tell the client, in the cell whose output was lost, rather than
         * let outputs go missing silently. */
        snprintf(text, sizeof(text),
                 "[glovebox] %llu output messages were dropped: the client was disconnected or "
                 "too slow and the replay buffer was full.\n",
                 (unsigned long long)dropped);
        notice = relay_msg_notice(parent, text);
        free(parent);
        return notice ? notice : outbox_pop(&s->outbox);
}

void session_destroy(struct session **sp, int code, const char *reason)
{
        struct session *s = *sp;
        struct session **link;

        if (!s)
                return;
        *sp = NULL;
        for (link = &s->kernel->sessions; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        break;
                }
        }
        if (s->sink) {
                s->kernel->connections--;
                s->sink->closing(s->sink, code, reason);
        }
        loop_timer_stop(&s->linger_timer);
        loop_timer_stop(&s->park_timer);
        for (int i = 0; i < 3; i++)
                zio_close(&s->sockets[i]);
        outbox_clear(&s->outbox);
        history_clear(&s->history);
        while (s->pending) {
                struct pending_exec *p = s->pending;

                s->pending = p->next;
                /* Nobody will hear its reply: it still has its audit line. */
                pending_done(s, p, "aborted");
                pending_free(p);
        }
        free(s);
}

json_t *session_keep_record(const struct kernel *k)
{
        json_t *list = json_array();

        for (struct session *s = k->sessions; list && s; s = s->next) {
                if (s->private)
                        continue;
                if (json_array_append_new(
                        list, json_pack("{s:s, s:s}", "id", s->id, "identity", s->identity)) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

int session_adopt(struct kernel *k, const char *id, const char *identity)
{
        struct session *s;

        if (!id[0] || strlen(id) > SESSION_ID_MAX || strlen(identity) >= sizeof(s->identity))
                return -EINVAL;
        s = session_open(k, id);
        if (!s)
                return -ENOMEM;
        /* The identity it had: the kernel routes the replies to requests
         * sent before the restart to it, and they wait here for the
         * client. */
        for (int i = 0; i < 3; i++)
                zio_close(&s->sockets[i]);
        snprintf(s->identity, sizeof(s->identity), "%s", identity);
        if (k->ipc_prefix[0] && session_connect(s) < 0)
                klog_warn(k->id, "cannot connect a kept client session's sockets");
        /* Detached, as its client is until it comes back. */
        s->detached_at = loop_now();
        loop_timer_start(&s->linger_timer, on_linger_expired,
                         config_get()->max_lingering_sessions == 0
                             ? 0
                             : config_get()->session_linger * 1000.0);
        evict_lingering(k, s);
        return 0;
}
