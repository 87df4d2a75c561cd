/* E2B's envd, the in-sandbox service of files and processes, served by the
 * gateway: /health, /files (download, multipart upload), the filesystem
 * RPCs and the process RPCs, in the Connect protocol's JSON form. Commands
 * run inside the sandbox like kernels do, as its user, under its limits;
 * their output streams back as Connect frames while they run. */
#include "autoconf.h"

#include "gateway/api.h"
#include "gateway/e2b.h"
#include "gateway/envd.h"
#include "gateway/files.h"
#include "gateway/host.h"
#include "gateway/kernels.h"
#include "gateway/loop.h"
#include "gateway/uploads.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define CONNECT_JSON      ENVD_CONNECT_JSON
#define MAX_ENVELOPE      (1024 * 1024)
#define READ_PIECE        (64 * 1024)
#define KEEPALIVE_MS      50000.0
#define MAX_COMMANDS      256 /* per sandbox, running or not yet reported */

struct command {
        struct command *next;
        struct e2b_sandbox *owner;
        char id[JP_UUID_SIZE];
        unsigned pid;  /* the number clients see */
        char *tag;
        json_t *config; /* {cmd, args, envs, cwd} */
        int fds[3];     /* stdin (write end), stdout, stderr (read ends); -1 when closed */
        struct loop_watch *watch[3];
        struct http_request *r; /* the Start stream; NULL once its client left */
        bool started, exited;
        struct hostmsg_exit ex;
        lws_sorted_usec_list_t deadline, keepalive, linger;
};

static struct command *commands;
static unsigned next_pid = 1000;

/* ---- Connect framing ------------------------------------------------------ */

static const struct {
        int error;
        const char *code;
        int status;
} connect_codes[] = {
        {ENOENT, "not_found", 404},           {EEXIST, "already_exists", 409},
        {ENOTDIR, "invalid_argument", 400},   {EISDIR, "invalid_argument", 400},
        {EINVAL, "invalid_argument", 400},    {ENAMETOOLONG, "invalid_argument", 400},
        {ELOOP, "invalid_argument", 400},     {EACCES, "permission_denied", 403},
        {EPERM, "permission_denied", 403},    {EROFS, "permission_denied", 403},
        {ENOSPC, "resource_exhausted", 429},  {ESRCH, "not_found", 404},
        {ENOSYS, "unimplemented", 501},       {ETIMEDOUT, "deadline_exceeded", 504},
};

/* One envelope: a flags byte, a big-endian length, the JSON. */
void envd_write_frame(struct http_request *r, unsigned char flags, json_t *msg)
{
        char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
        unsigned char head[5];
        size_t len;

        json_decref(msg);
        if (!text || !r)
                goto out;
        len = strlen(text);
        head[0] = flags;
        head[1] = (unsigned char)(len >> 24);
        head[2] = (unsigned char)(len >> 16);
        head[3] = (unsigned char)(len >> 8);
        head[4] = (unsigned char)len;
        /* Both or neither: a head without its JSON would break the
         * framing of everything after it. */
        if (http_stream_pending(r) + 5 + len > r->out.max || http_stream_write(r, head, 5) < 0 ||
            http_stream_write(r, text, len) < 0) {
                static struct log_limit too_far;

                log_warn_limited(&too_far, "a command's client is too far behind; output dropped");
        }
out:
        free(text);
}

static const char *connect_code(int error, int *status)
{
        const char *code = "internal";

        *status = 500;
        for (size_t i = 0; i < sizeof(connect_codes) / sizeof(connect_codes[0]); i++) {
                if (connect_codes[i].error == -error) {
                        code = connect_codes[i].code;
                        *status = connect_codes[i].status;
                }
        }
        return code;
}

json_t *envd_error_body(int error, const char *message)
{
        int status;

        return json_pack("{s:s, s:s}", "code", connect_code(error, &status), "message", message);
}

/* A unary call's error: an HTTP status and {"code", "message"}. A
 * streaming call's (stream true): 200, then an end-of-stream frame with
 * the error, which is where Connect clients look for it. */
static void reply_connect_error(struct http_request *r, bool stream, int error, const char *message)
{
        int status;
        json_t *body;

        connect_code(error, &status);
        body = envd_error_body(error, message);
        if (!stream) {
                http_reply_json(r, status, body);
                return;
        }
        http_stream_start(r, 200, CONNECT_JSON);
        envd_write_frame(r, 2, json_pack("{s:o}", "error", body));
        http_stream_end(r);
}

void envd_connect_error(struct http_request *r, bool stream, int error, const char *fmt, ...)
{
        char message[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        reply_connect_error(r, stream, error, message);
}

/* A request's JSON object, nulls dropped (null means absent); NULL if it
 * is not an object. */
json_t *envd_parse_request(const char *data, size_t len)
{
        json_t *req = json_loadb(data ? data : "", len, 0, NULL);

        if (!json_is_object(req)) {
                json_decref(req);
                return NULL;
        }
        api_drop_nulls(req);
        return req;
}

/* The request of a streaming call is one envelope. */
json_t *envd_read_envelope(struct http_request *r)
{
        const unsigned char *p = (const unsigned char *)r->body.data;
        size_t len;

        if (r->body.len < 5)
                return NULL;
        len = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if ((p[0] & 1) || len != r->body.len - 5 || len > MAX_ENVELOPE)
                return NULL;
        return envd_parse_request((const char *)p + 5, len);
}

static void encode_base64(const uint8_t *data, size_t len, struct buf *out)
{
        static const char table[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char quad[4];

        for (size_t i = 0; i < len; i += 3) {
                uint32_t v = (uint32_t)data[i] << 16;

                if (i + 1 < len)
                        v |= (uint32_t)data[i + 1] << 8;
                if (i + 2 < len)
                        v |= data[i + 2];
                quad[0] = table[(v >> 18) & 63];
                quad[1] = table[(v >> 12) & 63];
                quad[2] = i + 1 < len ? table[(v >> 6) & 63] : '=';
                quad[3] = i + 2 < len ? table[v & 63] : '=';
                if (buf_append(out, quad, 4) < 0)
                        return;
        }
}

static int decode_base64(const char *in, struct buf *out)
{
        uint32_t acc = 0;
        int bits = 0;

        for (const char *p = in; *p && *p != '='; p++) {
                const char *alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                const char *at = strchr(alpha, *p);
                int v;

                if (at && *p)
                        v = (int)(at - alpha);
                else if (*p == '+' || *p == '-')
                        v = 62;
                else if (*p == '/' || *p == '_')
                        v = 63;
                else
                        return -EINVAL;
                acc = (acc << 6) | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        char byte = (char)(acc >> (bits - 8));

                        bits -= 8;
                        if (buf_append(out, &byte, 1) < 0)
                                return -E2BIG;
                }
        }
        return 0;
}

/* ---- users -------------------------------------------------------------------- */

/* The user an envd request acts as: the SDKs name it in an
 * "Authorization: Basic base64(name:)" header (the RPCs) or a username
 * query parameter (/files); neither means the default, "user". 0, or
 * -EINVAL (any other name) or -EPERM (root in a sandbox without one) with
 * the reason in message. */
int envd_user_of(struct http_request *r, struct e2b_sandbox *s, enum files_user *who, char *message,
                 size_t size)
{
        char value[256], arg[128];
        const char *name = NULL;
        struct buf decoded;
        int rc = 0;

        buf_init(&decoded, 128);
        if (lws_hdr_copy(r->wsi, value, sizeof(value), WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
            strncasecmp(value, "basic ", 6) == 0) {
                char nul = '\0';

                if (decode_base64(value + 6, &decoded) < 0 || buf_append(&decoded, &nul, 1) < 0) {
                        snprintf(message, size, "the Authorization header is not base64");
                        rc = -EINVAL;
                        goto out;
                }
                decoded.data[strcspn(decoded.data, ":")] = '\0';
                name = decoded.data;
        } else {
                name = lws_get_urlarg_by_name(r->wsi, "username=", arg, sizeof(arg));
        }
        rc = files_user_parse(e2b_box(s), name, who);
        if (rc == -EINVAL)
                snprintf(message, size, "user '%.64s' does not exist here: use 'user' or 'root'",
                         name);
        else if (rc == -EPERM)
                snprintf(message, size,
                         "user 'root' needs a sandbox with a root of its own (a gateway "
                         "running as root)");
out:
        buf_free(&decoded);
        return rc;
}

/* ---- commands ---------------------------------------------------------------- */

static struct command *command_by_pid(struct e2b_sandbox *owner, unsigned pid)
{
        for (struct command *c = commands; c; c = c->next) {
                if (c->owner == owner && c->pid == pid && !c->exited)
                        return c;
        }
        return NULL;
}

static void close_fd(struct command *c, int i)
{
        loop_unwatch(&c->watch[i]);
        if (c->fds[i] >= 0)
                close(c->fds[i]);
        c->fds[i] = -1;
}

static void command_free(struct command *c)
{
        for (struct command **link = &commands; *link; link = &(*link)->next) {
                if (*link == c) {
                        *link = c->next;
                        break;
                }
        }
        for (int i = 0; i < 3; i++)
                close_fd(c, i);
        loop_timer_stop(&c->deadline);
        loop_timer_stop(&c->keepalive);
        loop_timer_stop(&c->linger);
        json_decref(c->config);
        free(c->tag);
        free(c);
}

/* Reads what the command wrote and streams it; false at end of file. */
static bool pump(struct command *c, int i)
{
        static uint8_t data[READ_PIECE];
        ssize_t n;

        if (c->fds[i] < 0)
                return false;
        n = read(c->fds[i], data, sizeof(data));
        if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return true;
                close_fd(c, i);
                return false;
        }
        if (c->r) {
                struct buf b64;

                buf_init(&b64, SIZE_MAX);
                encode_base64(data, (size_t)n, &b64);
                envd_write_frame(c->r, 0,
                                 json_pack("{s:{s:{s:s#}}}", "event", "data",
                                           i == 1 ? "stdout" : "stderr", b64.data ? b64.data : "",
                                           (int)b64.len));
                buf_free(&b64);
        }
        return true;
}

static void end_stream(struct command *c)
{
        char status[64];
        const struct hostmsg_exit *ex = &c->ex;
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
        envd_write_frame(c->r, 0, json_pack("{s:{s:o}}", "event", "end", end));
        envd_write_frame(c->r, 2, json_object());
}

/* Ends the command's stream, if it has one, and lets go of its client. */
static void let_go(struct command *c)
{
        struct http_request *r = c->r;

        if (!r)
                return;
        http_stream_end(r);
        r->ctx = NULL;
        r->cleanup = NULL;
        c->r = NULL;
}

/* Ends the stream with a Connect error, as envd does. */
static void end_with_error(struct command *c, int error, const char *message)
{
        if (!c->r)
                return;
        reply_connect_error(c->r, true, error, message);
        let_go(c);
}

/* Output first, then the end: the end event is sent only once every
 * output pipe is at its end (or the process died and they stay silent). */
static void maybe_finish(struct command *c)
{
        if (!c->exited || c->fds[1] >= 0 || c->fds[2] >= 0)
                return;
        if (c->r) {
                end_stream(c);
                let_go(c);
        }
        command_free(c);
}

static void drain(struct command *c)
{
        for (int i = 1; i < 3; i++) {
                /* Drain each pipe as far as it goes now. */
                while (c->fds[i] >= 0 && pump(c, i) && c->fds[i] >= 0) {
                        int pending = 0;

                        if (ioctl(c->fds[i], FIONREAD, &pending) < 0 || pending == 0)
                                break;
                }
        }
}

static void on_output(void *arg)
{
        struct command *c = arg;

        drain(c);
        maybe_finish(c); /* may free c */
}

/* The process died but a child of it keeps its output open: stop waiting
 * for that output's end. */
static void on_linger(lws_sorted_usec_list_t *sul)
{
        struct command *c = lws_container_of(sul, struct command, linger);

        drain(c);
        close_fd(c, 1);
        close_fd(c, 2);
        maybe_finish(c);
}

static void on_started(void *ctx, const struct hostmsg_started *m, int *fds, size_t nfds)
{
        struct command *c = ctx;

        for (size_t i = 0; i < nfds && i < 3; i++) {
                c->fds[i] = fds[i];
                fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
                if (i > 0)
                        loop_watch_fd(fds[i], on_output, c, &c->watch[i]);
        }
        c->started = true;
        /* Without stdin, the command reads end of file at once. */
        if (!json_is_true(json_object_get(c->config, "stdin")))
                close_fd(c, 0);
        if (c->r) {
                http_stream_start(c->r, 200, CONNECT_JSON);
                envd_write_frame(c->r, 0,
                                 json_pack("{s:{s:{s:i}}}", "event", "start", "pid", c->pid));
        }
}

static void on_failed(void *ctx, const struct hostmsg_failed *m)
{
        struct command *c = ctx;

        /* envd answers a command it cannot run with invalid_argument. */
        end_with_error(c, -EINVAL, m->message);
        command_free(c);
}

static void on_exited(void *ctx, const struct hostmsg_exit *m)
{
        struct command *c = ctx;

        c->exited = true;
        c->ex = *m;
        loop_timer_stop(&c->deadline);
        drain(c);
        if (c->fds[1] >= 0 || c->fds[2] >= 0)
                loop_timer_start(&c->linger, on_linger, 200);
        else
                maybe_finish(c);
}

static const struct host_process_ops command_ops = {on_started, on_failed, on_exited};

static void on_client_gone(struct http_request *r)
{
        struct command *c = r->ctx;

        /* The command runs on, as E2B's do; its output is read and dropped. */
        r->ctx = NULL;
        if (c)
                c->r = NULL;
}

/* At Connect-Timeout-Ms the command is killed and its stream ends as
 * envd's does, with the Connect error deadline_exceeded (the SDKs raise
 * their TimeoutException on it), after the output read so far. */
static void on_deadline(lws_sorted_usec_list_t *sul)
{
        struct command *c = lws_container_of(sul, struct command, deadline);

        log_info("command %u reached its timeout; killing it", c->pid);
        drain(c);
        end_with_error(c, -ETIMEDOUT, "the command ran past its timeout and was killed");
        host_stop(c->id);
}

static void on_keepalive(lws_sorted_usec_list_t *sul)
{
        struct command *c = lws_container_of(sul, struct command, keepalive);

        if (c->r && c->started)
                envd_write_frame(c->r, 0, json_pack("{s:{s:{}}}", "event", "keepalive"));
        loop_timer_start(&c->keepalive, on_keepalive, KEEPALIVE_MS);
}

static void start_command(struct http_request *r, struct e2b_sandbox *s)
{
        char message[256];
        enum files_user who;
        json_t *req = envd_read_envelope(r);
        json_t *process = json_object_get(req, "process");
        json_t *args = json_object_get(process, "args"), *envs = json_object_get(process, "envs");
        const char *cmd = json_string_value(json_object_get(process, "cmd"));
        const char *cwd = json_string_value(json_object_get(process, "cwd"));
        struct hostmsg_start start = {.kernel = false};
        char header_value[32], **env = NULL;
        size_t nargs = json_array_size(args), n = 0, count = 0;
        struct command *c = NULL;
        const char *key;
        json_t *v;

        for (struct command *x = commands; x; x = x->next)
                count += x->owner == s;
        if (envd_user_of(r, s, &who, message, sizeof(message)) < 0) {
                envd_connect_error(r, true, -EINVAL, "%s", message);
                goto out;
        }
        if (json_object_get(req, "pty")) {
                envd_connect_error(r, true, -ENOSYS,
                                   "pseudo-terminals (pty) are not supported by Glovebox");
                goto out;
        }
        if (!cmd || (args && !json_is_array(args)) || (envs && !json_is_object(envs))) {
                envd_connect_error(r, true, -EINVAL,
                                   "process.cmd must be a string, args an array, envs an object");
                goto out;
        }
        if (count >= MAX_COMMANDS) {
                envd_connect_error(r, true, -ENOSPC, "too many commands in this sandbox");
                goto out;
        }
        c = calloc(1, sizeof(*c));
        start.argv = calloc(nargs + 2, sizeof(char *));
        env = calloc(json_object_size(e2b_env(s)) + json_object_size(envs) + 1, sizeof(char *));
        if (!c || !start.argv || !env || jp_uuid4(c->id) < 0) {
                envd_connect_error(r, true, -ENOMEM, "out of memory");
                goto out;
        }
        c->fds[0] = c->fds[1] = c->fds[2] = -1;
        start.argv[0] = (char *)cmd;
        for (size_t i = 0; i < nargs; i++)
                start.argv[i + 1] = (char *)(json_is_string(json_array_get(args, i))
                                                     ? json_string_value(json_array_get(args, i))
                                                     : "");
        /* The sandbox's envVars, then the command's own. */
        json_object_foreach(e2b_env(s), key, v) {
                if (asprintf(&env[n], "%s=%s", key, json_string_value(v)) >= 0)
                        n++;
        }
        json_object_foreach(envs, key, v) {
                if (json_is_string(v) && asprintf(&env[n], "%s=%s", key, json_string_value(v)) >= 0)
                        n++;
        }
        start.env = env;
        snprintf(start.id, sizeof(start.id), "%s", c->id);
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", e2b_box(s)->id);
        snprintf(start.cwd, sizeof(start.cwd), "%s", cwd && cwd[0] == '/' ? cwd : "");
        start.as_root = who == FILES_ROOT;
        c->owner = s;
        c->pid = next_pid++;
        c->config = json_pack("{s:O, s:b}", "process", process, "stdin",
                              json_is_true(json_object_get(req, "stdin")));
        if (json_is_string(json_object_get(req, "tag")))
                c->tag = strdup(json_string_value(json_object_get(req, "tag")));
        c->r = r;
        r->ctx = c;
        r->cleanup = on_client_gone;
        c->next = commands;
        commands = c;
        if (host_start(&start, &command_ops, c) < 0) {
                commands = c->next;
                r->ctx = NULL;
                r->cleanup = NULL;
                envd_connect_error(r, true, -EIO, "cannot reach the kernel-host");
                json_decref(c->config);
                free(c->tag);
                free(c);
                c = NULL;
                goto out;
        }
        /* Connect-Timeout-Ms bounds the command's whole life. */
        if (lws_hdr_custom_copy(r->wsi, header_value, sizeof(header_value), "connect-timeout-ms:",
                                19) > 0 &&
            strtol(header_value, NULL, 10) > 0)
                loop_timer_start(&c->deadline, on_deadline, (double)strtol(header_value, NULL, 10));
        loop_timer_start(&c->keepalive, on_keepalive, KEEPALIVE_MS);
        c = NULL;
out:
        free(c);
        free(start.argv);
        jp_strv_free(env);
        json_decref(req);
}

static unsigned selected_pid(json_t *req)
{
        return (unsigned)json_integer_value(json_object_get(json_object_get(req, "process"), "pid"));
}

static void process_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method)
{
        static const char *const unary[] = {"List", "SendSignal", "SendInput", "CloseStdin",
                                            NULL};
        json_t *req = NULL;
        struct command *c;

        if (!jp_strv_contains(unary, method)) {
                /* Connect and StreamInput are streams: the error goes in one. */
                envd_connect_error(
                    r, strcmp(method, "Connect") == 0 || strcmp(method, "StreamInput") == 0,
                    -ENOSYS, "process.Process/%s is not supported by Glovebox", method);
                return;
        }
        req = r->body.len ? envd_parse_request(r->body.data, r->body.len) : json_object();
        c = req ? command_by_pid(s, selected_pid(req)) : NULL;
        if (!req) {
                envd_connect_error(r, false, -EINVAL, "the request is not JSON");
        } else if (strcmp(method, "List") == 0) {
                json_t *list = json_array();

                for (struct command *x = commands; list && x; x = x->next) {
                        json_t *config = json_object_get(x->config, "process");
                        json_t *info;

                        if (x->owner != s || x->exited)
                                continue;
                        info = json_pack("{s:i, s:O}", "pid", x->pid, "config", config);
                        if (info && x->tag)
                                json_object_set_new(info, "tag", json_string(x->tag));
                        json_array_append_new(list, info);
                }
                http_reply_json(r, 200, json_pack("{s:o}", "processes", list));
        } else if (!c) {
                envd_connect_error(r, false, -ESRCH, "process with pid %u not found",
                                   selected_pid(req));
        } else if (strcmp(method, "SendSignal") == 0) {
                const char *sig = json_string_value(json_object_get(req, "signal"));

                if (sig && strcmp(sig, "SIGNAL_SIGTERM") == 0)
                        host_signal(c->id, SIGTERM);
                else
                        host_stop(c->id);
                http_reply_json(r, 200, json_object());
        } else if (strcmp(method, "SendInput") == 0 || strcmp(method, "CloseStdin") == 0) {
                const char *data = json_string_value(
                        json_object_get(json_object_get(req, "input"), "stdin"));
                struct buf bytes;

                buf_init(&bytes, MAX_ENVELOPE);
                if (c->fds[0] < 0) {
                        envd_connect_error(r, false, -EINVAL, "stdin of %u is closed", c->pid);
                } else if (strcmp(method, "CloseStdin") == 0) {
                        close_fd(c, 0);
                        http_reply_json(r, 200, json_object());
                } else if (!data || decode_base64(data, &bytes) < 0 ||
                           (bytes.len && write(c->fds[0], bytes.data, bytes.len) < 0)) {
                        envd_connect_error(r, false, -EINVAL,
                                           "cannot write to the process's stdin");
                } else {
                        http_reply_json(r, 200, json_object());
                }
                buf_free(&bytes);
        }
        json_decref(req);
}

void envd_forget(struct e2b_sandbox *s)
{
        struct command *c = commands;

        envd_watch_forget(s);
        while (c) {
                struct command *next = c->next;

                if (c->owner == s) {
                        /* The sandbox's death kills the process; stop listening. */
                        let_go(c);
                        host_stop(c->id);
                        c->owner = NULL;
                }
                c = next;
        }
}

/* ---- files -------------------------------------------------------------------- */

static void filesystem_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method)
{
        static const char *const unary[] = {"ListDir", "Stat", "MakeDir", "Move", "Remove", NULL};
        char full[PATH_MAX], other[PATH_MAX], message[256];
        struct sandbox *sb = e2b_box(s);
        json_t *req = NULL, *result = NULL;
        enum files_user who;
        const char *path;
        int rc;

        if (envd_watch_rpc(r, s, method))
                return;
        if (!jp_strv_contains(unary, method)) {
                envd_connect_error(r, false, -ENOSYS,
                                   "filesystem.Filesystem/%s is not supported by Glovebox", method);
                return;
        }
        if (envd_user_of(r, s, &who, message, sizeof(message)) < 0) {
                envd_connect_error(r, false, -EINVAL, "%s", message);
                return;
        }
        req = envd_parse_request(r->body.data, r->body.len);
        path = json_string_value(json_object_get(req, "path"));
        if (!req) {
                envd_connect_error(r, false, -EINVAL, "the request is not a JSON object");
                goto out;
        }
        if (strcmp(method, "Move") == 0)
                path = json_string_value(json_object_get(req, "source"));
        if (!path || files_normalize(path, full, sizeof(full)) < 0) {
                envd_connect_error(r, false, -EINVAL, "a path is needed");
                goto out;
        }
        if (strcmp(method, "ListDir") == 0) {
                json_int_t depth = json_integer_value(json_object_get(req, "depth"));

                rc = files_list(sb, who, full, depth > 0 ? (unsigned)depth : 1, &result);
                if (rc == 0)
                        result = json_pack("{s:o}", "entries", result);
        } else if (strcmp(method, "Stat") == 0) {
                rc = files_stat(sb, who, full, &result);
                if (rc == 0)
                        result = json_pack("{s:o}", "entry", result);
        } else if (strcmp(method, "MakeDir") == 0) {
                rc = files_mkdir(sb, who, full);
                if (rc == 0 && files_stat(sb, who, full, &result) == 0)
                        result = json_pack("{s:o}", "entry", result);
        } else if (strcmp(method, "Move") == 0) {
                const char *to = json_string_value(json_object_get(req, "destination"));

                rc = to && files_normalize(to, other, sizeof(other)) == 0 ? 0 : -EINVAL;
                if (rc == 0)
                        rc = files_rename(sb, who, full, other);
                if (rc == 0 && files_stat(sb, who, other, &result) == 0)
                        result = json_pack("{s:o}", "entry", result);
        } else {
                rc = files_remove(sb, who, full);
                result = json_object();
        }
        if (rc < 0)
                envd_connect_error(r, false, rc, "%s: %s", full, strerror(-rc));
        else
                http_reply_json(r, 200, result ? result : json_object());
        if (rc < 0)
                json_decref(result);
out:
        json_decref(req);
}

static bool query_path(struct http_request *r, char *out, size_t size)
{
        char arg[PATH_MAX + 8];
        const char *path = lws_get_urlarg_by_name(r->wsi, "path=", arg, sizeof(arg));

        return path && files_normalize(path, out, size) == 0;
}

static int envd_status(int error)
{
        return error == -ENOSPC || error == -EDQUOT ? 507 : files_http_status(error);
}

bool envd_prepare(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        char path[PATH_MAX], content_type[128] = "", err[PATH_MAX];
        enum files_user who;
        int rc;

        if (strcmp(route, "files") != 0 || r->method != HTTP_POST)
                return false;
        if (envd_user_of(r, s, &who, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
                return true;
        }
        lws_hdr_copy(r->wsi, content_type, sizeof(content_type), WSI_TOKEN_HTTP_CONTENT_TYPE);
        rc = upload_start(r, e2b_box(s), who, query_path(r, path, sizeof(path)) ? path : NULL,
                          strncmp(content_type, "multipart/", 10) == 0, err, sizeof(err));
        if (rc < 0)
                e2b_reply_error(r, rc == -EINVAL ? 400 : envd_status(rc), "cannot write %s: %s",
                                err, strerror(-rc));
        return true;
}

static void files_route(struct http_request *r, struct e2b_sandbox *s)
{
        char path[PATH_MAX], err[PATH_MAX];
        enum files_user who;
        struct stat st;
        json_t *written;
        int fd, rc;

        if (r->method == HTTP_POST) {
                rc = upload_finish(r, &written, err, sizeof(err));
                if (rc < 0)
                        e2b_reply_error(r, envd_status(rc), "cannot write %s: %s", err,
                                        strerror(-rc));
                else if (json_array_size(written) == 0)
                        e2b_reply_error(r, 400, "no file in the request");
                else
                        http_reply_json(r, 200, json_incref(written));
                json_decref(written);
                return;
        }
        if (r->method != HTTP_GET) {
                e2b_reply_error(r, 405, "use GET or POST");
                return;
        }
        if (!query_path(r, path, sizeof(path))) {
                e2b_reply_error(r, 400, "the path parameter is missing");
                return;
        }
        if (envd_user_of(r, s, &who, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
                return;
        }
        rc = files_open_read(e2b_box(s), who, path, &fd, &st);
        if (rc == -EISDIR)
                e2b_reply_error(r, 400, "path '%s' is a directory", path);
        else if (rc < 0)
                e2b_reply_error(r, envd_status(rc), "path '%s': %s", path, strerror(-rc));
        else
                http_reply_fd(r, 200, "application/octet-stream", fd, (uint64_t)st.st_size);
}

void envd_handle(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        if (strcmp(route, "health") == 0)
                http_reply_empty(r, 204);
        else if (strcmp(route, "files") == 0)
                files_route(r, s);
        else if (strncmp(route, "filesystem.Filesystem/", 22) == 0 && r->method == HTTP_POST)
                filesystem_rpc(r, s, route + 22);
        else if (strcmp(route, "process.Process/Start") == 0 && r->method == HTTP_POST)
                start_command(r, s);
        else if (strncmp(route, "process.Process/", 16) == 0 && r->method == HTTP_POST)
                process_rpc(r, s, route + 16);
        else
                e2b_reply_error(r, 404, "no route %s", route);
}
