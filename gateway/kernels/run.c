#include "autoconf.h"

#include "gateway/kernels/run.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/run_env.h"
#include "gateway/kernels/session.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEPALIVE_MS 5000.0
#define GRACE_MS     3000.0 /* after an interrupt, before the kernel is restarted */
/* The interrupt again, within GRACE_MS, while the cell still runs: a
 * SIGINT that reaches ipykernel after it says busy but before it handles
 * SIGINT for the cell (kernelbase's pre_handler_hook) is ignored. */
#define RETRY_MS 250.0

struct execution {
        struct http_request *r;              /* NULL once the client has gone */
        struct execute_collector *collector; /* instead of r; NULL once gone */
        struct kernel *kernel;
        struct session *session;
        struct session_sink sink;
        struct waiter ready;
        char msg_id[JP_UUID_SIZE];
        /* The silent cell that puts a run's env_vars back (run_env.h), or
         * "": the run ends for its client only once that cell's reply came,
         * so that the client's next run, which may come on another session
         * and which the kernel may take first, finds them put back. */
        char restore_id[JP_UUID_SIZE];
        char *code;
        json_t *env;
        double timeout_s;
        lws_sorted_usec_list_t deadline, grace, keepalive, release;
        bool replied, idle, timed_out, done, wrote;
        /* The kernel has taken the cell (its busy status for it): before,
         * the kernel may be running another client's cell, which an
         * interrupt would hit (KeyboardInterrupt there, and with its
         * stop_on_error, that client's queued cells aborted). */
        bool started, interrupted;
        int interrupts; /* sent for the timed-out cell */
        bool released;  /* the session is gone; freed once the request is too */
        enum execute_gone gone;
        /* Output lines a slow client lost since it was last told. */
        uint64_t dropped_lines, dropped_bytes;
};

/* ---- lines ---------------------------------------------------------------- */

/* How a line may be treated when the client reads more slowly than the
 * kernel writes. Outputs (stdout, stderr, displays, keepalives) are dropped
 * past --stream-buffer-bytes, counted, and the client told; the lines that
 * say how the cell went (its count, main result, error) only past the
 * stream's hard limit; the last lines never. */
enum line_kind { LINE_OUTPUT, LINE_KEY, LINE_FINAL };

static int put_line(struct execution *e, json_t *line, enum line_kind kind);

/* Tells the client how much output it lost, once it has caught up (or at
 * the end, regardless). */
static void tell_dropped(struct execution *e, bool at_end)
{
        char text[384], when[JP_TIMESTAMP_SIZE];
        json_t *line;

        if (!e->dropped_lines)
                return;
        /* Once half the buffer has drained: said once per spell of drops,
         * not after every line that fits again. */
        if (!at_end && http_stream_pending(e->r) > (size_t)config_get()->stream_buffer_bytes / 2)
                return;
        snprintf(text, sizeof(text),
                 "[glovebox] %llu output lines (%llu bytes) were dropped here: this client read "
                 "more slowly than the kernel wrote, and %lld bytes (--stream-buffer-bytes) "
                 "were already waiting for it.\n",
                 (unsigned long long)e->dropped_lines, (unsigned long long)e->dropped_bytes,
                 (long long)config_get()->stream_buffer_bytes);
        jp_timestamp_now(when);
        line = json_pack("{s:s, s:s, s:s}", "type", "stderr", "text", text, "timestamp", when);
        if (put_line(e, line, at_end ? LINE_FINAL : LINE_KEY) == 0)
                e->dropped_lines = e->dropped_bytes = 0;
}

/* Queues a line of len bytes, its newline included; 0, or -E2BIG when
 * dropped. */
static int put_text(struct execution *e, const char *text, size_t len, enum line_kind kind)
{
        int rc;

        if (kind == LINE_OUTPUT && http_stream_pending(e->r) > 0 &&
            http_stream_pending(e->r) + len > (size_t)config_get()->stream_buffer_bytes)
                rc = -E2BIG;
        else if (kind == LINE_FINAL)
                rc = http_stream_write_always(e->r, text, len);
        else
                rc = http_stream_write(e->r, text, len);
        if (rc < 0) {
                e->dropped_lines++;
                e->dropped_bytes += len;
                static struct log_limit no_kernel;

                klog_warn_limited(e->kernel ? &e->kernel->log_slow_client : &no_kernel,
                                  e->kernel ? e->kernel->id : NULL,
                                  "an execution's client is too far behind; output dropped");
        }
        return rc;
}

/* Queues line (taken over) with its newline; 0, or -E2BIG when dropped. */
static int put_line(struct execution *e, json_t *line, enum line_kind kind)
{
        char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
        size_t len = text ? strlen(text) : 0;
        char *grown = text ? realloc(text, len + 2) : NULL;
        int rc = -ENOMEM;

        json_decref(line);
        if (!grown)
                goto out;
        text = grown;
        /* No blank line ever: the E2B SDK parses every line as JSON. */
        text[len++] = '\n';
        text[len] = '\0';
        rc = put_text(e, text, len, kind);
out:
        free(grown ? grown : text);
        return rc;
}

static void write_line_as(struct execution *e, json_t *line, enum line_kind kind)
{
        if (e->collector) {
                if (line)
                        e->collector->line(e->collector, line);
                e->wrote = true;
                return;
        }
        if (!e->r) {
                json_decref(line);
                return;
        }
        if (kind != LINE_FINAL)
                tell_dropped(e, false);
        put_line(e, line, kind);
        e->wrote = true;
}

/* A stream message's line, spliced from the kernel's JSON: its text is
 * already a JSON string (checked by jp_json_string_token), so the content
 * of a large output is neither parsed nor encoded again, the bulk of the
 * gateway's work for an /execute client. Returns -EBADMSG when the content
 * needs the general way. */
static int write_stream_fast(struct execution *e, const struct relay_msg *m)
{
        static const char head[] = "{\"type\":\"std", tail[] = ",\"timestamp\":\"";
        char when[JP_TIMESTAMP_SIZE];
        struct jp_bytes name, text;
        struct buf line;
        bool err;
        int rc;

        static const char *const keys[2] = {"name", "text"};
        struct jp_bytes tokens[2];

        /* A collector takes lines as JSON: the general way. */
        if (e->collector || jp_json_string_tokens(m->msg.content, keys, tokens, 2) < 0)
                return -EBADMSG;
        name = tokens[0];
        text = tokens[1];
        if (!e->r)
                return 0;
        err = name.len == 8 && memcmp(name.ptr, "\"stderr\"", 8) == 0;
        jp_timestamp_now(when);
        tell_dropped(e, false);
        buf_init(&line, SIZE_MAX);
        rc = buf_reserve(&line, text.len + 96);
        if (rc == 0)
                rc = buf_printf(&line, "%s%s\",\"text\":", head, err ? "err" : "out");
        if (rc == 0)
                rc = buf_append(&line, text.ptr, text.len);
        if (rc == 0)
                rc = buf_printf(&line, "%s%s\"}\n", tail, when);
        if (rc == 0)
                put_text(e, line.data, line.len, LINE_OUTPUT);
        buf_free(&line);
        e->wrote = true;
        return 0;
}

static void write_line(struct execution *e, json_t *line)
{
        write_line_as(e, line, LINE_KEY);
}

/* An error line: the kernel's (a key line), or the gateway's own about how
 * the run ended (small, never dropped). */
static void write_error_as(struct execution *e, enum line_kind kind, const char *name,
                           const char *value, const char *traceback)
{
        write_line_as(e,
                      json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value",
                                value, "traceback", traceback ? traceback : ""),
                      kind);
}

static void write_error(struct execution *e, const char *name, const char *value,
                        const char *traceback)
{
        write_error_as(e, LINE_FINAL, name, value, traceback);
}

/* E2B's flat keys for the MIME types of a display bundle; anything else
 * keeps its MIME type as the key (the SDK exposes those as extras). */
static const char *result_key(const char *mime)
{
        static const char *const keys[][2] = {
            {"text/plain", "text"},        {"text/html", "html"},
            {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
            {"image/png", "png"},          {"image/jpeg", "jpeg"},
            {"application/pdf", "pdf"},    {"text/latex", "latex"},
            {"application/json", "json"},  {"application/javascript", "javascript"},
            {"e2b/data", "data"},          {"e2b/chart", "chart"},
        };

        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                if (strcmp(mime, keys[i][0]) == 0)
                        return keys[i][1];
        }
        return mime;
}

static json_t *result_line(json_t *data, bool main_result)
{
        json_t *line = json_pack("{s:s, s:b}", "type", "result", "is_main_result", main_result);
        const char *mime;
        json_t *value;

        json_object_foreach(data, mime, value) {
                const char *text = json_string_value(value);
                size_t len = text ? strlen(text) : 0;

                /* Python's repr of a string, 'abc', reads as abc. */
                if (strcmp(mime, "text/plain") == 0 && len >= 2 &&
                    (text[0] == '\'' || text[0] == '"') && text[len - 1] == text[0]) {
                        json_object_set_new(line, "text", json_stringn(text + 1, len - 2));
                        continue;
                }
                json_object_set(line, result_key(mime), value);
        }
        return line;
}

static char *join_traceback(json_t *lines)
{
        struct buf out;
        size_t i;
        json_t *v;

        buf_init(&out, SIZE_MAX);
        json_array_foreach(lines, i, v) {
                if (i && buf_append(&out, "\n", 1) < 0)
                        break;
                if (json_is_string(v) &&
                    buf_append(&out, json_string_value(v), json_string_length(v)) < 0)
                        break;
        }
        if (!out.data)
                buf_append(&out, "", 0);
        return buf_steal(&out, NULL);
}

/* ---- the end ---------------------------------------------------------- */

static void execution_free(struct execution *e)
{
        free(e->code);
        json_decref(e->env);
        free(e);
}

/* On the next turn of the loop, not inside a delivery to the session
 * (which must not go away under its own feet). */
static void on_release(lws_sorted_usec_list_t *sul)
{
        struct execution *e = lws_container_of(sul, struct execution, release);

        if (e->session) {
                struct session *s = e->session;

                e->session = NULL;
                session_destroy(&s, 1000, "execution finished");
        }
        e->released = true;
        if (!e->r)
                execution_free(e);
}

/* Stops everything of a finished execution; frees it later. */
static void wind_down(struct execution *e)
{
        e->done = true;
        loop_timer_stop(&e->deadline);
        loop_timer_stop(&e->grace);
        loop_timer_stop(&e->keepalive);
        waiter_cancel(&e->ready);
        loop_timer_start(&e->release, on_release, 0);
}

static void finish(struct execution *e)
{
        if (e->done)
                return;
        if (e->timed_out) {
                char value[128];

                snprintf(value, sizeof(value), "Execution timed out after %g s", e->timeout_s);
                write_error(e, "TimeoutError", value, NULL);
        }
        if (e->r)
                tell_dropped(e, true);
        write_line_as(e, json_pack("{s:s}", "type", "end_of_execution"), LINE_FINAL);
        if (e->r)
                http_stream_end(e->r);
        wind_down(e);
        if (e->collector) {
                struct execute_collector *c = e->collector;

                /* Nothing more reaches it; on_release frees e. */
                e->collector = NULL;
                c->end(c);
        }
}

/* Its consumer went away: an abandoned run must not leave the kernel busy
 * for ever. */
static void abandon(struct execution *e)
{
        if (e->done)
                return;
        /* Only a cell the kernel has started is ours to interrupt: one
         * still queued runs when its turn comes, as it would have after
         * an interrupt of the cell before it. */
        if (e->kernel && !config_get()->keep_running_on_disconnect && e->started) {
                klog_info(e->kernel->id, "client left a running execution; interrupting");
                kernel_interrupt(e->kernel);
        } else if (e->kernel && !config_get()->keep_running_on_disconnect) {
                klog_info(e->kernel->id, "client left an execution the kernel has not started; "
                                         "not interrupting the cell before it");
        }
        wind_down(e);
}

/* The request ended: the stream was written, or the client went away. */
static void on_request_gone(struct http_request *r)
{
        struct execution *e = r->ctx;

        r->ctx = NULL;
        e->r = NULL;
        abandon(e);
        if (e->released)
                execution_free(e);
}

/* ---- kernel messages ---------------------------------------------------- */

static void interrupt_timed_out(struct execution *e);

static void handle(struct execution *e, struct relay_msg *m)
{
        char parent[JP_MSG_ID_SIZE], type[JP_MSG_TYPE_SIZE];
        json_t *content;

        if (jp_header_fields(m->msg.parent_header, parent, type) < 0)
                return;
        if (e->restore_id[0] && strcmp(parent, e->restore_id) == 0) {
                if (strcmp(m->msg_type, "execute_reply") == 0) {
                        e->restore_id[0] = '\0';
                        if ((e->replied || e->interrupted) && e->idle)
                                finish(e);
                }
                return;
        }
        if (strcmp(parent, e->msg_id) != 0)
                return;
        if (strcmp(m->msg_type, "stream") == 0 && write_stream_fast(e, m) == 0)
                return;
        content = json_loadb((const char *)m->msg.content.ptr, m->msg.content.len, 0, NULL);
        if (!content)
                return;
        if (strcmp(m->msg_type, "execute_input") == 0) {
                write_line(e, json_pack("{s:s, s:O}", "type", "number_of_executions",
                                        "execution_count",
                                        json_object_get(content, "execution_count")));
        } else if (strcmp(m->msg_type, "stream") == 0) {
                char when[JP_TIMESTAMP_SIZE];
                const char *name = json_string_value(json_object_get(content, "name"));

                jp_timestamp_now(when);
                write_line_as(e,
                              json_pack("{s:s, s:O, s:s}", "type",
                                        name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout",
                                        "text", json_object_get(content, "text"), "timestamp",
                                        when),
                              LINE_OUTPUT);
        } else if (strcmp(m->msg_type, "execute_result") == 0 ||
                   strcmp(m->msg_type, "display_data") == 0) {
                bool main_result = strcmp(m->msg_type, "execute_result") == 0;

                write_line_as(e, result_line(json_object_get(content, "data"), main_result),
                              main_result ? LINE_KEY : LINE_OUTPUT);
        } else if (strcmp(m->msg_type, "error") == 0 && !e->timed_out) {
                char *tb = join_traceback(json_object_get(content, "traceback"));
                const char *name = json_string_value(json_object_get(content, "ename"));
                const char *value = json_string_value(json_object_get(content, "evalue"));

                write_error_as(e, LINE_KEY, name ? name : "Error", value ? value : "", tb);
                free(tb);
        } else if (strcmp(m->msg_type, "status") == 0) {
                const char *state = json_string_value(json_object_get(content, "execution_state"));

                if (state && strcmp(state, "busy") == 0) {
                        e->started = true;
                        interrupt_timed_out(e);
                } else if (state && strcmp(state, "idle") == 0) {
                        e->idle = true;
                }
        } else if (strcmp(m->msg_type, "execute_reply") == 0) {
                e->replied = true;
                /* The gateway answered for a kernel that died (or was
                 * restarted): no idle will follow from it. */
                if (m->from_gateway)
                        e->idle = true;
        }
        json_decref(content);
        /* An interrupt that reached ipykernel before the cell's code ran
         * ends its handler without a reply ("KeyboardInterrupt caught in
         * kernel"): its idle is the end. */
        if ((e->replied || e->interrupted) && e->idle && !e->restore_id[0])
                finish(e);
}

static void on_wake(struct session_sink *sink)
{
        struct execution *e = lws_container_of(sink, struct execution, sink);
        struct relay_msg *m;

        while (!e->done && e->session && (m = session_next(e->session)) != NULL) {
                handle(e, m);
                relay_msg_unref(&m);
        }
}

static void on_closing(struct session_sink *sink, int code, const char *reason)
{
        struct execution *e = lws_container_of(sink, struct execution, sink);

        /* Our own release destroys the session too; only a deleted kernel
         * ends a running execution here. */
        e->session = NULL;
        e->kernel = NULL;
        if (e->done)
                return;
        if (e->r && e->gone == EXECUTE_GONE_CUT) {
                struct http_request *r = e->r;

                /* Nothing more is written: what was is, then the cut. */
                e->r = NULL;
                r->ctx = NULL;
                r->cleanup = NULL;
                http_stream_abort(r);
        }
        write_error(e, "ExecutionAborted", "The kernel was shut down", NULL);
        e->replied = e->idle = true;
        finish(e);
}

/* ---- sending ---------------------------------------------------------- */

static int send_execute(struct execution *e, const char *code, bool silent, char *msg_id_out)
{
        char msg_id[JP_UUID_SIZE], date[JP_TIMESTAMP_SIZE];
        json_t *header, *content;
        char *header_text = NULL, *content_text = NULL;
        struct jp_msg msg;
        int rc = -ENOMEM;

        jp_uuid4(msg_id);
        jp_timestamp_now(date);
        header = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "msg_type",
                           "execute_request", "session", e->session->id, "username", "glovebox",
                           "date", date, "version", "5.3");
        /* Each HTTP call stands alone: an error (or the interrupt of an
         * abandoned call) must not abort the calls queued behind it. */
        content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", silent,
                            "store_history", !silent, "user_expressions", "allow_stdin", false,
                            "stop_on_error", false);
        if (header && content) {
                header_text = json_dumps(header, JSON_COMPACT);
                content_text = json_dumps(content, JSON_COMPACT);
        }
        if (header_text && content_text) {
                jp_msg_init(&msg);
                msg.channel = JP_SHELL;
                msg.header = (struct jp_bytes){(const uint8_t *)header_text, strlen(header_text)};
                msg.parent_header = (struct jp_bytes){(const uint8_t *)"{}", 2};
                msg.metadata = (struct jp_bytes){(const uint8_t *)"{}", 2};
                msg.content =
                    (struct jp_bytes){(const uint8_t *)content_text, strlen(content_text)};
                rc = session_send(e->session, &msg);
        }
        if (rc == 0 && msg_id_out)
                memcpy(msg_id_out, msg_id, JP_UUID_SIZE);
        json_decref(header);
        json_decref(content);
        free(header_text);
        free(content_text);
        return rc;
}

static void on_keepalive(lws_sorted_usec_list_t *sul)
{
        struct execution *e = lws_container_of(sul, struct execution, keepalive);

        if (!e->wrote)
                write_line_as(e, json_pack("{s:s}", "type", "keepalive"), LINE_OUTPUT);
        e->wrote = false;
        loop_timer_start(&e->keepalive, on_keepalive, KEEPALIVE_MS);
}

static void on_grace(lws_sorted_usec_list_t *sul)
{
        struct execution *e = lws_container_of(sul, struct execution, grace);

        /* Still running: the interrupt again (the cell is still ours: no
         * reply nor idle came for it, and the kernel runs one cell at a
         * time). Still running after GRACE_MS: restart the kernel; its
         * pending execution, this one, is then answered. */
        if (e->interrupts * RETRY_MS < GRACE_MS) {
                e->interrupts++;
                kernel_interrupt(e->kernel);
                loop_timer_start(&e->grace, on_grace, RETRY_MS);
                return;
        }
        klog_warn(e->kernel->id, "execution did not stop after %d interrupts; restarting",
                  e->interrupts);
        kernel_restart(e->kernel, NULL);
}

/* Interrupts the timed-out cell once the kernel runs it; a restart
 * follows if the interrupt does not end it. */
static void interrupt_timed_out(struct execution *e)
{
        if (!e->timed_out || !e->started || e->interrupted || e->done)
                return;
        e->interrupted = true;
        klog_info(e->kernel->id, "execution timed out after %g s; interrupting", e->timeout_s);
        e->interrupts = 1;
        kernel_interrupt(e->kernel);
        loop_timer_start(&e->grace, on_grace, RETRY_MS);
}

static void on_deadline(lws_sorted_usec_list_t *sul)
{
        struct execution *e = lws_container_of(sul, struct execution, deadline);

        e->timed_out = true;
        session_mark_timed_out(e->session);
        /* Still queued behind another request: the interrupt waits for
         * our cell, so that the one before it (another client's) is not
         * the one it stops. */
        if (!e->started)
                klog_info(e->kernel->id,
                          "execution timed out after %g s before the kernel started it; "
                          "interrupting once it does",
                          e->timeout_s);
        interrupt_timed_out(e);
}

static void on_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct execution *e = lws_container_of(w, struct execution, ready);
        char *set = NULL, *restore = NULL;
        int rc;

        if (status) {
                write_error(e, "KernelNotReady", message ? message : "the kernel is not ready",
                            NULL);
                e->replied = e->idle = true;
                finish(e);
                return;
        }
        if (e->env && json_object_size(e->env)) {
                const char *language =
                    json_string_value(json_object_get(k->spec->spec, "language"));

                rc = run_env_code(language, e->env, &set, &restore);
                if (rc < 0) {
                        write_error(e, "InvalidEnvVars",
                                    rc == -ENOTSUP ? "this kernel's language takes no env_vars"
                                                   : "env_vars must map names (letters, digits "
                                                     "and _) to strings",
                                    NULL);
                        e->replied = e->idle = true;
                        finish(e);
                        goto out;
                }
                /* Sent before the cell and after it, whatever the cell
                 * does: stop_on_error is off for every request. */
                send_execute(e, set, true, NULL);
        }
        if (send_execute(e, e->code, false, e->msg_id) < 0) {
                write_error(e, "ExecutionFailed", "could not send the code to the kernel", NULL);
                e->replied = e->idle = true;
                finish(e);
                goto out;
        }
        if (restore && send_execute(e, restore, true, e->restore_id) < 0)
                e->restore_id[0] = '\0';
        if (e->timeout_s > 0)
                loop_timer_start(&e->deadline, on_deadline, e->timeout_s * 1000.0);
out:
        free(set);
        free(restore);
}

/* The part of a start both kinds of consumer share: the session to the
 * kernel, the keepalive, the wait for the kernel to be ready. */
static void execution_begin(struct execution *e)
{
        e->session = session_open(e->kernel, NULL);
        if (!e->session) {
                write_error(e, "ExecutionFailed", "cannot open a session to the kernel", NULL);
                e->replied = e->idle = true;
                finish(e);
                return;
        }
        session_attach(e->session, &e->sink, NULL);
        if (!e->collector)
                loop_timer_start(&e->keepalive, on_keepalive, KEEPALIVE_MS);
        kernel_when_ready(e->kernel, &e->ready);
}

static struct execution *execution_new(struct kernel *k, const char *code, json_t *env,
                                       double timeout_s)
{
        struct execution *e = calloc(1, sizeof(*e));

        if (!e || !(e->code = strdup(code))) {
                free(e);
                return NULL;
        }
        e->kernel = k;
        e->env = json_incref(env);
        e->timeout_s = timeout_s;
        e->sink.wake = on_wake;
        e->sink.closing = on_closing;
        e->ready.done = on_ready;
        return e;
}

void execute_start(struct http_request *r, struct kernel *k, const char *code, json_t *env,
                   double timeout_s, enum execute_gone gone)
{
        struct execution *e = execution_new(k, code, env, timeout_s);

        if (!e) {
                http_reply_error(r, 500, "out of memory");
                return;
        }
        e->gone = gone;
        e->r = r;
        r->ctx = e;
        r->cleanup = on_request_gone;
        /* Headers at once: clients time out waiting for them otherwise. */
        http_stream_start(r, 200, "application/x-ndjson");
        /* Outputs are dropped past --stream-buffer-bytes; a key line (a
         * result, an error: at most a message each) still fits after them. */
        http_stream_set_limit(
            r, (size_t)(config_get()->stream_buffer_bytes + 2 * config_get()->max_message_bytes));
        execution_begin(e);
}

struct execution *execute_collect(struct kernel *k, const char *code, double timeout_s,
                                  struct execute_collector *c)
{
        struct execution *e = execution_new(k, code, NULL, timeout_s);

        if (!e)
                return NULL;
        e->collector = c;
        execution_begin(e);
        return e;
}

void execute_abandon(struct execution **ep)
{
        struct execution *e = *ep;

        *ep = NULL;
        if (!e)
                return;
        e->collector = NULL;
        abandon(e);
}
