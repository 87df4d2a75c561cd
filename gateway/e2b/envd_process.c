/* envd's process RPCs (gateway/e2b/envd.h): commands run inside the sandbox
 * like kernels do, as its user, under its limits, on pipes or on a
 * terminal of the sandbox's own (pty), through process.c; their output
 * streams back as Connect frames to the Start stream and to every Connect
 * that follows it, while they run. */
#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/e2b/envd.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/process.h"
#include "protocol/kernelspec.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEPALIVE_MS 50000.0
#define MAX_COMMANDS 256  /* per sandbox, running or not yet reported */
#define MAX_STREAMS  8    /* per command: its Start and the Connects to it */
#define MAX_PTY_SIDE 4096 /* rows or columns of a terminal */
/* A stream's unwritten output past which its command is held (pace). */
#define HOLD_BYTES (1024 * 1024)

struct command {
        struct command *next;
        struct e2b_sandbox *owner;
        struct process *process; /* until process.c reports its end */
        unsigned pid;            /* the number clients see */
        char *tag;
        json_t *config; /* {cmd, args, envs, cwd} */
        /* The Start stream and the Connect streams that follow the
         * command; a slot is NULL once its client left. */
        struct http_request *streams[MAX_STREAMS];
        bool pty;
        bool started;
        double deadline_at; /* loop_now() at its timeout; 0: none */
        bool held; /* its output is not read: a stream is behind (pace) */
        lws_sorted_usec_list_t deadline, keepalive;
};

static struct command *commands;
static unsigned next_pid = 1000;

/* The same frame to every stream of the command. */
static void broadcast(struct command *c, unsigned char flags, json_t *msg)
{
        for (int i = 0; i < MAX_STREAMS; i++) {
                if (c->streams[i])
                        envd_write_frame(c->streams[i], flags, json_incref(msg));
        }
        json_decref(msg);
}

/* ---- commands ---------------------------------------------------------------- */

static struct command *command_by_pid(struct e2b_sandbox *owner, unsigned pid)
{
        for (struct command *c = commands; c; c = c->next) {
                if (c->owner == owner && c->pid == pid && !process_exited(c->process))
                        return c;
        }
        return NULL;
}

/* Frees c; its process is already gone or abandoned. */
static void command_free(struct command *c)
{
        for (struct command **link = &commands; *link; link = &(*link)->next) {
                if (*link == c) {
                        *link = c->next;
                        break;
                }
        }
        loop_timer_stop(&c->deadline);
        loop_timer_stop(&c->keepalive);
        json_decref(c->config);
        free(c->tag);
        free(c);
}

/* A client that reads slower than its command writes holds the command
 * (its pipe fills and it waits), as a pipe to a slow reader would: the
 * gateway queues at most about HOLD_BYTES (and one turn's reads) per
 * stream, and drops nothing. It goes on once every stream has taken most
 * of its queue, or the slow client has left. */
static void pace(struct command *c)
{
        size_t most = 0;

        if (!c || !c->process)
                return;
        for (int i = 0; i < MAX_STREAMS; i++) {
                if (c->streams[i] && http_stream_pending(c->streams[i]) > most)
                        most = http_stream_pending(c->streams[i]);
        }
        if (!c->held && most > HOLD_BYTES)
                c->held = true;
        else if (c->held && most <= HOLD_BYTES / 4)
                c->held = false;
        else
                return;
        process_hold_output(c->process, c->held);
}

static void on_stream_drained(struct http_request *r)
{
        pace(r->ctx);
}

/* What the command wrote, to every stream. */
static void on_output(void *ctx, int stream, const uint8_t *data, size_t len)
{
        struct command *c = ctx;
        struct buf b64;

        buf_init(&b64, SIZE_MAX);
        buf_append_base64(&b64, data, len);
        broadcast(c, 0,
                  json_pack("{s:{s:{s:s#}}}", "event", "data",
                            c->pty        ? "pty"
                            : stream == 1 ? "stdout"
                                          : "stderr",
                            b64.data ? b64.data : "", (int)b64.len));
        buf_free(&b64);
        pace(c);
}

static void end_stream(struct command *c, const struct hostmsg_exit *ex)
{
        char status[64];
        json_t *end;

        if (ex->signal)
                snprintf(status, sizeof(status), "signal: %s",
                         ex->signal == SIGKILL ? "killed" : strsignal(ex->signal));
        else
                snprintf(status, sizeof(status), "exit status %d", ex->exit_code);
        end = json_pack("{s:i, s:b, s:s}", "exitCode", ex->signal ? -1 : ex->exit_code, "exited",
                        !ex->signal, "status", status);
        if (end && (ex->signal || ex->exit_code))
                json_object_set_new(end, "error", json_string(status));
        broadcast(c, 0, json_pack("{s:{s:o}}", "event", "end", end));
        broadcast(c, 2, json_object());
}

/* Ends one stream of the command and lets go of its client. */
static void let_go_stream(struct command *c, int i)
{
        struct http_request *r = c->streams[i];

        if (!r)
                return;
        http_stream_end(r);
        r->ctx = NULL;
        r->cleanup = NULL;
        r->drained = NULL;
        c->streams[i] = NULL;
}

/* Cuts every stream of the command short, as the connection to a sandbox
 * that died is: no end event, no end of the body. E2B's SDKs, seeing the
 * body cut, ask whether the sandbox is still there and, as it is not,
 * raise their "sandbox was killed" error. */
static void cut_streams(struct command *c)
{
        for (int i = 0; i < MAX_STREAMS; i++) {
                struct http_request *r = c->streams[i];

                if (!r)
                        continue;
                /* A command not started yet has sent nothing: its stream
                 * begins, to be cut all the same. */
                http_stream_start(r, 200, CONNECT_JSON);
                http_stream_abort(r);
                r->ctx = NULL;
                r->cleanup = NULL;
                r->drained = NULL;
                c->streams[i] = NULL;
        }
}

/* Ends every stream of the command. */
static void let_go(struct command *c)
{
        for (int i = 0; i < MAX_STREAMS; i++)
                let_go_stream(c, i);
}

static bool has_streams(const struct command *c)
{
        for (int i = 0; i < MAX_STREAMS; i++) {
                if (c->streams[i])
                        return true;
        }
        return false;
}

/* Ends every stream with a Connect error, as envd does. */
static void end_with_error(struct command *c, int error, const char *message)
{
        for (int i = 0; i < MAX_STREAMS; i++) {
                if (!c->streams[i])
                        continue;
                envd_reply_error(c->streams[i], true, error, message);
                let_go_stream(c, i);
        }
}

/* Output first, then the end: process.c reports the end only once every
 * output is at its end (or the process died and they stay silent). */
static void on_ended(void *ctx, const struct hostmsg_exit *ex)
{
        struct command *c = ctx;

        c->process = NULL;
        if (has_streams(c)) {
                end_stream(c, ex);
                let_go(c);
        }
        command_free(c);
}

/* A stream of the command begins with its start event. */
static void open_stream(struct command *c, struct http_request *r)
{
        http_stream_start(r, 200, CONNECT_JSON);
        envd_write_frame(r, 0, json_pack("{s:{s:{s:i}}}", "event", "start", "pid", c->pid));
}

static void on_started(void *ctx)
{
        struct command *c = ctx;

        c->started = true;
        for (int i = 0; i < MAX_STREAMS; i++) {
                if (c->streams[i])
                        open_stream(c, c->streams[i]);
        }
}

static void on_failed(void *ctx, const char *message)
{
        struct command *c = ctx;

        c->process = NULL;
        /* envd answers a command it cannot run with invalid_argument. */
        end_with_error(c, -EINVAL, message);
        command_free(c);
}

static const struct process_ops command_ops = {on_started, on_output, on_failed, on_ended};

static void on_client_gone(struct http_request *r)
{
        struct command *c = r->ctx;

        /* The command runs on, as E2B's do; output nobody follows is read
         * and dropped. */
        r->ctx = NULL;
        r->drained = NULL;
        for (int i = 0; c && i < MAX_STREAMS; i++) {
                if (c->streams[i] == r)
                        c->streams[i] = NULL;
        }
        pace(c);
}

/* At Connect-Timeout-Ms the command is killed and its stream ends as
 * envd's does, with the Connect error deadline_exceeded (the SDKs raise
 * their TimeoutException on it), after the output read so far. */
static void on_deadline(lws_sorted_usec_list_t *sul)
{
        struct command *c = lws_container_of(sul, struct command, deadline);

        /* A command that exited is past its timeout's reach, while its
         * last output is read. */
        if (process_exited(c->process))
                return;
        log_info("command %u reached its timeout; killing it", c->pid);
        process_drain(c->process);
        end_with_error(c, -ETIMEDOUT, "the command ran past its timeout and was killed");
        process_signal(c->process, SIGKILL);
}

static void on_keepalive(lws_sorted_usec_list_t *sul)
{
        struct command *c = lws_container_of(sul, struct command, keepalive);

        if (c->started)
                broadcast(c, 0, json_pack("{s:{s:{}}}", "event", "keepalive"));
        loop_timer_start(&c->keepalive, on_keepalive, KEEPALIVE_MS);
}

/* A string of the command line or environment, as execve takes it: 0, or
 * -E2BIG with why naming the field and the bound. */
static int check_exec_string(const char *field, size_t len, char *why, size_t size)
{
        if (len <= HOSTMSG_MAX_STRING)
                return 0;
        snprintf(why, size,
                 "%s is %zu bytes; one argument or environment variable (NAME=value) may be at "
                 "most %d bytes, Linux's limit (MAX_ARG_STRLEN)",
                 field, len, HOSTMSG_MAX_STRING);
        return -E2BIG;
}

/* Checks process.cmd, args, envs and cwd against the bounds of a start
 * request (protocol/hostmsg.h), before anything is asked of the
 * kernel-host: 0, or -EINVAL / -E2BIG with why naming the field and the
 * bound. The totals (entries, bytes) are hostmsg_start_check's, once the
 * sandbox's envVars are added. */
static int check_process(const char *cmd, json_t *args, json_t *envs, json_t *cwd, char *why,
                         size_t size)
{
        char field[320];
        const char *key;
        json_t *v;
        size_t i;
        int rc;

        if (!cmd || (args && !json_is_array(args)) || (envs && !json_is_object(envs)) ||
            (cwd && !json_is_string(cwd))) {
                snprintf(why, size,
                         "process.cmd must be a string, args an array, envs an object, cwd a "
                         "string");
                return -EINVAL;
        }
        rc = check_exec_string("process.cmd", strlen(cmd), why, size);
        if (rc == 0 && json_array_size(args) >= HOSTMSG_MAX_ARGS) {
                snprintf(why, size, "process.args has %zu entries; at most %d",
                         json_array_size(args), HOSTMSG_MAX_ARGS - 1);
                rc = -E2BIG;
        }
        json_array_foreach(args, i, v) {
                if (rc < 0)
                        break;
                snprintf(field, sizeof(field), "process.args[%zu]", i);
                if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
                        snprintf(why, size, "%s must be a string without NUL", field);
                        rc = -EINVAL;
                } else {
                        rc = check_exec_string(field, json_string_length(v), why, size);
                }
        }
        json_object_foreach(envs, key, v) {
                if (rc < 0)
                        break;
                snprintf(field, sizeof(field), "process.envs[%.256s]", key);
                if (!key[0] || strchr(key, '=')) {
                        snprintf(why, size, "%s: a variable's name must be non-empty, without '='",
                                 field);
                        rc = -EINVAL;
                } else if (!json_is_string(v) ||
                           strlen(json_string_value(v)) != json_string_length(v)) {
                        snprintf(why, size, "%s must be a string without NUL", field);
                        rc = -EINVAL;
                } else {
                        rc = check_exec_string(field, strlen(key) + 1 + json_string_length(v), why,
                                               size);
                }
        }
        if (rc == 0 && cwd && json_string_length(cwd) >= PATH_MAX) {
                snprintf(why, size, "process.cwd is %zu bytes; a path may be at most %d",
                         json_string_length(cwd), PATH_MAX - 1);
                rc = -E2BIG;
        }
        return rc;
}

/* {"size": {"rows", "cols"}} (each may be absent: the default); 0 or
 * -EINVAL. */
static int read_pty_size(json_t *pty, uint16_t *rows, uint16_t *cols)
{
        json_t *size = json_object_get(pty, "size");
        json_t *jrows = json_object_get(size, "rows"), *jcols = json_object_get(size, "cols");

        if (!json_is_object(pty) || (size && !json_is_object(size)) ||
            (jrows && (!json_is_integer(jrows) || json_integer_value(jrows) < 1 ||
                       json_integer_value(jrows) > MAX_PTY_SIDE)) ||
            (jcols && (!json_is_integer(jcols) || json_integer_value(jcols) < 1 ||
                       json_integer_value(jcols) > MAX_PTY_SIDE)))
                return -EINVAL;
        *rows = jrows ? (uint16_t)json_integer_value(jrows) : 24;
        *cols = jcols ? (uint16_t)json_integer_value(jcols) : 80;
        return 0;
}

void envd_process_start(struct http_request *r, struct e2b_sandbox *s)
{
        json_t *req = envd_read_envelope(r);
        json_t *process = json_object_get(req, "process");
        json_t *args = json_object_get(process, "args"), *envs = json_object_get(process, "envs");
        const char *cmd = json_string_value(json_object_get(process, "cmd"));
        const char *cwd = json_string_value(json_object_get(process, "cwd"));
        struct hostmsg_start start = {.kernel = false};
        bool keep_stdin = json_is_true(json_object_get(req, "stdin"));
        char message[512], **env = NULL;
        json_t *own = NULL;
        double timeout_ms;
        size_t nargs = json_array_size(args), n = 0, count = 0;
        struct command *c = NULL;
        enum files_user who;
        const char *key;
        json_t *v;
        int rc;

        for (struct command *x = commands; x; x = x->next)
                count += x->owner == s;
        if (envd_user_of(r, s, &who, message, sizeof(message)) < 0) {
                envd_error(r, true, -EINVAL, "%s", message);
                goto out;
        }
        if (json_object_get(req, "pty") &&
            read_pty_size(json_object_get(req, "pty"), &start.rows, &start.cols) < 0) {
                envd_error(r, true, -EINVAL, "pty.size must be {rows, cols}, each from 1 to %d",
                           MAX_PTY_SIDE);
                goto out;
        }
        start.pty = json_object_get(req, "pty") != NULL;
        rc = check_process(cmd, args, envs, json_object_get(process, "cwd"), message,
                           sizeof(message));
        if (rc < 0) {
                envd_error(r, true, rc, "%s", message);
                goto out;
        }
        if (count >= MAX_COMMANDS) {
                envd_error(r, true, -ENOSPC, "too many commands in this sandbox");
                goto out;
        }
        c = calloc(1, sizeof(*c));
        start.argv = calloc(nargs + 2, sizeof(char *));
        own = e2b_env(s);
        env = calloc(json_object_size(own) + json_object_size(envs) + 1, sizeof(char *));
        if (!c || !start.argv || !own || !env) {
                envd_error(r, true, -ENOMEM, "out of memory");
                goto out;
        }
        start.argv[0] = (char *)cmd;
        for (size_t i = 0; i < nargs; i++)
                start.argv[i + 1] = (char *)json_string_value(json_array_get(args, i));
        /* The sandbox's variables that the command does not set, then
         * the command's own. */
        json_object_foreach(own, key, v) {
                if (!json_object_get(envs, key) &&
                    asprintf(&env[n], "%s=%s", key, json_string_value(v)) >= 0)
                        n++;
        }
        json_object_foreach(envs, key, v) {
                if (asprintf(&env[n], "%s=%s", key, json_string_value(v)) >= 0)
                        n++;
        }
        start.env = env;
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", e2b_box(s)->id);
        /* A relative cwd is below the home, as envd resolves it; none is
         * the sandbox's working directory (a built template's WORKDIR, or
         * the home). */
        rc = cwd && cwd[0] ? files_normalize(cwd, start.cwd, sizeof(start.cwd)) : 0;
        if (rc < 0) {
                envd_error(r, true, -EINVAL, "process.cwd '%.64s...' is too long below %s", cwd,
                           FILES_HOME);
                goto out;
        }
        if (!(cwd && cwd[0]))
                snprintf(start.cwd, sizeof(start.cwd), "%s", e2b_workdir(s));
        start.as_root = who == FILES_ROOT;
        /* The totals, with the sandbox's envVars in. */
        rc = hostmsg_start_check(&start, message, sizeof(message));
        if (rc < 0) {
                envd_error(r, true, rc, "%s", message);
                goto out;
        }
        c->owner = s;
        c->pid = next_pid++;
        c->config = json_pack("{s:O}", "process", process);
        if (json_is_string(json_object_get(req, "tag")))
                c->tag = strdup(json_string_value(json_object_get(req, "tag")));
        c->pty = start.pty;
        c->streams[0] = r;
        r->ctx = c;
        r->cleanup = on_client_gone;
        r->drained = on_stream_drained;
        c->next = commands;
        commands = c;
        rc = process_start(&start, keep_stdin, &command_ops, c, &c->process);
        if (rc < 0) {
                commands = c->next;
                r->ctx = NULL;
                r->cleanup = NULL;
                r->drained = NULL;
                envd_error(r, true, -EIO, "cannot ask the kernel-host to start it: %s",
                           strerror(-rc));
                json_decref(c->config);
                free(c->tag);
                free(c);
                c = NULL;
                goto out;
        }
        /* Connect-Timeout-Ms bounds the command's whole life. */
        timeout_ms = envd_header_number(r, "connect-timeout-ms:", 1, 1e10);
        if (timeout_ms > 0) {
                c->deadline_at = loop_now() + timeout_ms / 1000.0;
                loop_timer_start(&c->deadline, on_deadline, timeout_ms);
        }
        loop_timer_start(&c->keepalive, on_keepalive, KEEPALIVE_MS);
        c = NULL;
out:
        free(c);
        free(start.argv);
        jp_strv_free(env);
        json_decref(own);
        json_decref(req);
}

static unsigned selected_pid(json_t *req)
{
        return (unsigned)json_integer_value(
            json_object_get(json_object_get(req, "process"), "pid"));
}

/* Connect: a new stream that follows a running command (its output from
 * now on, then its end), as envd's does. */
static void connect_command(struct http_request *r, struct e2b_sandbox *s)
{
        json_t *req = envd_read_envelope(r);
        struct command *c = req ? command_by_pid(s, selected_pid(req)) : NULL;
        int slot = -1;

        for (int i = 0; c && i < MAX_STREAMS && slot < 0; i++) {
                if (!c->streams[i])
                        slot = i;
        }
        if (!req)
                envd_error(r, true, -EINVAL, "the request is not one Connect envelope of JSON");
        else if (!c)
                envd_error(r, true, -ESRCH, "process with pid %u not found", selected_pid(req));
        else if (slot < 0)
                envd_error(r, true, -ENOSPC, "process %u already has %d streams", c->pid,
                           MAX_STREAMS);
        if (slot < 0)
                goto out;
        c->streams[slot] = r;
        r->ctx = c;
        r->cleanup = on_client_gone;
        r->drained = on_stream_drained;
        if (c->started)
                open_stream(c, r);
out:
        json_decref(req);
}

static void send_input(struct http_request *r, struct command *c, json_t *req)
{
        json_t *input = json_object_get(req, "input");
        json_t *stdin_data = json_object_get(input, "stdin"),
               *pty_data = json_object_get(input, "pty");
        const char *data = json_string_value(pty_data ? pty_data : stdin_data);
        struct buf bytes;
        int rc;

        buf_init(&bytes, MAX_ENVELOPE);
        if (pty_data && !c->pty) {
                envd_error(r, false, -EINVAL, "process %u has no terminal (pty)", c->pid);
        } else if (!process_stdin_open(c->process)) {
                envd_error(r, false, -EINVAL, "stdin of %u is closed", c->pid);
        } else if (!data || buf_append_unbase64(&bytes, data) < 0) {
                envd_error(r, false, -EINVAL, "input.stdin or input.pty must be base64 bytes");
        } else {
                rc = bytes.len ? process_write_stdin(c->process, bytes.data, bytes.len) : 0;
                if (rc == -EAGAIN)
                        envd_error(r, false, -ENOSPC,
                                   "process %u reads its input slower than it is sent", c->pid);
                else if (rc < 0)
                        envd_error(r, false, -EINVAL, "cannot write to process %u: %s", c->pid,
                                   strerror(-rc));
                else
                        http_reply_json(r, 200, json_object());
        }
        buf_free(&bytes);
}

/* Update: a terminal's new size (the SDKs' pty.resize). */
static void update_command(struct http_request *r, struct command *c, json_t *req)
{
        uint16_t rows, cols;

        if (!json_object_get(req, "pty")) {
                http_reply_json(r, 200, json_object());
        } else if (!c->pty) {
                envd_error(r, false, -EINVAL, "process %u has no terminal (pty)", c->pid);
        } else if (read_pty_size(json_object_get(req, "pty"), &rows, &cols) < 0) {
                envd_error(r, false, -EINVAL, "pty.size must be {rows, cols}, each from 1 to %d",
                           MAX_PTY_SIDE);
        } else {
                if (process_resize(c->process, rows, cols) < 0)
                        envd_error(r, false, -EINVAL, "cannot resize the terminal of %u", c->pid);
                else
                        http_reply_json(r, 200, json_object());
        }
}

void envd_process_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method)
{
        static const char *const unary[] = {"List",       "SendSignal", "SendInput",
                                            "CloseStdin", "Update",     NULL};
        json_t *req = NULL;
        struct command *c;

        if (strcmp(method, "Connect") == 0) {
                connect_command(r, s);
                return;
        }
        if (!jp_strv_contains(unary, method)) {
                /* Connect and StreamInput are streams: the error goes in one. */
                envd_error(r, strcmp(method, "Connect") == 0 || strcmp(method, "StreamInput") == 0,
                           -ENOSYS, "process.Process/%s is not supported by Glovebox", method);
                return;
        }
        req = r->body.len ? envd_parse_request(r->body.data, r->body.len) : json_object();
        c = req ? command_by_pid(s, selected_pid(req)) : NULL;
        if (!req) {
                envd_error(r, false, -EINVAL, "the request is not JSON");
        } else if (strcmp(method, "List") == 0) {
                json_t *list = json_array();

                for (struct command *x = commands; list && x; x = x->next) {
                        json_t *config = json_object_get(x->config, "process");
                        json_t *info;

                        /* One not started yet may never be: only what
                         * runs is listed, as envd lists its processes. */
                        if (x->owner != s || !x->started || process_exited(x->process))
                                continue;
                        info = json_pack("{s:i, s:O}", "pid", x->pid, "config", config);
                        if (info && x->tag)
                                json_object_set_new(info, "tag", json_string(x->tag));
                        json_array_append_new(list, info);
                }
                http_reply_json(r, 200, json_pack("{s:o}", "processes", list));
        } else if (!c) {
                envd_error(r, false, -ESRCH, "process with pid %u not found", selected_pid(req));
        } else if (strcmp(method, "SendSignal") == 0) {
                const char *sig = json_string_value(json_object_get(req, "signal"));

                process_signal(c->process,
                               sig && strcmp(sig, "SIGNAL_SIGTERM") == 0 ? SIGTERM : SIGKILL);
                http_reply_json(r, 200, json_object());
        } else if (strcmp(method, "SendInput") == 0) {
                send_input(r, c, req);
        } else if (strcmp(method, "Update") == 0) {
                update_command(r, c, req);
        } else if (c->pty) {
                envd_error(r, false, -EINVAL,
                           "process %u is on a terminal: send ^D (\\x04) to end its input", c->pid);
        } else if (!process_stdin_open(c->process)) {
                envd_error(r, false, -EINVAL, "stdin of %u is closed", c->pid);
        } else {
                process_close_stdin(c->process);
                http_reply_json(r, 200, json_object());
        }
        json_decref(req);
}

/* ---- through a pause that keeps the memory --------------------------------------- */

static bool running(const struct command *c)
{
        return c->process && !process_exited(c->process);
}

json_t *envd_commands_record(const struct e2b_sandbox *s)
{
        json_t *list = json_array();

        for (struct command *c = commands; list && c; c = c->next) {
                double left = c->deadline_at > 0 ? (c->deadline_at - loop_now()) * 1000.0 : 0;
                json_t *rec;

                if (c->owner != s || !running(c))
                        continue;
                rec = json_pack("{s:i, s:s, s:O, s:b, s:b, s:f}", "pid", (int)c->pid, "process",
                                process_id(c->process), "config", c->config, "stdin",
                                process_stdin_open(c->process), "pty", c->pty, "timeoutMs",
                                left > 1 ? left : 0);
                if (rec && c->tag)
                        json_object_set_new(rec, "tag", json_string(c->tag));
                if (!rec || json_array_append_new(list, rec) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

void envd_commands_suspend(struct e2b_sandbox *s)
{
        struct command *c = commands;

        while (c) {
                struct command *next = c->next;

                if (c->owner == s) {
                        cut_streams(c);
                        process_forget(&c->process);
                        command_free(c);
                }
                c = next;
        }
}

/* One recorded command, waiting for its pipes. */
static void command_restore(struct e2b_sandbox *s, json_t *rec, const char *copy_of)
{
        const char *id = json_string_value(json_object_get(rec, "process"));
        char derived[JP_UUID_SIZE];
        json_int_t pid = json_integer_value(json_object_get(rec, "pid"));
        double left = json_number_value(json_object_get(rec, "timeoutMs"));
        struct command *c = calloc(1, sizeof(*c));

        if (!c || !id || pid <= 0 || pid > UINT32_MAX ||
            !json_is_object(json_object_get(rec, "config"))) {
                free(c);
                log_warn("a restored command's record is malformed");
                return;
        }
        if (copy_of) {
                jp_uuid_derive(copy_of, id, derived);
                id = derived;
        }
        c->owner = s;
        c->pid = (unsigned)pid;
        c->pty = json_is_true(json_object_get(rec, "pty"));
        c->config = json_incref(json_object_get(rec, "config"));
        if (json_is_string(json_object_get(rec, "tag")))
                c->tag = strdup(json_string_value(json_object_get(rec, "tag")));
        if (process_adopt(id, json_is_true(json_object_get(rec, "stdin")), c->pty, &command_ops, c,
                          &c->process) < 0) {
                log_warn("restored command %u cannot be taken over", c->pid);
                json_decref(c->config);
                free(c->tag);
                free(c);
                return;
        }
        c->next = commands;
        commands = c;
        if (c->pid >= next_pid)
                next_pid = c->pid + 1;
        if (left > 0) {
                c->deadline_at = loop_now() + left / 1000.0;
                loop_timer_start(&c->deadline, on_deadline, left);
        }
        loop_timer_start(&c->keepalive, on_keepalive, KEEPALIVE_MS);
}

void envd_commands_restore(struct e2b_sandbox *s, json_t *record, const char *copy_of)
{
        size_t i;
        json_t *rec;

        json_array_foreach(record, i, rec)
                command_restore(s, rec, copy_of);
}

void envd_commands_settle(struct e2b_sandbox *s)
{
        struct command *c = commands;

        while (c) {
                struct command *next = c->next;

                if (c->owner == s && c->process && !process_attached(c->process)) {
                        process_forget(&c->process);
                        command_free(c);
                }
                c = next;
        }
}

void envd_forget(struct e2b_sandbox *s)
{
        struct command *c = commands;

        envd_watch_forget(s);
        while (c) {
                struct command *next = c->next;

                if (c->owner == s) {
                        /* The sandbox's death kills the process; stop
                         * listening (process.c reads and drops what is
                         * left of its output). */
                        cut_streams(c);
                        /* One a restore never handed back has nothing
                         * to kill. */
                        if (c->process && !process_attached(c->process))
                                process_forget(&c->process);
                        process_abandon(&c->process);
                        command_free(c);
                }
                c = next;
        }
}
