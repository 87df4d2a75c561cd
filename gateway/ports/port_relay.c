#include "autoconf.h"

#include "gateway/ports/port_relay.h"
#include "gateway/core/access_log.h"
#include "gateway/core/conns.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/core/loop.h"
#include "gateway/core/keys.h"
#include "gateway/core/tenants.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ANSWER_HEAD_MAX (16 * 1024) /* the app's answer head, held until it is whole */

/* One client connection relayed to one connection into a sandbox. */
struct relay {
        struct relay *next;
        struct lws *wsi; /* the client's connection while lws has it, or NULL */
        int client_fd;   /* its socket: lws's, or our own once taken (upgrades) */
        char request_id[JP_UUID_SIZE];
        struct connect *connect; /* while the kernel-host connects for it */
        struct sandbox_wake wake;  /* while its sandbox wakes (sandboxes.h) */
        char owner[KEYS_NAME_MAX]; /* whose connecting slots its connect takes */
        bool upgrade;            /* a WebSocket (any Upgrade): bytes both ways after the head */
        bool body_done;          /* the client's request is all read by lws */
        bool head_passed;        /* the app's head went on, with our headers in */
        bool up_eof, client_eof, finished;
        int port;
        int up_fd; /* the sandbox side */
        struct loop_watch *up_watch;
        struct loop_watch *client_watch; /* a duplicate of the client's socket */
        struct buf to_up;                /* head and body not yet written to the sandbox */
        size_t to_up_at;
        struct buf to_client; /* the answer not yet written to the client */
        size_t to_client_at;
        char inject[PORT_RELAY_INJECT_MAX];     /* header lines put after the answer's first line */
        char app_prefix[PORT_RELAY_PREFIX_MAX]; /* the path form's prefix, or "" */
        struct buf answer_head;                 /* the app's head until it is whole */
        lws_sorted_usec_list_t reaper;          /* frees a relay lws no longer knows of */
        struct tenant_watch key;                /* the key that admitted it */
        /* Its access line (core/access_log.h), written as it is freed. */
        double started; /* 0 until the relay has started */
        char method[16];
        char tenant[KEYS_NAME_MAX];
        int status;      /* the answer's, once its head passed; 0 before */
        size_t head_len; /* our rebuilt head, not counted as the client's bytes */
        uint64_t bytes_up, bytes_out;
        lws_sorted_usec_list_t idle; /* ends an upgraded relay that moves nothing */
        double last_active;          /* when a byte last moved, either way */
};

/* A connection the kernel-host is making, until it answers. It holds one
 * of the kernel-host's connecting slots that long whether or not its relay
 * is still there (a client that hangs up leaves the child connecting), so
 * a tenant's share is counted in these, not in relays. */
struct connect {
        struct connect *next;
        struct relay *relay; /* NULL once the relay is gone: the answer is dropped */
        char tenant[KEYS_NAME_MAX];
};

static struct relay *relays;
static struct connect *connects;
static size_t taken; /* relays whose client connection is ours, not lws's */
static size_t buffer_bytes;
static double idle_timeout_s;
static size_t connecting_per_tenant;
static struct log_limit overflows;

void port_relay_init(size_t bytes, double idle_timeout, size_t per_tenant)
{
        buffer_bytes = bytes;
        idle_timeout_s = idle_timeout;
        connecting_per_tenant = per_tenant;
}

static size_t tenant_connecting(const char *tenant)
{
        size_t n = 0;

        for (struct connect *c = connects; c; c = c->next)
                n += strcmp(c->tenant, tenant) == 0;
        return n;
}

size_t port_relay_taken(void)
{
        return taken;
}

static struct relay *relay_of(struct lws *wsi)
{
        for (struct relay *p = relays; p; p = p->next) {
                if (p->wsi == wsi)
                        return p;
        }
        return NULL;
}

static void log_relay(const struct relay *p)
{
        struct access_record a = {
            .method = p->method,
            .route = "ports",
            /* No answer: the client left (nginx's 499). */
            .status = p->status ? p->status : 499,
            .bytes_in = p->bytes_up > p->head_len ? p->bytes_up - p->head_len : 0,
            .bytes_out = p->bytes_out,
            .started = p->started,
            .tenant = p->tenant,
        };

        access_log_write(p->wsi, &a);
}

static void relay_free(struct relay *p)
{
        if (p->started > 0)
                log_relay(p);
        for (struct relay **link = &relays; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        break;
                }
        }
        /* The connect goes on without it: its answer still frees the
         * tenant's slot, and its socket is closed then. */
        if (p->connect)
                p->connect->relay = NULL;
        sandbox_name_wake_cancel(&p->wake);
        loop_timer_stop(&p->reaper);
        loop_timer_stop(&p->idle);
        tenants_unwatch(&p->key);
        loop_unwatch(&p->up_watch);
        loop_unwatch(&p->client_watch);
        if (p->up_fd >= 0)
                close(p->up_fd);
        if (!p->wsi && p->client_fd >= 0) {
                close(p->client_fd);
                taken--;
        }
        buf_free(&p->to_up);
        buf_free(&p->to_client);
        buf_free(&p->answer_head);
        free(p);
}

static void reap(lws_sorted_usec_list_t *sul)
{
        relay_free(lws_container_of(sul, struct relay, reaper));
}

/* The relay is over: lws closes the client's connection (our duplicate
 * of its socket goes first, so the close is the connection's end), or,
 * for a connection taken from lws, we do on the next turn of the loop
 * (the caller may still be looking at p). */
static void finish(struct relay *p)
{
        if (p->finished)
                return;
        log_debug("port %d relay ends (sandbox side %s, client side %s)", p->port,
                  p->up_eof ? "done" : "open", p->client_eof ? "done" : "open");
        p->finished = true;
        loop_unwatch(&p->up_watch);
        loop_unwatch(&p->client_watch);
        if (p->up_fd >= 0) {
                close(p->up_fd);
                p->up_fd = -1;
        }
        if (p->wsi)
                lws_set_timeout(p->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
        else
                loop_timer_start(&p->reaper, reap, 0);
}

static size_t pending(const struct buf *b, size_t at)
{
        return b->len - at;
}

/* Drops the written prefix once it is half the buffer (all of it when
 * whole is set: before reading more, so that the buffer's maximum bounds
 * what is pending, not what was already written). */
static void compact(struct buf *b, size_t *at, bool whole)
{
        if (*at == b->len) {
                buf_reset(b);
                *at = 0;
        } else if (*at > (whole ? 0 : b->len / 2)) {
                memmove(b->data, b->data + *at, b->len - *at);
                b->len -= *at;
                b->data[b->len] = '\0';
                *at = 0;
        }
}

/* Writes what is pending from b to fd; 0 (done or would block), or -1
 * when the peer is gone. *sent counts the bytes written; *active is when
 * a byte was last written. */
static int flush(int fd, struct buf *b, size_t *at, uint64_t *sent, double *active)
{
        while (*at < b->len) {
                ssize_t n = send(fd, b->data + *at, b->len - *at, MSG_NOSIGNAL | MSG_DONTWAIT);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        break;
                if (n <= 0)
                        return -1;
                *at += (size_t)n;
                *sent += (uint64_t)n;
                *active = loop_now();
        }
        compact(b, at, false);
        return 0;
}

static void step(struct relay *p);
static void answer_error(struct relay *p, int status, const char *reason, const char *message);

static void client_out(struct relay *p)
{
        if (!p->client_watch)
                return;
        if (flush(p->client_fd, &p->to_client, &p->to_client_at, &p->bytes_out,
                  &p->last_active) < 0) {
                finish(p);
                return;
        }
        if (pending(&p->to_client, p->to_client_at))
                loop_want_write(p->client_watch);
}

static void up_out(struct relay *p)
{
        if (p->up_fd < 0)
                return;
        if (flush(p->up_fd, &p->to_up, &p->to_up_at, &p->bytes_up, &p->last_active) < 0) {
                finish(p);
                return;
        }
        if (pending(&p->to_up, p->to_up_at))
                loop_want_write(p->up_watch);
}

/* Whether a Set-Cookie value may pass in the path form: a cookie for
 * the app's own prefix only. A Domain attribute or a Path outside the
 * prefix would set (or overwrite) cookies of the gateway's origin, which
 * every other kernel's app and the gateway's page share. */
static bool cookie_stays_in_prefix(const char *value, size_t len, const char *prefix)
{
        size_t plen = strlen(prefix);
        const char *end = value + len;
        const char *path = NULL;
        size_t path_len = 0;

        for (const char *a = memchr(value, ';', len); a && a < end;) {
                const char *next = memchr(a + 1, ';', (size_t)(end - a - 1));
                const char *stop = next ? next : end;

                a++;
                while (a < stop && (*a == ' ' || *a == '\t'))
                        a++;
                if ((size_t)(stop - a) >= 6 && strncasecmp(a, "domain", 6) == 0)
                        return false;
                if ((size_t)(stop - a) >= 4 && strncasecmp(a, "path", 4) == 0) {
                        const char *eq = memchr(a, '=', (size_t)(stop - a));

                        /* The last Path is the one browsers take. */
                        path = eq ? eq + 1 : stop;
                        while (path < stop && (*path == ' ' || *path == '\t'))
                                path++;
                        path_len = (size_t)(stop - path);
                        while (path_len &&
                               (path[path_len - 1] == ' ' || path[path_len - 1] == '\t'))
                                path_len--;
                }
                a = next;
        }
        /* Without a Path the browser takes the request's own directory,
         * which is inside the prefix. */
        if (!path)
                return true;
        if (path_len < plen || strncmp(path, prefix, plen) != 0)
                return false;
        if (path_len > plen && path[plen] != '/')
                return false;
        /* Browsers compare paths as strings; a dot segment is refused
         * rather than reasoned about. */
        for (size_t i = 0; i + 1 < path_len; i++) {
                if (path[i] == '.' && path[i + 1] == '.')
                        return false;
        }
        return true;
}

/* Whether a header line of the app's answer goes on. In the path form the
 * app shares the gateway's origin: a header that acts on the whole origin
 * (its cookies, its storage, its service workers) stays out. */
static bool header_passes(const struct relay *p, const char *line, size_t len)
{
        const char *colon = memchr(line, ':', len);
        size_t name_len = colon ? (size_t)(colon - line) : len;
        const char *value = colon ? colon + 1 : line + len;

        if (!p->app_prefix[0])
                return true;
        if (name_len == 15 && strncasecmp(line, "Clear-Site-Data", 15) == 0)
                return false;
        if (name_len == 22 && strncasecmp(line, "Service-Worker-Allowed", 22) == 0)
                return false;
        if (name_len == 10 && strncasecmp(line, "Set-Cookie", 10) == 0)
                return cookie_stays_in_prefix(value, (size_t)(line + len - value), p->app_prefix);
        return true;
}

/* Whether a first line is an interim status (1xx) other than the 101 of
 * an upgrade; read as leniently as browsers do (any version word, any
 * blanks before the code). */
static bool interim_status(const char *line, size_t len, bool upgrade)
{
        size_t i = 0;

        while (i < len && line[i] != ' ' && line[i] != '\t')
                i++;
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
                i++;
        if (i >= len || line[i] != '1')
                return false;
        return !(upgrade && len - i >= 3 && strncmp(line + i, "101", 3) == 0 &&
                 (len - i == 3 || line[i + 3] < '0' || line[i + 3] > '9'));
}

/* The status of an answer's first line ("HTTP/1.1 200 OK"), for the
 * access log; 0 when it has none. */
static int answer_status(const char *line, size_t len)
{
        const char *sp = memchr(line, ' ', len);
        int status = 0;

        for (size_t i = sp ? (size_t)(sp - line) + 1 : len; i < len && status < 1000; i++) {
                if (line[i] < '0' || line[i] > '9')
                        break;
                status = status * 10 + (line[i] - '0');
        }
        return status < 100 || status > 999 ? 0 : status;
}

/* The app's head is whole in answer_head: it goes to the client with our
 * header lines after its first line, less the lines header_passes keeps
 * out. 0, -EPROTO for an answer the relay refuses, or -errno. */
static int pass_head(struct relay *p)
{
        const char *at = p->answer_head.data, *end = at + p->answer_head.len;
        bool first = true, dropping = false;
        int rc = 0;

        while (rc == 0 && at < end) {
                const char *nl = memchr(at, '\n', (size_t)(end - at));
                size_t len = (size_t)(nl - at) + 1, text = len - 1;

                if (text && at[text - 1] == '\r')
                        text--;
                if (first) {
                        /* An interim answer (1xx) would carry our headers,
                         * and the final one, which browsers render, none:
                         * only 101, the answer to an upgrade, passes. */
                        if (interim_status(at, text, p->upgrade))
                                return -EPROTO;
                        p->status = answer_status(at, text);
                        rc = buf_append(&p->to_client, at, len);
                        if (rc == 0)
                                rc = buf_append_str(&p->to_client, p->inject);
                        first = false;
                } else if (text == 0) {
                        /* The empty line, and what came after it. */
                        rc = buf_append(&p->to_client, at, (size_t)(end - at));
                        break;
                } else {
                        /* A folded line continues the header before it. */
                        if (at[0] != ' ' && at[0] != '\t')
                                dropping = !header_passes(p, at, text);
                        if (!dropping)
                                rc = buf_append(&p->to_client, at, len);
                }
                at += len;
        }
        buf_free(&p->answer_head);
        p->head_passed = true;
        return rc;
}

/* Takes a piece of the answer: its head is held until it is whole (then
 * pass_head), the rest goes on as it comes. */
static int take_answer(struct relay *p, const char *data, size_t len)
{
        size_t from;
        int rc;

        if (p->head_passed)
                return buf_append(&p->to_client, data, len);
        from = p->answer_head.len;
        rc = buf_append(&p->answer_head, data, len);
        if (rc < 0)
                return -EBADMSG;
        /* The head ends at an empty line ("\r\n" or "\n" after a "\n"). */
        for (size_t i = from > 2 ? from - 2 : 0; i < p->answer_head.len; i++) {
                const char *c = p->answer_head.data + i;
                size_t left = p->answer_head.len - i;

                if (c[0] == '\n' && left >= 2 &&
                    (c[1] == '\n' || (c[1] == '\r' && left >= 3 && c[2] == '\n')))
                        return pass_head(p);
        }
        return 0;
}

/* Reads as much as fits within the bound (the buffer's own maximum has
 * room for the header lines added beyond it). */

static void pump_in(struct relay *p, int fd, struct buf *b, size_t *atp, bool answer, bool *eof)
{
        static char chunk[16 * 1024];
        size_t at;
        int rc;

        compact(b, atp, true);
        at = *atp;

        while (!*eof && pending(b, at) < buffer_bytes) {
                size_t room = buffer_bytes - pending(b, at);
                ssize_t n =
                    recv(fd, chunk, room < sizeof(chunk) ? room : sizeof(chunk), MSG_DONTWAIT);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                if (n <= 0) {
                        *eof = true;
                        return;
                }
                p->last_active = loop_now();
                rc = answer ? take_answer(p, chunk, (size_t)n) : buf_append(b, chunk, (size_t)n);
                if (rc == -EPROTO) {
                        log_warn_limited(&overflows,
                                         "port %d: the app answered with an interim (1xx) "
                                         "status; refused",
                                         p->port);
                        answer_error(p, 502, "Bad Gateway",
                                     "The app answered with an interim (1xx) status, which the "
                                     "relay does not pass on");
                        return;
                }
                if (rc == -EBADMSG) {
                        log_warn_limited(&overflows,
                                         "port %d: an answer the relay cannot take "
                                         "(no whole head within %d bytes)",
                                         p->port, ANSWER_HEAD_MAX);
                        answer_error(p, 502, "Bad Gateway",
                                     "The app's answer head is longer than the relay takes "
                                     "(16 KiB)");
                        return;
                }
                if (rc < 0) {
                        *eof = true;
                        finish(p);
                        return;
                }
        }
}

/* Moves bytes as far as the buffers allow, pauses a reader whose buffer
 * is full, and ends the relay when both sides are done. */
static void step(struct relay *p)
{
        if (p->finished)
                return;
        up_out(p);
        if (p->finished)
                return;
        client_out(p);
        if (p->finished)
                return;
        if (p->up_watch)
                loop_pause_read(p->up_watch, p->up_eof || pending(&p->to_client, p->to_client_at) >=
                                                              buffer_bytes);
        if (p->client_watch)
                loop_pause_read(p->client_watch,
                                !p->body_done || p->client_eof ||
                                    pending(&p->to_up, p->to_up_at) >= buffer_bytes);
        /* lws reads the request's body: it waits while ours is full. */
        if (!p->body_done && p->wsi)
                lws_rx_flow_control(p->wsi,
                                    pending(&p->to_up, p->to_up_at) >= buffer_bytes ? 0 : 1);
        if (p->client_eof && p->up_fd >= 0 && !pending(&p->to_up, p->to_up_at))
                shutdown(p->up_fd, SHUT_WR);
        if (p->up_eof && !pending(&p->to_client, p->to_client_at))
                finish(p);
}

static void on_up(void *arg)
{
        struct relay *p = arg;

        if (p->up_fd >= 0)
                pump_in(p, p->up_fd, &p->to_client, &p->to_client_at, true, &p->up_eof);
        /* Nothing of a head that never ended went to the client: it is
         * told why rather than left with a closed connection. */
        if (p->up_eof && !p->head_passed && !p->finished) {
                answer_error(p, 502, "Bad Gateway",
                             p->answer_head.len
                                 ? "The app closed the connection before its answer's head ended"
                                 : "The app closed the connection without an answer");
                return;
        }
        step(p);
}

static void on_up_writable(void *arg)
{
        step(arg);
}

static void on_client(void *arg)
{
        struct relay *p = arg;

        if (!p->body_done)
                return;
        if (!p->upgrade) {
                /* The request is whole: more input is the client going
                 * away (or a pipelined request, which this connection,
                 * closing after the answer, never serves). */
                char drop[512];
                ssize_t n = recv(p->client_fd, drop, sizeof(drop), MSG_DONTWAIT);

                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                        finish(p);
                return;
        }
        pump_in(p, p->client_fd, &p->to_up, &p->to_up_at, false, &p->client_eof);
        step(p);
}

static void on_client_writable(void *arg)
{
        step(arg);
}

/* An answer of the gateway's own, written as the relay would write the
 * sandbox's. */
static void answer_error(struct relay *p, int status, const char *reason, const char *message)
{
        json_t *o = json_pack("{s:s, s:s}", "message", message, "reason", reason);
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;

        buf_reset(&p->to_client);
        p->to_client_at = 0;
        buf_printf(&p->to_client,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n%s",
                   status, reason, body ? strlen(body) : 0, body ? body : "");
        free(body);
        json_decref(o);
        p->head_passed = true; /* the answer is ours: nothing of the app's follows */
        p->status = status;
        p->up_eof = true;
        step(p);
}

/* Watches the client's socket (from the answer on, lws's too), its
 * reading paused until step decides. */
static int watch_client(struct relay *p)
{
        if (!p->client_watch && loop_watch_fd_rw(p->client_fd, on_client, on_client_writable, p,
                                                 &p->client_watch) < 0)
                return -1;
        loop_pause_read(p->client_watch, true);
        return 0;
}

static void on_connected(void *ctx, int error, int fd)
{
        struct connect *c = ctx;
        struct relay *p = c->relay;
        char message[160];

        for (struct connect **link = &connects; *link; link = &(*link)->next) {
                if (*link == c) {
                        *link = c->next;
                        break;
                }
        }
        free(c);
        if (!p) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        p->connect = NULL;
        if (watch_client(p) < 0) {
                if (fd >= 0)
                        close(fd);
                finish(p);
                return;
        }
        if (error) {
                /* ESRCH: the sandbox is gone; EAGAIN: the kernel-host is
                 * making as many connections as it will at once. */
                int status = error == ETIMEDOUT                  ? 504
                             : error == ESRCH || error == EAGAIN ? 503
                                                                 : 502;

                if (error == ECONNREFUSED)
                        snprintf(message, sizeof(message),
                                 "Nothing listens on port %d in the sandbox", p->port);
                else
                        snprintf(message, sizeof(message),
                                 "Cannot reach port %d in the sandbox: %s", p->port,
                                 strerror(error));
                answer_error(p, status,
                             status == 504   ? "Gateway Timeout"
                             : status == 503 ? "Service Unavailable"
                                             : "Bad Gateway",
                             message);
                return;
        }
        p->up_fd = fd;
        if (loop_watch_fd_rw(fd, on_up, on_up_writable, p, &p->up_watch) < 0) {
                finish(p);
                return;
        }
        step(p);
}

/* An upgraded relay that moved no byte either way for --port-idle-timeout
 * ends: a WebSocket left open by a tab or a script that went away would
 * otherwise hold a connection into the sandbox, and one of the gateway's,
 * for ever. */
static void on_idle(lws_sorted_usec_list_t *sul)
{
        struct relay *p = lws_container_of(sul, struct relay, idle);
        double quiet = loop_now() - p->last_active;

        if (p->finished)
                return;
        if (quiet < idle_timeout_s) {
                loop_timer_start(&p->idle, on_idle, (idle_timeout_s - quiet) * 1000);
                return;
        }
        log_info("port %d relay ends: nothing moved for %.0f s (--port-idle-timeout)", p->port,
                 quiet);
        finish(p);
}

/* Takes the client's connection from lws, which cannot hand an upgraded
 * connection on as plain bytes (it would answer the upgrade itself, or
 * end the connection): the relay keeps the socket under a new descriptor,
 * and lws's descriptor number now names a fresh unconnected socket, which
 * lws closes, with the wsi, as it ends the request. (lws's own poll()
 * loop watches descriptor numbers, so it then sees the stand-in only; an
 * epoll-based event library, which watches the open socket, would not
 * allow this.) 0 or -errno (the relay
 * is then gone). */
static int take_connection(struct relay *p)
{
        int fd = lws_get_socket_fd(p->wsi);
        int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        int stand_in = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int rc = 0;

        if (own < 0 || stand_in < 0 || dup3(stand_in, fd, O_CLOEXEC) < 0)
                rc = -errno;
        if (stand_in >= 0)
                close(stand_in);
        if (rc < 0) {
                if (own >= 0)
                        close(own);
                relay_free(p);
                return rc;
        }
        p->wsi = NULL;
        p->client_fd = own;
        taken++;
        rc = loop_watch_fd_rw(own, on_client, on_client_writable, p, &p->client_watch);
        if (rc < 0) {
                relay_free(p);
                return rc;
        }
        loop_pause_read(p->client_watch, true);
        return 0;
}

/* A removed key's relays end at once, upgraded ones included. */
static void on_key_removed(struct tenant_watch *w)
{
        struct relay *p = lws_container_of(w, struct relay, key);

        log_info("port %d relay ends: the key that opened it was removed", p->port);
        finish(p);
}

/* Has the kernel-host connect p to its port in sandbox_id, taking one of
 * p->owner's connecting slots. 0, -EBUSY when they are all taken, or
 * -errno. */
static int relay_connect(struct relay *p, const char *sandbox_id)
{
        struct hostmsg_connect req = {.port = p->port};
        struct connect *c;
        int rc;

        if (tenant_connecting(p->owner) >= connecting_per_tenant)
                return -EBUSY;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        snprintf(c->tenant, sizeof(c->tenant), "%s", p->owner);
        c->relay = p;
        snprintf(req.id, sizeof(req.id), "%s", p->request_id);
        snprintf(req.sandbox_id, sizeof(req.sandbox_id), "%s", sandbox_id);
        rc = host_connect(&req, on_connected, c);
        if (rc < 0) {
                free(c);
                return rc;
        }
        p->connect = c;
        c->next = connects;
        connects = c;
        return 0;
}

/* Its sandbox woke (error NULL) or did not: connected to now, or the
 * client told why, as a paused sandbox's plane tells it. */
static void on_woken(struct sandbox_wake *w, const char *error)
{
        struct relay *p = lws_container_of(w, struct relay, wake);
        struct sandbox *box = NULL;
        const char *owner;
        char message[256];
        int rc = 0;

        if (p->finished)
                return;
        if (!error && !sandbox_resolve_name(w->name, &box, &owner))
                error = "it is not running";
        if (!error) {
                rc = relay_connect(p, box->id);
                if (rc == 0)
                        return;
                snprintf(message, sizeof(message),
                         rc == -EBUSY ? "Too many connections being made into this tenant's "
                                        "sandboxes at once; try again"
                                      : "Cannot reach port %d in the sandbox",
                         p->port);
        } else {
                snprintf(message, sizeof(message),
                         "The sandbox is paused and could not be resumed: %s", error);
        }
        if (watch_client(p) < 0) {
                finish(p);
                return;
        }
        answer_error(p, rc == -EBUSY ? 503 : 502,
                     rc == -EBUSY ? "Service Unavailable" : "Bad Gateway", message);
}

int port_relay_start(struct lws *wsi, const char *sandbox_id, const char *tenant, int port,
                     struct buf *head, const char *inject, const char *app_prefix, bool upgrade,
                     bool body_done, const char *key, bool wake)
{
        struct relay *p = NULL;
        int rc;

        p = calloc(1, sizeof(*p));
        if (!p) {
                buf_free(head);
                return -ENOMEM;
        }
        snprintf(p->owner, sizeof(p->owner), "%s", tenant);
        p->wsi = wsi;
        p->client_fd = lws_get_socket_fd(wsi);
        p->up_fd = -1;
        /* The method is the head's first word (built by ports.c). */
        snprintf(p->method, sizeof(p->method), "%.*s",
                 (int)strcspn(head->data ? head->data : "", " "), head->data ? head->data : "");
        snprintf(p->tenant, sizeof(p->tenant), "%s", key ? key : "");
        p->head_len = head->len;
        p->port = port;
        p->last_active = loop_now();
        p->upgrade = upgrade;
        p->body_done = body_done;
        /* The head is the first of what goes to the app; room beyond the
         * bound for one more read of the body. */
        p->to_up = *head;
        p->to_up.max = head->len + buffer_bytes + 256 * 1024;
        memset(head, 0, sizeof(*head));
        snprintf(p->inject, sizeof(p->inject), "%s", inject);
        snprintf(p->app_prefix, sizeof(p->app_prefix), "%s", app_prefix ? app_prefix : "");
        buf_init(&p->answer_head, ANSWER_HEAD_MAX);
        buf_init(&p->to_client, buffer_bytes + ANSWER_HEAD_MAX + sizeof(p->inject) + 512);
        jp_uuid4(p->request_id);
        p->next = relays;
        relays = p;
        tenants_watch(&p->key, key, on_key_removed);
        /* Asleep, its sandbox has no box to connect into yet: the request
         * (its body, up to the bound) waits for it to wake. */
        p->wake.done = on_woken;
        rc = wake ? sandbox_name_wake(sandbox_id, &p->wake) : relay_connect(p, sandbox_id);
        if (rc < 0) {
                relay_free(p);
                return rc;
        }
        if (upgrade && idle_timeout_s > 0)
                loop_timer_start(&p->idle, on_idle, idle_timeout_s * 1000);
        /* The connection is the relay's from now on: lws reads only the
         * request's body, and no deadline of lws's ends it. */
        lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
        if (body_done)
                lws_rx_flow_control(wsi, 0);
        conns_admitted(wsi);
        rc = upgrade ? take_connection(p) : 0;
        /* From here the relay is the connection's, and logs it. */
        if (rc == 0)
                p->started = access_log_now();
        return rc;
}

int port_relay_body(struct lws *wsi, const void *data, size_t len)
{
        struct relay *p = relay_of(wsi);

        if (!p || p->finished)
                return 0;
        compact(&p->to_up, &p->to_up_at, true);
        if (buf_append(&p->to_up, data, len) < 0) {
                finish(p);
                return 0;
        }
        step(p);
        return 0;
}

void port_relay_body_done(struct lws *wsi)
{
        struct relay *p = relay_of(wsi);

        if (!p || p->body_done)
                return;
        p->body_done = true;
        lws_rx_flow_control(wsi, 0);
        step(p);
}

bool port_relay_active(struct lws *wsi)
{
        return relays && relay_of(wsi) != NULL;
}

void port_relay_closed(struct lws *wsi)
{
        struct relay *p = relays ? relay_of(wsi) : NULL;

        if (p)
                relay_free(p);
}
