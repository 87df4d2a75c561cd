#include "autoconf.h"

#include "gateway/core/fleet.h"
#include "gateway/core/loop.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PEER_REQUEST_MAX (16 * 1024) /* our request to a peer: path, query, credentials */
#define MISSING_MAX      512         /* the X-Glovebox-Fleet-Missing header's value */

struct peer {
        char url[128]; /* as given, for messages */
        char hostport[80];
        struct sockaddr_storage addr;
        socklen_t addrlen;
};

static char host_id[FLEETID_HOST_MAX + 1];
static struct peer peers[FLEET_MAX_PEERS];
static size_t npeers;
static double peer_timeout_ms;
static bool draining;
static const struct config *config;
static int agent_fd = -1;
static struct loop_watch *agent_watch;

/* ---- configuration ------------------------------------------------------- */

/* "ADDR:PORT" or "[ADDR6]:PORT" with a numeric address: the loop never
 * waits on a name lookup. */
static int parse_address(const char *text, struct sockaddr_storage *ss, socklen_t *len)
{
        char host[64];
        const char *colon, *start = text;
        size_t hlen;
        char *end;
        long port;

        memset(ss, 0, sizeof(*ss));
        if (text[0] == '[') {
                const char *close = strchr(text, ']');

                if (!close || close[1] != ':')
                        return -EINVAL;
                start = text + 1;
                hlen = (size_t)(close - start);
                colon = close + 1;
        } else {
                colon = strrchr(text, ':');
                if (!colon)
                        return -EINVAL;
                hlen = (size_t)(colon - text);
        }
        if (hlen == 0 || hlen >= sizeof(host))
                return -EINVAL;
        memcpy(host, start, hlen);
        host[hlen] = '\0';
        errno = 0;
        port = strtol(colon + 1, &end, 10);
        if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
                return -EINVAL;
        if (text[0] != '[') {
                struct sockaddr_in *in = (struct sockaddr_in *)ss;

                if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
                        return -EINVAL;
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)port);
                *len = sizeof(*in);
        } else {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

                if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
                        return -EINVAL;
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                *len = sizeof(*in6);
        }
        return 0;
}

static int parse_peer(const char *url, struct peer *p)
{
        size_t n;

        if (strncmp(url, "http://", 7) != 0 || strlen(url) >= sizeof(p->url))
                return -EINVAL;
        snprintf(p->url, sizeof(p->url), "%s", url);
        snprintf(p->hostport, sizeof(p->hostport), "%s", url + 7);
        n = strlen(p->hostport);
        if (n > 0 && p->hostport[n - 1] == '/')
                p->hostport[n - 1] = '\0';
        if (strchr(p->hostport, '/'))
                return -EINVAL;
        return parse_address(p->hostport, &p->addr, &p->addrlen);
}

int fleet_configure(const struct config *cfg)
{
        struct sockaddr_storage ss;
        socklen_t len;

        config = cfg;
        if (cfg->host_id[0] && !fleetid_host_valid(cfg->host_id)) {
                fprintf(stderr, "glovebox: --host-id must be 1 to %d characters of a-z and 0-9\n",
                        FLEETID_HOST_MAX);
                return -EINVAL;
        }
        snprintf(host_id, sizeof(host_id), "%s", cfg->host_id);
        if (cfg->agent_listen[0] && parse_address(cfg->agent_listen, &ss, &len) < 0) {
                fprintf(stderr, "glovebox: --agent-listen must be ADDRESS:PORT with a numeric "
                                "address\n");
                return -EINVAL;
        }
        npeers = 0;
        for (char **p = cfg->peers; p && *p; p++) {
                if (npeers == FLEET_MAX_PEERS) {
                        fprintf(stderr, "glovebox: at most %d --peer\n", FLEET_MAX_PEERS);
                        return -EINVAL;
                }
                if (parse_peer(*p, &peers[npeers]) < 0) {
                        fprintf(stderr,
                                "glovebox: --peer '%s': give http://ADDRESS:PORT with a numeric "
                                "address (the gateway's loop never waits on DNS)\n",
                                *p);
                        return -EINVAL;
                }
                npeers++;
        }
        if (npeers && !cfg->host_id[0]) {
                fprintf(stderr, "glovebox: --peer needs --host-id (ids must name their host)\n");
                return -EINVAL;
        }
        peer_timeout_ms = cfg->peer_timeout * 1000.0;
        return 0;
}

const char *fleet_host_id(void)
{
        return host_id;
}

int fleet_new_uuid(char out[JP_UUID_SIZE])
{
        return fleetid_uuid(host_id, out);
}

int fleet_new_sandbox_id(char out[FLEETID_SANDBOX_SIZE])
{
        return fleetid_sandbox(host_id, out);
}

/* ---- capacity, drain and the agent -------------------------------------- */

bool fleet_draining(void)
{
        return draining;
}

bool fleet_refuse_if_draining(struct http_request *r)
{
        if (!draining)
                return false;
        http_reply_error(r, 503,
                         "This host (%s) is draining: it starts no new kernels or sandboxes; "
                         "create through the front proxy, which sends creates elsewhere",
                         host_id[0] ? host_id : "single host");
        return true;
}

/* MemAvailable and MemTotal of /proc/meminfo, in percent; 100 unreadable. */
static int memory_percent(void)
{
        char line[128];
        unsigned long long total = 0, avail = 0, v;
        FILE *f = fopen("/proc/meminfo", "re");

        if (!f)
                return 100;
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
                        total = v;
                else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
                        avail = v;
        }
        fclose(f);
        return total ? (int)(avail * 100 / total) : 100;
}

static size_t (*count_kernels)(void);

void fleet_count_kernels(size_t (*count)(void))
{
        count_kernels = count;
}

/* Kernels this host holds now (0 before it has any to count). */
static size_t kernels_now(void)
{
        return count_kernels ? count_kernels() : 0;
}

int fleet_capacity_percent(void)
{
        long long max = config ? config->max_kernels : 1;
        long long used = (long long)kernels_now();
        int slots = used >= max ? 0 : (int)((max - used) * 100 / max);
        int mem = memory_percent();

        /* A host with a free slot is never reported full by rounding. */
        if (slots == 0 && used < max)
                slots = 1;
        return slots < mem ? slots : mem;
}

/* HAProxy's agent-check: it connects, reads one line, and we close. */
static void on_agent(void *arg)
{
        (void)arg;
        for (;;) {
                char line[32];
                int fd = accept4(agent_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                ssize_t wr;

                if (fd < 0)
                        return;
                if (draining)
                        snprintf(line, sizeof(line), "drain\n");
                else
                        snprintf(line, sizeof(line), "up ready %d%%\n", fleet_capacity_percent());
                /* A fresh socket's buffer takes a few bytes at once. */
                wr = write(fd, line, strlen(line));
                (void)wr;
                close(fd);
        }
}

int fleet_start(const struct config *cfg)
{
        struct sockaddr_storage ss;
        socklen_t len;
        int one = 1, rc;

        if (!cfg->agent_listen[0])
                return 0;
        if (parse_address(cfg->agent_listen, &ss, &len) < 0)
                return -EINVAL;
        agent_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (agent_fd < 0)
                return -errno;
        setsockopt(agent_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(agent_fd, (struct sockaddr *)&ss, len) < 0 || listen(agent_fd, 64) < 0) {
                rc = -errno;
                log_error("--agent-listen %s: %s", cfg->agent_listen, strerror(-rc));
                close(agent_fd);
                agent_fd = -1;
                return rc;
        }
        rc = loop_watch_fd(agent_fd, on_agent, NULL, &agent_watch);
        if (rc < 0) {
                close(agent_fd);
                agent_fd = -1;
                return rc;
        }
        log_info("capacity agent for HAProxy on %s", cfg->agent_listen);
        return 0;
}

void fleet_stop(void)
{
        loop_unwatch(&agent_watch);
        if (agent_fd >= 0)
                close(agent_fd);
        agent_fd = -1;
}

/* ---- the whole fleet's lists --------------------------------------------- */

struct fanout;

/* One request to one peer, on its own connection. */
struct peer_call {
        struct fanout *fan;
        const struct peer *peer;
        int fd;
        struct loop_watch *watch;
        struct buf out;
        size_t out_at;
        struct buf in;
        bool done;
};

struct fanout {
        struct http_request *r;
        json_t *list;
        size_t pending;
        struct peer_call calls[FLEET_MAX_PEERS];
        lws_sorted_usec_list_t timer;
        char missing[MISSING_MAX];
        bool answered;
        fleet_list_finish_fn finish; /* NULL: the lists are only joined */
};

static void add_missing(struct fanout *f, const struct peer *p, const char *why)
{
        size_t n = strlen(f->missing);

        snprintf(f->missing + n, sizeof(f->missing) - n, "%s%s (%s)", n ? ", " : "", p->url, why);
}

static void call_close(struct peer_call *c)
{
        loop_unwatch(&c->watch);
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
        buf_free(&c->out);
        buf_free(&c->in);
}

/* The one place the answer goes out; the fan-out is freed by the
 * request's cleanup, which runs when the request ends. */
static void fanout_answer(struct fanout *f)
{
        json_t *list = f->list;

        if (f->answered)
                return;
        f->answered = true;
        loop_timer_stop(&f->timer);
        for (size_t i = 0; i < npeers; i++) {
                if (!f->calls[i].done)
                        add_missing(f, f->calls[i].peer, "no answer in time");
                call_close(&f->calls[i]);
        }
        f->list = NULL;
        snprintf(f->r->fleet_missing, sizeof(f->r->fleet_missing), "%s", f->missing);
        if (f->missing[0])
                log_warn("fleet list %s: left out %s", f->r->path, f->missing);
        if (f->finish)
                f->finish(f->r, list);
        http_reply_json(f->r, 200, list);
}

static void fanout_cleanup(struct http_request *r)
{
        struct fanout *f = r->ctx;

        if (!f)
                return;
        loop_timer_stop(&f->timer);
        for (size_t i = 0; i < npeers; i++)
                call_close(&f->calls[i]);
        json_decref(f->list);
        free(f);
        r->ctx = NULL;
        r->cleanup = NULL;
}

static void on_fanout_timeout(lws_sorted_usec_list_t *sul)
{
        struct fanout *f = lws_container_of(sul, struct fanout, timer);

        fanout_answer(f);
}

/* The peer's whole answer: its status line, head and a JSON array. */
static void call_finish(struct peer_call *c, const char *failure)
{
        struct fanout *f = c->fan;
        const char *body = NULL;
        json_t *list = NULL;
        int status = 0;

        if (c->done)
                return;
        c->done = true;
        if (!failure) {
                body = strstr(c->in.data ? c->in.data : "", "\r\n\r\n");
                if (sscanf(c->in.data ? c->in.data : "", "HTTP/1.%*d %d", &status) != 1 || !body)
                        failure = "not an HTTP answer";
                else if (status == 409)
                        failure = "has this host's --host-id";
                else if (status != 200)
                        failure = "answered with an error";
                else if (strcasestr(c->in.data, "\r\ntransfer-encoding:"))
                        failure = "answered in chunks";
        }
        if (!failure) {
                list = json_loads(body + 4, 0, NULL);
                if (!json_is_array(list))
                        failure = "answered no list";
        }
        if (failure && status == 409)
                log_error("--peer %s refused this host's list request: it has this host's "
                          "--host-id %s, and ids would name either host; every host of a fleet "
                          "needs its own (docs/several-hosts.md)",
                          c->peer->url, host_id);
        if (failure)
                add_missing(f, c->peer, failure);
        else
                json_array_extend(f->list, list);
        json_decref(list);
        call_close(c);
        if (--f->pending == 0)
                fanout_answer(f);
}

static bool answer_complete(const struct buf *in)
{
        const char *end = strstr(in->data, "\r\n\r\n");
        const char *cl;
        unsigned long long want;

        if (!end)
                return false;
        cl = strcasestr(in->data, "\r\ncontent-length:");
        if (!cl || cl > end || sscanf(cl + 17, " %llu", &want) != 1)
                return false;
        return (size_t)(in->data + in->len - (end + 4)) >= want;
}

static void on_call_read(void *arg)
{
        struct peer_call *c = arg;
        char chunk[16384];

        while (!c->done) {
                ssize_t n = read(c->fd, chunk, sizeof(chunk));

                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                if (n < 0) {
                        call_finish(c, "connection failed");
                        return;
                }
                if (n == 0) {
                        call_finish(c, NULL);
                        return;
                }
                if (buf_append(&c->in, chunk, (size_t)n) < 0) {
                        call_finish(c, "answer too long");
                        return;
                }
                /* Whole once its Content-Length is in, should the peer
                 * keep the connection open. */
                if (answer_complete(&c->in)) {
                        call_finish(c, NULL);
                        return;
                }
        }
}

static void on_call_write(void *arg)
{
        struct peer_call *c = arg;
        int err = 0;
        socklen_t len = sizeof(err);
        ssize_t n;

        if (c->done)
                return;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
                call_finish(c, "cannot connect");
                return;
        }
        n = write(c->fd, c->out.data + c->out_at, c->out.len - c->out_at);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
                call_finish(c, "connection failed");
                return;
        }
        if (n > 0)
                c->out_at += (size_t)n;
        if (c->out_at < c->out.len)
                loop_want_write(c->watch);
}

/* The caller's query, each value encoded again (lws hands them decoded). */
static int append_query(struct buf *b, struct lws *wsi)
{
        char frag[4096];
        bool first = true;

        for (int i = 0; i < 64; i++) {
                int n = lws_hdr_copy_fragment(wsi, frag, sizeof(frag), WSI_TOKEN_HTTP_URI_ARGS, i);
                char *eq;

                if (n < 0)
                        break;
                if (n == 0)
                        continue;
                eq = strchr(frag, '=');
                if (buf_append_str(b, first ? "?" : "&") < 0)
                        return -E2BIG;
                first = false;
                for (char *p = frag; *p; p++) {
                        unsigned char ch = (unsigned char)*p;
                        int rc;

                        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                            (ch >= '0' && ch <= '9') || strchr("-._~", ch) || (eq && p == eq))
                                rc = buf_append(b, p, 1);
                        else
                                rc = buf_printf(b, "%%%02X", ch);
                        if (rc < 0)
                                return rc;
                }
        }
        return 0;
}

static int build_request(struct peer_call *c, struct http_request *r)
{
        char value[1024];
        struct buf *b = &c->out;
        int rc;

        buf_init(b, PEER_REQUEST_MAX);
        rc = buf_printf(b, "GET %s%s", config->base_url, r->path);
        if (rc == 0)
                rc = append_query(b, r->wsi);
        if (rc == 0)
                rc = buf_printf(b,
                                " HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
                                "Accept: application/json\r\nX-Glovebox-Fleet-Peer: %s\r\n",
                                c->peer->hostport, host_id);
        /* The caller's own credentials: a tenant sees only its own there
         * too. */
        if (rc == 0 && lws_hdr_copy(r->wsi, value, sizeof(value), WSI_TOKEN_HTTP_AUTHORIZATION) > 0)
                rc = buf_printf(b, "Authorization: %s\r\n", value);
        if (rc == 0 && lws_hdr_custom_copy(r->wsi, value, sizeof(value), "x-api-key:", 10) > 0)
                rc = buf_printf(b, "X-API-Key: %s\r\n", value);
        if (rc == 0)
                rc = buf_append_str(b, "\r\n");
        explicit_bzero(value, sizeof(value));
        return rc;
}

static int call_start(struct peer_call *c, struct http_request *r)
{
        int rc;

        c->fd = -1;
        buf_init(&c->in, FLEET_PEER_ANSWER_MAX);
        rc = build_request(c, r);
        if (rc < 0)
                return rc;
        c->fd = socket(c->peer->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return -errno;
        if (connect(c->fd, (const struct sockaddr *)&c->peer->addr, c->peer->addrlen) < 0 &&
            errno != EINPROGRESS)
                return -errno;
        rc = loop_watch_fd_rw(c->fd, on_call_read, on_call_write, c, &c->watch);
        if (rc < 0)
                return rc;
        loop_want_write(c->watch);
        return 0;
}

bool fleet_from_peer(struct http_request *r)
{
        return lws_hdr_custom_length(r->wsi, FLEET_PEER_HEADER, (int)strlen(FLEET_PEER_HEADER)) > 0;
}

void fleet_reply_list(struct http_request *r, json_t *local)
{
        fleet_reply_page(r, local, NULL);
}

void fleet_reply_page(struct http_request *r, json_t *local, fleet_list_finish_fn finish)
{
        struct fanout *f;

        /* A peer's request is answered with this host's own list: lists
         * never fan out twice, and the host that asked finishes the
         * whole. The route has checked the credentials. */
        if (local && fleet_from_peer(r)) {
                http_reply_json(r, 200, local);
                return;
        }
        if (npeers == 0 || !local) {
                if (local && finish)
                        finish(r, local);
                http_reply_json(r, 200, local);
                return;
        }
        f = calloc(1, sizeof(*f));
        if (!f) {
                if (finish)
                        finish(r, local);
                http_reply_json(r, 200, local);
                return;
        }
        f->r = r;
        f->list = local;
        f->finish = finish;
        r->ctx = f;
        r->cleanup = fanout_cleanup;
        f->pending = npeers;
        for (size_t i = 0; i < npeers; i++) {
                struct peer_call *c = &f->calls[i];

                c->fan = f;
                c->peer = &peers[i];
                c->fd = -1;
        }
        loop_timer_start(&f->timer, on_fanout_timeout, peer_timeout_ms);
        for (size_t i = 0; i < npeers && !f->answered; i++) {
                struct peer_call *c = &f->calls[i];
                int rc = call_start(c, r);

                if (rc < 0)
                        call_finish(c, "cannot connect");
        }
}

/* ---- a duplicate --host-id ---------------------------------------------- */

/* Every call between peers names the caller's host id (FLEET_PEER_HEADER):
 * the lists' requests and the check at start below. Two hosts with one id
 * would make ids that name either, and the proxy would send a client to
 * the wrong one, so the call is refused. It is checked before
 * credentials, for the check at start has none; a host id is no secret
 * (every id carries it), and the log line is rate-limited, since anyone
 * can send the header. */
bool fleet_refuse_same_host_id(struct http_request *r)
{
        static time_t last_logged;
        char value[64], peer[64];
        time_t now;

        if (!host_id[0] ||
            lws_hdr_custom_copy(r->wsi, value, sizeof(value), FLEET_PEER_HEADER,
                                (int)strlen(FLEET_PEER_HEADER)) <= 0 ||
            strcmp(value, host_id) != 0)
                return false;
        if (!lws_get_peer_simple(r->wsi, peer, sizeof(peer)))
                snprintf(peer, sizeof(peer), "(unknown address)");
        now = time(NULL);
        if (now - last_logged >= 60) {
                last_logged = now;
                log_error("refused a call from the gateway at %s: it says its --host-id is %s, "
                          "this host's own; every host of a fleet needs its own "
                          "(docs/several-hosts.md)",
                          peer, host_id);
        }
        http_reply_json(r, 409,
                        json_pack("{s:s, s:s, s:s}", "message",
                                  "This gateway has the --host-id you sent: every host of a "
                                  "fleet needs its own",
                                  "reason", "duplicate host id", "host_id", host_id));
        return true;
}

/* One peer asked at start whether it has this host's id. */
struct probe {
        const struct peer *peer;
        int fd;
        char out[512];
        size_t out_len, out_at;
        char in[64]; /* the status line is all we read */
        size_t in_len;
        bool done;
};

static double now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* Advances one probe on what poll reported; marks it done when it has an
 * answer's status line, or cannot have one. Returns the status, 0 for
 * none yet or none at all. */
static int probe_step(struct probe *p, short revents)
{
        int status = 0;
        ssize_t n;

        if (revents & POLLOUT && p->out_at < p->out_len) {
                n = write(p->fd, p->out + p->out_at, p->out_len - p->out_at);
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        p->done = true; /* not up: it checks us when it starts */
                        return 0;
                }
                if (n > 0)
                        p->out_at += (size_t)n;
        }
        if (revents & (POLLIN | POLLHUP | POLLERR)) {
                n = read(p->fd, p->in + p->in_len, sizeof(p->in) - 1 - p->in_len);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return 0;
                if (n <= 0) {
                        p->done = true;
                        return 0;
                }
                p->in_len += (size_t)n;
                p->in[p->in_len] = '\0';
                if (strstr(p->in, "\r\n") || p->in_len == sizeof(p->in) - 1) {
                        p->done = true;
                        if (sscanf(p->in, "HTTP/1.%*d %d", &status) != 1)
                                status = 0;
                }
        }
        return status;
}

int fleet_check_peers(void)
{
        struct probe probes[FLEET_MAX_PEERS];
        struct pollfd fds[FLEET_MAX_PEERS];
        double deadline = now_ms() + peer_timeout_ms;
        const struct peer *same = NULL;
        size_t open = 0;
        int rc = 0;

        for (size_t i = 0; i < npeers; i++) {
                struct probe *p = &probes[i];

                memset(p, 0, sizeof(*p));
                p->fd = -1;
                p->peer = &peers[i];
                p->done = true;
                /* The health route: public, so no credentials are needed
                 * (a host may have only tenants' keys); the peer refuses
                 * the call with 409 before it looks at the route. */
                p->out_len = (size_t)snprintf(p->out, sizeof(p->out),
                                              "GET %sapi/health HTTP/1.1\r\nHost: %s\r\n"
                                              "Connection: close\r\n"
                                              "X-Glovebox-Fleet-Peer: %s\r\n\r\n",
                                              config->base_url, p->peer->hostport, host_id);
                p->fd =
                    socket(p->peer->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (p->fd < 0 || p->out_len >= sizeof(p->out))
                        continue;
                if (connect(p->fd, (const struct sockaddr *)&p->peer->addr, p->peer->addrlen) < 0 &&
                    errno != EINPROGRESS)
                        continue;
                p->done = false;
                open++;
        }
        while (open && !same) {
                double left = deadline - now_ms();
                size_t n = 0;
                int ready;

                if (left <= 0)
                        break;
                for (size_t i = 0; i < npeers; i++) {
                        if (probes[i].done)
                                continue;
                        fds[n].fd = probes[i].fd;
                        fds[n].events = probes[i].out_at < probes[i].out_len ? POLLOUT : POLLIN;
                        fds[n].revents = 0;
                        n++;
                }
                ready = poll(fds, n, (int)left + 1);
                if (ready < 0 && errno != EINTR)
                        break;
                n = 0;
                for (size_t i = 0; i < npeers; i++) {
                        if (probes[i].done)
                                continue;
                        if (fds[n].revents && probe_step(&probes[i], fds[n].revents) == 409)
                                same = probes[i].peer;
                        if (probes[i].done)
                                open--;
                        n++;
                }
        }
        for (size_t i = 0; i < npeers; i++) {
                if (probes[i].fd >= 0)
                        close(probes[i].fd);
        }
        if (same) {
                log_error("the gateway at --peer %s has this host's --host-id %s: ids would name "
                          "either host, and the proxy would send clients to the wrong one; "
                          "start each host of a fleet with a --host-id of its own "
                          "(docs/several-hosts.md)",
                          same->url, host_id);
                rc = -EEXIST;
        }
        return rc;
}

/* ---- the admin routes ---------------------------------------------------- */

void fleet_handle(struct http_request *r, const char *what)
{
        const struct tenant_caller *caller = tenants_caller();
        json_t *list;

        if (!(caller && caller->admin)) {
                http_reply_error(r, 403, "The fleet's routes need an admin key");
                return;
        }
        if (what && strcmp(what, "drain") != 0) {
                http_reply_error(r, 404, "No route %s", r->path);
                return;
        }
        if (what && r->method != HTTP_POST && r->method != HTTP_DELETE) {
                http_reply_error(r, 405, "Use POST to drain this host, DELETE to undrain it");
                return;
        }
        if (!what && r->method != HTTP_GET) {
                http_reply_error(r, 405, "Use GET on /api/fleet");
                return;
        }
        if (what) {
                draining = r->method == HTTP_POST;
                log_info("host %s %s", host_id[0] ? host_id : "(single)",
                         draining ? "draining: no new kernels or sandboxes"
                                  : "undrained: takes new kernels again");
        }
        list = json_array();
        for (size_t i = 0; list && i < npeers; i++)
                json_array_append_new(list, json_string(peers[i].url));
        http_reply_json(r, 200,
                        json_pack("{s:s, s:b, s:i, s:i, s:I, s:o}", "host_id", host_id, "draining",
                                  draining, "capacity_percent", fleet_capacity_percent(), "kernels",
                                  (int)kernels_now(), "max_kernels",
                                  (json_int_t)config->max_kernels, "peers",
                                  list ? list : json_array()));
}
