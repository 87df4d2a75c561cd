#include "autoconf.h"

#include "gateway/terminals/terminals.h"
#include "gateway/core/http.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/kernels/specs.h"
#include "gateway/core/tenants.h"
#include "protocol/fleetid.h"
#include "protocol/ids.h"
#include "protocol/log.h"
#include "protocol/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define SOCKET_PREFIX    "terminals/websocket/"
#define NAME_MAX_LEN     64
#define READ_PIECE       (64 * 1024)
#define HISTORY_BYTES    (64 * 1024)   /* output replayed to a client that connects */
#define CLIENT_QUEUE_MAX (1024 * 1024) /* output waiting for one client: reading pauses */
#define INPUT_MAX        (1024 * 1024) /* input waiting for the terminal to take it */
#define MESSAGE_MAX      (1024 * 1024) /* one client message */
#define SIDE_MAX         4096          /* rows or columns */
#define INPUT_RETRY_MS   10.0

struct terminal_frame {
        struct terminal_frame *next;
        size_t len;
        unsigned char data[]; /* LWS_PRE bytes of headroom, then the text */
};

struct terminal {
        struct terminal *next;
        char name[NAME_MAX_LEN + 1];
        char id[JP_UUID_SIZE];        /* the shell's, at the kernel-host */
        char kernel_id[JP_UUID_SIZE]; /* "" in a sandbox of its own */
        char owner[KEYS_NAME_MAX];    /* the tenant whose key started it */
        char cwd[PATH_MAX];
        struct sandbox *own; /* its own sandbox, or NULL */
        struct sandbox_waiter wait;
        struct http_request *creating; /* the POST waiting for it, or NULL */
        bool listed;                   /* started, and not deleted: clients see it */
        bool running;                  /* the kernel-host has a process for it */
        int master;                    /* written: the input */
        int reader;                    /* a copy of the master, watched: the output */
        struct loop_watch *watch;
        bool paused;        /* a client is too far behind: not reading */
        uint8_t partial[4]; /* a character cut off at the end of the last read */
        size_t npartial;
        struct buf history; /* the last output, whole characters */
        struct buf input;   /* what the terminal did not take yet */
        lws_sorted_usec_list_t input_retry;
        struct timespec last_activity;
        struct terminal_conn *conns;
};

static struct terminal *terminals;
static size_t terminal_count; /* starting ones included */

/* ---- the terminal itself -------------------------------------------------- */

/* A terminal the caller may reach by name. Names are each tenant's own
 * (two tenants may both have a "1"), so the caller's own comes first; an
 * admin, who reaches every tenant's, gets another's only when it has none
 * of that name. Another tenant's is not found. */
static struct terminal *terminal_find(const char *name)
{
        const char *me = tenants_owner_now();
        struct terminal *other = NULL;

        for (struct terminal *t = terminals; t; t = t->next) {
                if (!t->listed || strcmp(t->name, name) != 0)
                        continue;
                if (strcmp(t->owner, me) == 0)
                        return t;
                if (!other && tenants_may_reach(t->owner))
                        other = t;
        }
        return other;
}

/* Whether owner has a terminal called name, starting ones too. Only the
 * owner's own count: were names shared by all tenants, a 409 for a name
 * another tenant holds (whose GET answers 404) would tell that it exists,
 * and a tenant could take the names another one's clients ask for. */
static bool name_taken(const char *name, const char *owner)
{
        for (struct terminal *t = terminals; t; t = t->next) {
                if (strcmp(t->name, name) == 0 && strcmp(t->owner, owner) == 0)
                        return true;
        }
        return false;
}

static bool name_valid(const char *name)
{
        size_t len = strlen(name);

        if (len == 0 || len > NAME_MAX_LEN)
                return false;
        for (size_t i = 0; i < len; i++) {
                char ch = name[i];

                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
                        return false;
        }
        return name[0] != '.';
}

static json_t *terminal_model(const struct terminal *t)
{
        char when[JP_TIMESTAMP_SIZE];
        json_t *model;

        jp_timestamp_format(&t->last_activity, when);
        model = json_pack("{s:s, s:s}", "name", t->name, "last_activity", when);
        if (model && t->kernel_id[0])
                json_object_set_new(model, "kernel_id", json_string(t->kernel_id));
        return model;
}

static void touch(struct terminal *t)
{
        clock_gettime(CLOCK_REALTIME, &t->last_activity);
}

static void frame_free_all(struct terminal_conn *c)
{
        while (c->head) {
                struct terminal_frame *f = c->head;

                c->head = f->next;
                free(f);
        }
        c->tail = NULL;
        c->queued = 0;
}

/* Queues a text frame for one client; false when it is too far behind. */
static bool conn_queue(struct terminal_conn *c, const char *text, size_t len)
{
        struct terminal_frame *f;

        if (c->closing)
                return true;
        if (c->queued + len > CLIENT_QUEUE_MAX)
                return false;
        f = malloc(sizeof(*f) + LWS_PRE + len);
        if (!f)
                return false;
        f->next = NULL;
        f->len = len;
        memcpy(f->data + LWS_PRE, text, len);
        if (c->tail)
                c->tail->next = f;
        else
                c->head = f;
        c->tail = f;
        c->queued += len;
        lws_callback_on_writable(c->wsi);
        return true;
}

static void conn_close_later(struct terminal_conn *c, int code, const char *reason)
{
        if (c->closing)
                return;
        c->closing = true;
        c->close_code = code;
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason);
        lws_callback_on_writable(c->wsi);
}

/* Sends msg (JSON) to every client of t; steals msg. */
static void broadcast(struct terminal *t, json_t *msg)
{
        char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

        json_decref(msg);
        if (!text)
                return;
        for (struct terminal_conn *c = t->conns; c; c = c->next) {
                if (!conn_queue(c, text, strlen(text)))
                        conn_close_later(c, 1013, "the client fell too far behind the terminal");
        }
        free(text);
}

static void on_output(void *arg);

static void resume_reading(struct terminal *t)
{
        if (!t->paused || t->reader < 0)
                return;
        t->paused = false;
        if (loop_watch_fd(t->reader, on_output, t, &t->watch) < 0)
                log_warn("terminal %s: cannot watch its output again", t->name);
}

static bool any_client_full(const struct terminal *t)
{
        for (const struct terminal_conn *c = t->conns; c; c = c->next) {
                if (c->queued > CLIENT_QUEUE_MAX / 2)
                        return true;
        }
        return false;
}

/* Keeps the last HISTORY_BYTES of output, cut at a character's start. */
static void remember(struct terminal *t, const char *text, size_t len)
{
        if (len >= HISTORY_BYTES) {
                text += len - HISTORY_BYTES;
                len = HISTORY_BYTES;
                buf_reset(&t->history);
        } else if (t->history.len + len > HISTORY_BYTES) {
                size_t drop = t->history.len + len - HISTORY_BYTES;

                memmove(t->history.data, t->history.data + drop, t->history.len - drop);
                t->history.len -= drop;
        }
        if (buf_append(&t->history, text, len) < 0)
                return;
        /* A continuation byte at the front is half a character. */
        {
                size_t skip = 0;

                while (skip < t->history.len &&
                       ((unsigned char)t->history.data[skip] & 0xc0) == 0x80)
                        skip++;
                memmove(t->history.data, t->history.data + skip, t->history.len - skip);
                t->history.len -= skip;
                t->history.data[t->history.len] = '\0';
        }
}

static void stop_reading(struct terminal *t)
{
        loop_unwatch(&t->watch);
        if (t->reader >= 0)
                close(t->reader);
        t->reader = -1;
}

static void on_output(void *arg)
{
        static uint8_t data[READ_PIECE + 4];
        struct terminal *t = arg;
        struct buf text;
        ssize_t n, used;

        memcpy(data, t->partial, t->npartial);
        n = read(t->reader, data + t->npartial, READ_PIECE);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        /* EIO: every copy of the terminal's peer is closed (the shell and
         * all it started are gone); the exit report follows. */
        if (n <= 0) {
                n = 0;
                stop_reading(t);
        }
        buf_init(&text, 4 * (size_t)(READ_PIECE + 4));
        used = utf8_sanitize(data, t->npartial + (size_t)n, t->reader < 0, &text);
        if (used >= 0) {
                t->npartial = t->npartial + (size_t)n - (size_t)used;
                memmove(t->partial, data + used, t->npartial);
        } else {
                t->npartial = 0;
        }
        if (text.len) {
                touch(t);
                remember(t, text.data, text.len);
                broadcast(t, json_pack("[s, s#]", "stdout", text.data, (int)text.len));
        }
        buf_free(&text);
        /* A client that cannot keep up holds the shell back, as a slow
         * terminal would, rather than losing its output. */
        if (t->reader >= 0 && any_client_full(t)) {
                loop_unwatch(&t->watch);
                t->paused = true;
        }
}

/* Writes what it can of the pending input; the rest waits for the
 * terminal to read. */
static void flush_input(struct terminal *t)
{
        while (t->input.len && t->master >= 0) {
                ssize_t n = write(t->master, t->input.data, t->input.len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n < 0) {
                        buf_reset(&t->input);
                        break;
                }
                memmove(t->input.data, t->input.data + n, t->input.len - (size_t)n);
                t->input.len -= (size_t)n;
        }
}

static void on_input_retry(lws_sorted_usec_list_t *sul)
{
        struct terminal *t = lws_container_of(sul, struct terminal, input_retry);

        flush_input(t);
        if (t->input.len)
                loop_timer_start(&t->input_retry, on_input_retry, INPUT_RETRY_MS);
}

static int terminal_input(struct terminal *t, const char *data, size_t len)
{
        if (t->master < 0)
                return 0;
        if (buf_append(&t->input, data, len) < 0)
                return -E2BIG;
        touch(t);
        flush_input(t);
        if (t->input.len)
                loop_timer_start(&t->input_retry, on_input_retry, INPUT_RETRY_MS);
        return 0;
}

static void terminal_free(struct terminal *t)
{
        for (struct terminal **link = &terminals; *link; link = &(*link)->next) {
                if (*link == t) {
                        *link = t->next;
                        break;
                }
        }
        terminal_count--;
        for (struct terminal_conn *c = t->conns; c; c = c->next)
                c->term = NULL;
        stop_reading(t);
        if (t->master >= 0)
                close(t->master);
        loop_timer_stop(&t->input_retry);
        sandbox_waiter_cancel(&t->wait);
        /* Its own sandbox goes with it; a kernel's stays the kernel's. */
        sandbox_unref(&t->own);
        buf_free(&t->history);
        buf_free(&t->input);
        free(t);
}

/* The shell is gone: every client hears it, then the terminal ends. */
static void terminal_ended(struct terminal *t)
{
        /* The last output first. */
        if (t->reader >= 0 && !t->paused)
                on_output(t);
        broadcast(t, json_pack("[s, i]", "disconnect", 1));
        for (struct terminal_conn *c = t->conns; c; c = c->next)
                conn_close_later(c, 1000, "the terminal ended");
        terminal_free(t);
}

static void reply_creating(struct terminal *t, int status, const char *message)
{
        struct http_request *r = t->creating;

        if (!r)
                return;
        t->creating = NULL;
        r->ctx = NULL;
        r->cleanup = NULL;
        if (status == 200)
                http_reply_json(r, 200, terminal_model(t));
        else
                http_reply_error(r, status, "%s", message);
}

static void on_started(void *ctx, const struct hostmsg_started *m, int *fds, size_t nfds)
{
        struct terminal *t = ctx;

        if (nfds != 1) {
                for (size_t i = 0; i < nfds; i++)
                        close(fds[i]);
                log_error("terminal %s: the kernel-host sent no terminal", t->name);
                host_stop(t->id);
                return;
        }
        t->master = fds[0];
        fcntl(t->master, F_SETFL, fcntl(t->master, F_GETFL) | O_NONBLOCK);
        t->reader = fcntl(t->master, F_DUPFD_CLOEXEC, 0);
        if (t->reader < 0 || loop_watch_fd(t->reader, on_output, t, &t->watch) < 0) {
                host_stop(t->id);
                return;
        }
        t->listed = true;
        touch(t);
        log_info("terminal %s started (pid %d)%s%s", t->name, m->pid,
                 t->kernel_id[0] ? " in the sandbox of kernel " : "",
                 fleetid_short(t->kernel_id).s);
        reply_creating(t, 200, NULL);
}

static void on_failed(void *ctx, const struct hostmsg_failed *m)
{
        struct terminal *t = ctx;

        t->running = false;
        log_warn("terminal %s could not start: %s", t->name, m->message);
        reply_creating(t, 500, m->message);
        terminal_free(t);
}

static void on_exited(void *ctx, const struct hostmsg_exit *m)
{
        struct terminal *t = ctx;

        t->running = false;
        log_info("terminal %s ended (%s, code %d, signal %d)", t->name, m->reason, m->exit_code,
                 m->signal);
        reply_creating(t, 500, "the terminal's shell ended as it started");
        terminal_ended(t);
}

static const struct host_process_ops terminal_ops = {on_started, on_failed, on_exited};

/* Starts the shell in sb: a login bash on a new pseudo-terminal, as the
 * sandbox's user, in its home or cwd. */
static int start_shell(struct terminal *t, struct sandbox *sb)
{
        char *argv[] = {(char *)"/bin/bash", (char *)"-l", NULL};
        char *env[] = {(char *)"SHELL=/bin/bash", NULL};
        struct hostmsg_start start = {.kernel = false, .pty = true, .rows = 24, .cols = 80};
        int rc;

        snprintf(start.id, sizeof(start.id), "%s", t->id);
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", sb->id);
        snprintf(start.cwd, sizeof(start.cwd), "%s", t->cwd);
        start.argv = argv;
        start.env = env;
        rc = host_start(&start, &terminal_ops, t);
        t->running = rc == 0;
        return rc;
}

static void on_sandbox_ready(struct sandbox_waiter *w, struct sandbox *sb, const char *error)
{
        struct terminal *t = lws_container_of(w, struct terminal, wait);

        w->sandbox = NULL;
        if (error) {
                reply_creating(t, 500, error);
                terminal_free(t);
        } else if (start_shell(t, sb) < 0) {
                reply_creating(t, 503, "cannot reach the kernel-host");
                terminal_free(t);
        }
}

static void on_post_gone(struct http_request *r)
{
        struct terminal *t = r->ctx;

        /* It starts all the same, as Jupyter's would: the client may list it. */
        r->ctx = NULL;
        if (t)
                t->creating = NULL;
}

/* ---- REST -------------------------------------------------------------------- */

static void next_name(char *out, size_t size, const char *owner)
{
        for (unsigned n = 1;; n++) {
                snprintf(out, size, "%u", n);
                if (!name_taken(out, owner))
                        return;
        }
}

static void post_terminal(struct http_request *r)
{
        const struct config *cfg = config_get();
        json_t *body = http_parse_body(r);
        json_t *jname = json_object_get(body, "name"), *jcwd = json_object_get(body, "cwd");
        json_t *jkernel = json_object_get(body, "kernel_id");
        struct sandbox *sb = NULL;
        struct terminal *t = NULL;
        struct hostmsg_limits limits;
        int rc;

        if (!body)
                return;
        if ((jname && !json_is_string(jname)) || (jcwd && !json_is_string(jcwd)) ||
            (jkernel && !json_is_string(jkernel))) {
                http_reply_error(r, 400, "\"name\", \"cwd\" and \"kernel_id\" must be strings");
                goto out;
        }
        if (jname && json_string_length(jname) && !name_valid(json_string_value(jname))) {
                http_reply_error(r, 400,
                                 "A terminal's name is 1 to %d letters, digits, '-', '_' "
                                 "or '.', not starting with '.'",
                                 NAME_MAX_LEN);
                goto out;
        }
        if (jname && json_string_length(jname) &&
            name_taken(json_string_value(jname), tenants_owner_now())) {
                http_reply_error(r, 409, "A terminal named %s already exists",
                                 json_string_value(jname));
                goto out;
        }
        if (jcwd && json_string_length(jcwd) &&
            (json_string_value(jcwd)[0] != '/' || json_string_length(jcwd) >= PATH_MAX ||
             strlen(json_string_value(jcwd)) != json_string_length(jcwd))) {
                http_reply_error(r, 400, "\"cwd\" must be an absolute path inside the sandbox");
                goto out;
        }
        if (terminal_count >= (size_t)cfg->max_terminals) {
                http_reply_error(r, 403, "Terminal limit of %lld reached (--max-terminals)",
                                 (long long)cfg->max_terminals);
                goto out;
        }
        if (jkernel) {
                struct kernel *k = kernel_find(json_string_value(jkernel));

                if (!k) {
                        http_reply_error(r, 404, "Kernel does not exist: %.64s",
                                         json_string_value(jkernel));
                        goto out;
                }
                sb = k->sandbox;
                if (!sb || sb->phase != SANDBOX_READY || sb->destroying) {
                        http_reply_error(r, 409,
                                         "Kernel %s has no sandbox ready (it is %s): "
                                         "try again once it is idle",
                                         k->id, k->execution_state);
                        goto out;
                }
        }
        if (!jkernel) {
                json_t *why = NULL;

                /* A sandbox of its own counts in the key's quota as a
                 * kernel's does (its memory and CPU). */
                kernels_default_limits(&limits);
                if (kernels_quota_check_sandbox(&limits, &why) == -EDQUOT) {
                        http_reply_json(r, 429, why);
                        goto out;
                }
        }
        t = calloc(1, sizeof(*t));
        if (!t || jp_uuid4(t->id) < 0) {
                http_reply_error(r, 500, "out of memory");
                goto out;
        }
        t->master = t->reader = -1;
        snprintf(t->owner, sizeof(t->owner), "%s", tenants_owner_now());
        t->wait.ready = on_sandbox_ready;
        buf_init(&t->history, HISTORY_BYTES + 1);
        buf_init(&t->input, INPUT_MAX);
        if (jname && json_string_length(jname))
                snprintf(t->name, sizeof(t->name), "%s", json_string_value(jname));
        else
                next_name(t->name, sizeof(t->name), t->owner);
        if (jcwd)
                snprintf(t->cwd, sizeof(t->cwd), "%s", json_string_value(jcwd));
        if (sb)
                snprintf(t->kernel_id, sizeof(t->kernel_id), "%s", json_string_value(jkernel));
        touch(t);
        t->next = terminals;
        terminals = t;
        terminal_count++;
        t->creating = r;
        r->ctx = t;
        r->cleanup = on_post_gone;
        if (sb) {
                rc = start_shell(t, sb);
        } else {
                rc = sandbox_new(&limits, specs_ro_paths(), strcmp(cfg->sandbox, "none") != 0,
                                 &t->own);
                if (rc == 0)
                        sandbox_when_ready(t->own, &t->wait); /* may reply and free t */
        }
        if (rc < 0) {
                reply_creating(t, 503, "cannot reach the kernel-host");
                terminal_free(t);
        }
        t = NULL;
out:
        free(t);
        json_decref(body);
}

void terminals_usage(const char *owner, int64_t *memory_mb, int64_t *cpu_millicores)
{
        for (struct terminal *t = terminals; t; t = t->next) {
                /* Deleted, it no longer counts while its shell ends. */
                if (t->own && (t->listed || t->creating) && strcmp(t->owner, owner) == 0) {
                        *memory_mb += t->own->limits.memory_mb;
                        *cpu_millicores += t->own->limits.cpu_millis;
                }
        }
}

void terminals_handle(struct http_request *r, const char *name)
{
        struct terminal *t = name ? terminal_find(name) : NULL;

        if (!name) {
                if (r->method == HTTP_GET) {
                        json_t *list = json_array();

                        for (t = terminals; list && t; t = t->next) {
                                if (t->listed && tenants_may_reach(t->owner))
                                        json_array_append_new(list, terminal_model(t));
                        }
                        http_reply_json(r, 200, list);
                } else if (r->method == HTTP_POST) {
                        post_terminal(r);
                } else {
                        http_reply_error(r, 405, "Use GET or POST on /api/terminals");
                }
                return;
        }
        if (!t) {
                http_reply_error(r, 404, "Terminal not found: %.64s", name);
        } else if (r->method == HTTP_GET) {
                http_reply_json(r, 200, terminal_model(t));
        } else if (r->method == HTTP_DELETE) {
                /* Gone for clients now; it ends once the shell is reaped. */
                t->listed = false;
                host_stop(t->id);
                http_reply_empty(r, 204);
        } else {
                http_reply_error(r, 405, "Use GET or DELETE on a terminal");
        }
}

void terminals_shutdown(void)
{
        for (struct terminal *t = terminals; t; t = t->next) {
                if (t->running)
                        host_stop(t->id);
        }
}

/* ---- the WebSocket ------------------------------------------------------------- */

bool terminals_is_socket_path(const char *path)
{
        return strncmp(path, SOCKET_PREFIX, strlen(SOCKET_PREFIX)) == 0;
}

static struct terminal *terminal_of_path(const char *path)
{
        if (!terminals_is_socket_path(path))
                return NULL;
        return terminal_find(path + strlen(SOCKET_PREFIX));
}

bool terminals_socket_exists(const char *path)
{
        return terminal_of_path(path) != NULL;
}

static void detach(struct terminal_conn *c)
{
        struct terminal *t = c->term;

        if (!t)
                return;
        for (struct terminal_conn **link = &t->conns; *link; link = &(*link)->next) {
                if (*link == c) {
                        *link = c->next;
                        break;
                }
        }
        c->term = NULL;
        if (!any_client_full(t))
                resume_reading(t);
}

static void on_key_removed(struct tenant_watch *w)
{
        conn_close_later(lws_container_of(w, struct terminal_conn, key), 1008,
                         "The key of this connection was removed");
}

static int on_established(struct lws *wsi, struct terminal_conn *c)
{
        char path[HTTP_PATH_MAX];
        struct terminal *t;

        memset(c, 0, sizeof(*c));
        c->wsi = wsi;
        buf_init(&c->rx, MESSAGE_MAX);
        /* A callback of its own: the key is checked again to know the
         * caller, who may reach only its own terminals. */
        if (!http_authorized(wsi))
                return -1;
        t = http_route_path(wsi, path, sizeof(path)) == 0 ? terminal_of_path(path) : NULL;
        if (!t)
                return -1;
        tenants_watch(&c->key, tenants_caller()->name, on_key_removed);
        c->term = t;
        c->next = t->conns;
        t->conns = c;
        /* terminado's greeting, then what the terminal showed lately. */
        conn_queue(c, "[\"setup\",{}]", 12);
        if (t->history.len) {
                json_t *msg = json_pack("[s, s#]", "stdout", t->history.data, (int)t->history.len);
                char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

                if (text)
                        conn_queue(c, text, strlen(text));
                free(text);
                json_decref(msg);
        }
        return 0;
}

/* ["set_size", rows, cols, ...]: sizes out of range (a hidden widget's
 * zeros) are ignored, as a terminal would. */
static int set_size(struct terminal_conn *c, json_t *msg)
{
        json_t *rows = json_array_get(msg, 1), *cols = json_array_get(msg, 2);
        struct winsize size = {0};

        if (!json_is_number(rows) || !json_is_number(cols)) {
                conn_close_later(c, 1003, "set_size takes [\"set_size\", rows, cols]");
                return 0;
        }
        if (json_number_value(rows) < 1 || json_number_value(rows) > SIDE_MAX ||
            json_number_value(cols) < 1 || json_number_value(cols) > SIDE_MAX)
                return 0;
        size.ws_row = (unsigned short)json_number_value(rows);
        size.ws_col = (unsigned short)json_number_value(cols);
        if (c->term->master >= 0)
                ioctl(c->term->master, TIOCSWINSZ, &size);
        return 0;
}

static void on_message(struct terminal_conn *c)
{
        json_t *msg = json_loadb(c->rx.data ? c->rx.data : "", c->rx.len, 0, NULL);
        const char *type = json_string_value(json_array_get(msg, 0));

        if (!json_is_array(msg) || !type) {
                conn_close_later(c, 1007, "expected a JSON array [type, ...]");
        } else if (!c->term) {
                /* The terminal ended; its disconnect is on its way. */
        } else if (strcmp(type, "stdin") == 0) {
                json_t *text = json_array_get(msg, 1);

                if (!json_is_string(text))
                        conn_close_later(c, 1003, "stdin takes [\"stdin\", text]");
                else if (terminal_input(c->term, json_string_value(text),
                                        json_string_length(text)) < 0)
                        conn_close_later(c, 1009,
                                         "input arrives faster than the terminal reads it");
        } else if (strcmp(type, "set_size") == 0) {
                set_size(c, msg);
        }
        /* Anything else (terminado's clients send nothing else) is ignored. */
        json_decref(msg);
}

static int on_receive(struct terminal_conn *c, const void *in, size_t len)
{
        bool final = lws_is_final_fragment(c->wsi);

        if (lws_frame_is_binary(c->wsi) && lws_is_first_fragment(c->wsi)) {
                conn_close_later(c, 1003, "terminal messages are JSON text frames");
                return 0;
        }
        if (!c->rx_oversized && buf_append(&c->rx, in, len) < 0) {
                c->rx_oversized = true;
                buf_free(&c->rx);
                buf_init(&c->rx, MESSAGE_MAX);
        }
        if (!final)
                return 0;
        if (c->rx_oversized)
                conn_close_later(c, 1009, "a terminal message is limited to 1 MiB");
        else if (!c->closing)
                on_message(c);
        c->rx_oversized = false;
        buf_reset(&c->rx);
        return 0;
}

static int on_writeable(struct terminal_conn *c)
{
        struct terminal_frame *f = c->head;

        if (f) {
                c->head = f->next;
                if (!c->head)
                        c->tail = NULL;
                c->queued -= f->len;
                if (lws_write(c->wsi, f->data + LWS_PRE, f->len, LWS_WRITE_TEXT) < (int)f->len) {
                        free(f);
                        return -1;
                }
                free(f);
                if (c->term && c->term->paused && !any_client_full(c->term))
                        resume_reading(c->term);
                if (c->head || c->closing)
                        lws_callback_on_writable(c->wsi);
                return 0;
        }
        if (c->closing) {
                lws_close_reason(c->wsi, (enum lws_close_status)c->close_code,
                                 (unsigned char *)c->close_reason, strlen(c->close_reason));
                return -1;
        }
        return 0;
}

int terminals_callback(struct lws *wsi, enum lws_callback_reasons reason, struct terminal_conn *c,
                       void *in, size_t len)
{
        switch (reason) {
        case LWS_CALLBACK_ESTABLISHED:
                return on_established(wsi, c);
        case LWS_CALLBACK_RECEIVE:
                return on_receive(c, in, len);
        case LWS_CALLBACK_SERVER_WRITEABLE:
                return on_writeable(c);
        case LWS_CALLBACK_CLOSED:
                tenants_unwatch(&c->key);
                detach(c);
                frame_free_all(c);
                buf_free(&c->rx);
                return 0;
        default:
                return 0;
        }
}
