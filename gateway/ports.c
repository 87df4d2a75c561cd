#include "autoconf.h"

#include "gateway/ports.h"
#include "gateway/api.h"
#include "gateway/conns.h"
#include "gateway/e2b.h"
#include "gateway/host.h"
#include "gateway/hostcheck.h"
#include "gateway/loop.h"
#include "gateway/sandboxes.h"
#include "protocol/buf.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define COOKIE_NAME     "glovebox-port"
#define HEAD_MAX        (32 * 1024) /* the rebuilt request head */
#define STATUS_LINE_MAX 8192        /* the upstream's first line, before our headers go in */
/* A document served under the gateway's own origin could read what the
 * gateway's page keeps (the token): in the path form it runs in an opaque
 * origin instead. The Host form is an origin of its own and needs none. */
#define PATH_FORM_CSP "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

struct target {
        char id[JP_UUID_SIZE]; /* the kernel's or the E2B sandbox's */
        int port;
        bool host_form;
        bool bare;        /* the path form without a '/' after the port */
        bool known;       /* the id is a kernel's or an E2B sandbox's */
        const char *rest; /* path (and nothing of the query) for the app, in uri_storage */
        char uri_storage[HTTP_PATH_MAX];
        struct sandbox *box;
        struct e2b_sandbox *e2b;
};

/* One client connection relayed to one connection into a sandbox. */
struct relay {
        struct relay *next;
        struct lws *wsi; /* the client's connection while lws has it, or NULL */
        int client_fd;   /* its socket: lws's, or our own once taken (upgrades) */
        char request_id[JP_UUID_SIZE];
        bool connecting;
        bool upgrade;       /* a WebSocket (any Upgrade): bytes both ways after the head */
        bool body_done;     /* the client's request is all read by lws */
        bool status_passed; /* our headers went in after the first line */
        bool up_eof, client_eof, finished;
        int port;
        int up_fd; /* the sandbox side */
        struct loop_watch *up_watch;
        struct loop_watch *client_watch; /* a duplicate of the client's socket */
        struct buf to_up;                /* head and body not yet written to the sandbox */
        size_t to_up_at;
        struct buf to_client; /* the answer not yet written to the client */
        size_t to_client_at;
        char inject[512];              /* header lines put after the answer's first line */
        size_t status_seen;            /* bytes of the first line so far */
        lws_sorted_usec_list_t reaper; /* frees a relay lws no longer knows of */
};

static struct relay *relays;
static size_t taken;               /* relays whose client connection is ours, not lws's */
static char domain[HOSTCHECK_MAX]; /* "name[:port]" */
static char domain_name[HOSTCHECK_MAX];
static size_t buffer_bytes;

int ports_init(const struct config *cfg)
{
        const char *given = cfg->ports_domain;

        buffer_bytes = (size_t)cfg->port_buffer_bytes;
        if (given && *given)
                snprintf(domain, sizeof(domain), "%s", given);
        else if (hostcheck_is_loopback(cfg->host))
                snprintf(domain, sizeof(domain), "localhost:%d", cfg->port);
        else
                snprintf(domain, sizeof(domain), "%s:%d", cfg->host, cfg->port);
        if (hostcheck_name(domain, domain_name, sizeof(domain_name)) < 0) {
                log_error("--ports-domain %s is not a host name", domain);
                return -EINVAL;
        }
        return 0;
}

const char *ports_domain(void)
{
        return domain;
}

/* ---- which sandbox, which port ------------------------------------------ */

static int parse_port(const char *s, size_t len)
{
        int port = 0;

        if (len == 0 || len > 5 || s[0] == '0')
                return -1;
        for (size_t i = 0; i < len; i++) {
                if (!isdigit((unsigned char)s[i]))
                        return -1;
                port = port * 10 + (s[i] - '0');
        }
        return port >= 1 && port <= 65535 ? port : -1;
}

/* "{port}-{id}.{domain}": the id and port, when the Host names our
 * ports domain. */
static bool host_target(struct lws *wsi, struct target *t)
{
        char host[HOSTCHECK_MAX], name[HOSTCHECK_MAX];
        int len = lws_hdr_total_length(wsi, WSI_TOKEN_HOST);
        const char *dash, *dot;
        size_t nlen, dlen = strlen(domain_name);

        if (len <= 0 || (size_t)len >= sizeof(host) ||
            lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) != len ||
            hostcheck_name(host, name, sizeof(name)) < 0)
                return false;
        nlen = strlen(name);
        if (nlen <= dlen + 1 || name[nlen - dlen - 1] != '.' ||
            strcmp(name + nlen - dlen, domain_name) != 0)
                return false;
        name[nlen - dlen - 1] = '\0';
        dash = strchr(name, '-');
        dot = strchr(name, '.');
        if (!dash || dot || strlen(dash + 1) >= sizeof(t->id))
                return false;
        t->port = parse_port(name, (size_t)(dash - name));
        snprintf(t->id, sizeof(t->id), "%s", dash + 1);
        t->host_form = true;
        return true;
}

/* "api/kernels/{id}/ports/{port}[/rest]" below the base URL. A port that
 * is not a number still counts (it is refused with 400). */
static bool path_target(struct lws *wsi, struct target *t)
{
        char path[HTTP_PATH_MAX];
        const char *id, *slash, *port, *end;

        if (http_route_path(wsi, path, sizeof(path)) < 0 || strncmp(path, "api/kernels/", 12) != 0)
                return false;
        id = path + 12;
        slash = strchr(id, '/');
        if (!slash || strncmp(slash, "/ports/", 7) != 0 || (size_t)(slash - id) >= sizeof(t->id))
                return false;
        port = slash + 7;
        end = strchr(port, '/');
        if (!end)
                end = port + strlen(port);
        if (end == port)
                return false;
        snprintf(t->id, sizeof(t->id), "%.*s", (int)(slash - id), id);
        t->port = parse_port(port, (size_t)(end - port));
        t->bare = *end == '\0';
        snprintf(t->uri_storage, sizeof(t->uri_storage), "/%s", *end ? end + 1 : "");
        t->rest = t->uri_storage;
        return true;
}

static bool find_target(struct lws *wsi, struct target *t)
{
        memset(t, 0, sizeof(*t));
        t->port = -1;
        if (host_target(wsi, t)) {
                char *uri;
                int len;

                if (lws_http_get_uri_and_method(wsi, &uri, &len) < 0 || len <= 0 ||
                    (size_t)len >= sizeof(t->uri_storage))
                        snprintf(t->uri_storage, sizeof(t->uri_storage), "/");
                else
                        snprintf(t->uri_storage, sizeof(t->uri_storage), "%.*s", len, uri);
                t->rest = t->uri_storage;
                return true;
        }
        return path_target(wsi, t);
}

bool ports_wanted(struct lws *wsi)
{
        struct target t;

        return find_target(wsi, &t);
}

/* The sandbox of the target: a kernel's (both forms) or an E2B sandbox's
 * (the Host form, as getHost names it). */
static void resolve(struct target *t)
{
        struct kernel *k = kernel_find(t->id);

        if (k) {
                t->known = true;
                t->box = k->sandbox;
                return;
        }
        if (t->host_form) {
                t->e2b = e2b_find_ready(t->id);
                if (t->e2b) {
                        t->known = true;
                        t->box = e2b_box(t->e2b);
                }
        }
}

static bool port_public(const struct sandbox *box, int port)
{
        for (size_t i = 0; i < box->npublic_ports; i++) {
                if (box->public_ports[i] == port)
                        return true;
        }
        return false;
}

/* ---- credentials -------------------------------------------------------- */

/* The cookie's value for one port of one sandbox: an HMAC of the token,
 * so that the cookie opens that port only, and a page learns nothing of
 * the token from it. */
static int cookie_value(const struct target *t, char out[65])
{
        const char *token = kernels_config()->token;
        unsigned char mac[32];
        unsigned int len = 0;
        char what[128];

        if (!token)
                return -EINVAL;
        snprintf(what, sizeof(what), "port:%s:%d", t->id, t->port);
        if (!HMAC(EVP_sha256(), token, (int)strlen(token), (const unsigned char *)what,
                  strlen(what), mac, &len) ||
            len != sizeof(mac))
                return -EIO;
        for (size_t i = 0; i < sizeof(mac); i++)
                snprintf(out + 2 * i, 3, "%02x", mac[i]);
        return 0;
}

/* Finds "name=value" in a Cookie header; copies value. */
static bool cookie_find(const char *cookies, const char *name, char *out, size_t size)
{
        size_t nlen = strlen(name);
        const char *p = cookies;

        while (p && *p) {
                const char *end;

                while (*p == ' ' || *p == ';')
                        p++;
                end = strchr(p, ';');
                if (!end)
                        end = p + strlen(p);
                if ((size_t)(end - p) > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
                        snprintf(out, size, "%.*s", (int)(end - p - (long)nlen - 1), p + nlen + 1);
                        return true;
                }
                p = end;
        }
        return false;
}

static bool cookie_ok(struct lws *wsi, const struct target *t)
{
        char cookies[4096], given[80], expected[65];
        int n = lws_hdr_copy(wsi, cookies, sizeof(cookies), WSI_TOKEN_HTTP_COOKIE);

        return n > 0 && cookie_find(cookies, COOKIE_NAME, given, sizeof(given)) &&
               strlen(given) == 64 && cookie_value(t, expected) == 0 &&
               CRYPTO_memcmp(given, expected, 64) == 0;
}

static bool traffic_token_ok(struct lws *wsi, const struct target *t)
{
        char token[128];
        int n;

        if (!t->e2b)
                return false;
        n = lws_hdr_custom_copy(wsi, token, sizeof(token), "e2b-traffic-access-token:", 25);
        return n > 0 && e2b_token_ok(t->e2b, token);
}

enum admission { ADMIT_PUBLIC, ADMIT_TOKEN, ADMIT_COOKIE };

/* Everything the headers decide; 0 with *how set, or an HTTP status with
 * message filled. */
static int admit(struct lws *wsi, struct target *t, enum admission *how, char *message, size_t size)
{
        const struct config *cfg = kernels_config();
        char name[HOSTCHECK_MAX];
        int status = conns_refusal(wsi, message, size);

        if (status)
                return status;
        /* The Host form's name is the operator's ports domain; any other
         * request passes the DNS rebinding check as every route does. */
        if (!t->host_form && !http_host_allowed(wsi, name, sizeof(name))) {
                http_log_refused_host(name);
                snprintf(message, size,
                         "Host %s is not a name this gateway serves under (the operator may "
                         "allow it with --allow-host)",
                         name);
                return 403;
        }
        if (lws_is_ssl(wsi)) {
                snprintf(message, size, "Ports are served over plain HTTP only");
                return 501;
        }
        resolve(t);
        /* Credentials before existence: without the token nobody learns
         * which kernels or ports there are. A public port's cannot be
         * checked first, so an unknown id is 404 either way. */
        if (!t->box) {
                if (!cfg->no_auth && !http_authorized(wsi)) {
                        snprintf(message, size, "Missing or wrong token");
                        return 401;
                }
                if (t->known) {
                        /* A kernel between sandboxes (starting, restarting). */
                        snprintf(message, size, "The sandbox of %.64s is not running", t->id);
                        return 503;
                }
                snprintf(message, size, "No kernel or sandbox %.64s", t->id);
                return 404;
        }
        if (t->port < 0) {
                snprintf(message, size, "A port is a number from 1 to 65535");
                return 400;
        }
        if (cfg->no_auth || port_public(t->box, t->port))
                *how = ADMIT_PUBLIC;
        else if (http_authorized(wsi) || traffic_token_ok(wsi, t))
                *how = ADMIT_TOKEN;
        else if (cookie_ok(wsi, t))
                *how = ADMIT_COOKIE;
        else {
                snprintf(message, size, "Missing or wrong token");
                return 401;
        }
        /* A page elsewhere must not reach a private port with the user's
         * cookie. */
        if (*how != ADMIT_PUBLIC && http_origin(wsi, NULL, 0) == HTTP_ORIGIN_DENIED) {
                snprintf(message, size, "Origin not allowed");
                return 403;
        }
        if (t->box->phase != SANDBOX_READY) {
                snprintf(message, size, "The sandbox of %.64s is not running", t->id);
                return 503;
        }
        if (t->box->init_pid <= 0) {
                snprintf(message, size,
                         "Ports need a sandbox (the gateway runs with --sandbox=none)");
                return 501;
        }
        return 0;
}

/* ---- the request head for the sandbox ------------------------------------ */

static const char *method_name(struct lws *wsi)
{
        static const char *const names[] = {
            [LWSHUMETH_GET] = "GET",         [LWSHUMETH_POST] = "POST",
            [LWSHUMETH_OPTIONS] = "OPTIONS", [LWSHUMETH_PUT] = "PUT",
            [LWSHUMETH_PATCH] = "PATCH",     [LWSHUMETH_DELETE] = "DELETE",
            [LWSHUMETH_CONNECT] = "CONNECT", [LWSHUMETH_HEAD] = "HEAD"};
        char *uri;
        int len, m = lws_http_get_uri_and_method(wsi, &uri, &len);

        return m >= 0 && (size_t)m < sizeof(names) / sizeof(names[0]) && names[m] ? names[m] : NULL;
}

/* lws hands the path and the query decoded: they are encoded again. */
static int append_encoded(struct buf *b, const char *s, size_t len, const char *keep)
{
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                int rc = isalnum(c) || strchr("-._~", c) || (c && strchr(keep, c))
                             ? buf_append(b, &s[i], 1)
                             : buf_printf(b, "%%%02X", c);

                if (rc < 0)
                        return rc;
        }
        return 0;
}

/* The query, encoded again; without token= unless keep_token (a redirect
 * of the client's own, which still needs it). */
static int append_query(struct buf *b, struct lws *wsi, bool keep_token)
{
        char arg[HTTP_PATH_MAX];
        bool first = true;

        for (int i = 0;; i++) {
                int n = lws_hdr_copy_fragment(wsi, arg, sizeof(arg), WSI_TOKEN_HTTP_URI_ARGS, i);
                const char *eq;
                int rc;

                if (n < 0)
                        break;
                /* The gateway's token is the gateway's, never the app's. */
                if (!keep_token && strncmp(arg, "token=", 6) == 0)
                        continue;
                rc = buf_append(b, first ? "?" : "&", 1);
                first = false;
                eq = strchr(arg, '=');
                if (rc == 0)
                        rc = append_encoded(b, arg, eq ? (size_t)(eq - arg) : strlen(arg), "");
                if (rc == 0 && eq)
                        rc = buf_append(b, "=", 1);
                if (rc == 0 && eq)
                        rc = append_encoded(b, eq + 1, strlen(eq + 1), "");
                if (rc < 0)
                        return rc;
        }
        return 0;
}

/* Headers the gateway sets itself, or that carry its credentials. */
static bool header_ours(const char *name)
{
        static const char *const ours[] = {"host:",
                                           "connection:",
                                           "upgrade:",
                                           "cookie:",
                                           "authorization:",
                                           "expect:",
                                           "keep-alive:",
                                           "proxy-connection:",
                                           "x-forwarded-for:",
                                           "x-forwarded-host:",
                                           "x-forwarded-prefix:",
                                           "x-forwarded-proto:"};

        for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
                if (strcmp(name, ours[i]) == 0)
                        return true;
        }
        return false;
}

static int append_cookies_but_ours(struct buf *b, struct lws *wsi)
{
        char cookies[8192];
        int n = lws_hdr_copy(wsi, cookies, sizeof(cookies), WSI_TOKEN_HTTP_COOKIE);
        const char *p = cookies;
        bool any = false;
        int rc = 0;

        if (n <= 0)
                return 0;
        while (*p && rc == 0) {
                const char *end;

                while (*p == ' ' || *p == ';')
                        p++;
                end = strchr(p, ';');
                if (!end)
                        end = p + strlen(p);
                if (end > p && !(strncmp(p, COOKIE_NAME "=", sizeof(COOKIE_NAME)) == 0)) {
                        rc = buf_printf(b, "%s%.*s", any ? "; " : "Cookie: ", (int)(end - p), p);
                        any = true;
                }
                p = end;
        }
        if (rc == 0 && any)
                rc = buf_append_str(b, "\r\n");
        return rc;
}

/* An Authorization header goes on unless it is the gateway's token. */
static int append_authorization(struct buf *b, struct lws *wsi)
{
        char value[1024];
        int n = lws_hdr_copy(wsi, value, sizeof(value), WSI_TOKEN_HTTP_AUTHORIZATION);

        if (n <= 0 || http_authorized(wsi))
                return 0;
        return buf_printf(b, "Authorization: %s\r\n", value);
}

static int build_head(struct relay *p, struct lws *wsi, const struct target *t)
{
        const char *method = method_name(wsi);
        char value[4096], host[HOSTCHECK_MAX] = "", peer[64] = "";
        struct buf *b = &p->to_up;
        int rc;

        if (!method)
                return -EINVAL;
        rc = buf_printf(b, "%s ", method);
        if (rc == 0)
                rc = append_encoded(b, t->rest, strlen(t->rest), "/!$&'()*+,;=:@");
        if (rc == 0)
                rc = append_query(b, wsi, false);
        if (rc == 0)
                rc = buf_printf(b, " HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", t->port);
        for (int i = 0; rc == 0 && i < WSI_TOKEN_COUNT; i++) {
                const char *name = (const char *)lws_token_to_string((enum lws_token_indexes)i);
                size_t nlen = name ? strlen(name) : 0;
                int n;

                /* Header names end in ':'; methods, the version and the
                 * HTTP/2 pseudo-headers do not, or start with one. */
                if (nlen < 2 || name[nlen - 1] != ':' || name[0] == ':' || header_ours(name))
                        continue;
                n = lws_hdr_total_length(wsi, (enum lws_token_indexes)i);
                if (n <= 0)
                        continue;
                if ((size_t)n >= sizeof(value) ||
                    lws_hdr_copy(wsi, value, sizeof(value), (enum lws_token_indexes)i) != n)
                        return -E2BIG;
                rc = buf_printf(b, "%c%.*s %s\r\n", toupper((unsigned char)name[0]), (int)nlen - 1,
                                name + 1, value);
        }
        if (rc == 0)
                rc = append_cookies_but_ours(b, wsi);
        if (rc == 0)
                rc = append_authorization(b, wsi);
        if (rc == 0 && p->upgrade && lws_hdr_copy(wsi, value, sizeof(value), WSI_TOKEN_UPGRADE) > 0)
                rc = buf_printf(b, "Connection: Upgrade\r\nUpgrade: %s\r\n", value);
        else if (rc == 0)
                rc = buf_append_str(b, "Connection: close\r\n");
        if (rc == 0 && lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) > 0)
                rc = buf_printf(b, "X-Forwarded-Host: %s\r\n", host);
        if (rc == 0 && !t->host_form)
                rc = buf_printf(b, "X-Forwarded-Prefix: %sapi/kernels/%s/ports/%d\r\n",
                                kernels_config()->base_url, t->id, t->port);
        if (rc == 0 && lws_get_peer_simple(wsi, peer, sizeof(peer)))
                rc = buf_printf(b, "X-Forwarded-For: %s\r\nX-Forwarded-Proto: http\r\n", peer);
        if (rc == 0)
                rc = buf_append_str(b, "\r\n");
        return rc;
}

/* Header lines that go into the answer after its first line. */
static void build_inject(struct relay *p, const struct target *t, enum admission how)
{
        char value[65];
        size_t at = 0;

        p->inject[0] = '\0';
        if (!t->host_form)
                at += (size_t)snprintf(p->inject, sizeof(p->inject),
                                       "Content-Security-Policy: " PATH_FORM_CSP "\r\n");
        /* The first visit with the token (a browser's, with ?token=) gets
         * the cookie, so that the app's own relative links keep working;
         * SameSite keeps other sites' pages from sending it. */
        if (how == ADMIT_TOKEN && cookie_value(t, value) == 0) {
                if (t->host_form)
                        snprintf(p->inject + at, sizeof(p->inject) - at,
                                 "Set-Cookie: " COOKIE_NAME "=%s; Path=/; HttpOnly; "
                                 "SameSite=Lax\r\n",
                                 value);
                else
                        snprintf(p->inject + at, sizeof(p->inject) - at,
                                 "Set-Cookie: " COOKIE_NAME "=%s; Path=%sapi/kernels/%s/ports/%d/; "
                                 "HttpOnly; SameSite=Lax\r\n",
                                 value, kernels_config()->base_url, t->id, t->port);
        }
}

/* ---- the relay ---------------------------------------------------------- */

static struct relay *relay_of(struct lws *wsi)
{
        for (struct relay *p = relays; p; p = p->next) {
                if (p->wsi == wsi)
                        return p;
        }
        return NULL;
}

static void relay_free(struct relay *p)
{
        for (struct relay **link = &relays; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        break;
                }
        }
        if (p->connecting)
                host_connect_cancel(p->request_id);
        loop_timer_stop(&p->reaper);
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
 * when the peer is gone. */
static int flush(int fd, struct buf *b, size_t *at)
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
        }
        compact(b, at, false);
        return 0;
}

static void step(struct relay *p);

static void client_out(struct relay *p)
{
        if (!p->client_watch)
                return;
        if (flush(p->client_fd, &p->to_client, &p->to_client_at) < 0) {
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
        if (flush(p->up_fd, &p->to_up, &p->to_up_at) < 0) {
                finish(p);
                return;
        }
        if (pending(&p->to_up, p->to_up_at))
                loop_want_write(p->up_watch);
}

/* Takes a piece of the answer, our header lines put in after its first
 * line. */
static int take_answer(struct relay *p, const char *data, size_t len)
{
        const char *nl;
        int rc;

        if (p->status_passed)
                return buf_append(&p->to_client, data, len);
        nl = memchr(data, '\n', len);
        if (!nl) {
                p->status_seen += len;
                return p->status_seen > STATUS_LINE_MAX ? -EBADMSG
                                                        : buf_append(&p->to_client, data, len);
        }
        rc = buf_append(&p->to_client, data, (size_t)(nl + 1 - data));
        if (rc == 0)
                rc = buf_append_str(&p->to_client, p->inject);
        if (rc == 0)
                rc = buf_append(&p->to_client, nl + 1, len - (size_t)(nl + 1 - data));
        p->status_passed = true;
        return rc;
}

/* Reads as much as fits within the bound (the buffer's own maximum has
 * room for the header lines added beyond it). */
static struct log_limit overflows;

static void pump_in(struct relay *p, int fd, struct buf *b, size_t *atp, bool answer, bool *eof)
{
        static char chunk[16 * 1024];
        size_t at;

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
                if ((answer ? take_answer(p, chunk, (size_t)n) : buf_append(b, chunk, (size_t)n)) <
                    0) {
                        /* Only an answer whose first line never ends. */
                        log_warn_limited(&overflows,
                                         "port %d: an answer the relay cannot take "
                                         "(no status line within %d bytes)",
                                         p->port, STATUS_LINE_MAX);
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
        char body[512];
        int n = snprintf(body, sizeof(body), "{\"message\": \"%s\", \"reason\": \"%s\"}", message,
                         reason);

        buf_reset(&p->to_client);
        p->to_client_at = 0;
        buf_printf(&p->to_client,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                   "Connection: close\r\n\r\n%s",
                   status, reason, n, body);
        p->up_eof = true;
        step(p);
}

static void on_connected(void *ctx, int error, int fd)
{
        struct relay *p = ctx;
        char message[160];

        p->connecting = false;
        if (!p->client_watch && loop_watch_fd_rw(p->client_fd, on_client, on_client_writable, p,
                                                 &p->client_watch) < 0) {
                if (fd >= 0)
                        close(fd);
                finish(p);
                return;
        }
        loop_pause_read(p->client_watch, true);
        if (error) {
                int status = error == ETIMEDOUT ? 504 : error == ESRCH ? 503 : 502;

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

/* Makes the relay and asks the kernel-host for the connection. */
static int relay_start(struct lws *wsi, const struct target *t, enum admission how, bool upgrade,
                       bool body_done)
{
        struct hostmsg_connect req = {.port = t->port};
        struct relay *p = calloc(1, sizeof(*p));
        int rc;

        if (!p)
                return -ENOMEM;
        p->wsi = wsi;
        p->client_fd = lws_get_socket_fd(wsi);
        p->up_fd = -1;
        p->port = t->port;
        p->upgrade = upgrade;
        p->body_done = body_done;
        /* Room beyond the bound: one more read, and our header lines. */
        buf_init(&p->to_up, buffer_bytes + HEAD_MAX + 256 * 1024);
        buf_init(&p->to_client, buffer_bytes + sizeof(p->inject) + 512);
        rc = build_head(p, wsi, t);
        if (rc < 0) {
                buf_free(&p->to_up);
                buf_free(&p->to_client);
                free(p);
                return rc;
        }
        build_inject(p, t, how);
        jp_uuid4(p->request_id);
        snprintf(req.id, sizeof(req.id), "%s", p->request_id);
        snprintf(req.sandbox_id, sizeof(req.sandbox_id), "%s", t->box->id);
        p->connecting = true;
        p->next = relays;
        relays = p;
        rc = host_connect(&req, on_connected, p);
        if (rc < 0) {
                p->connecting = false;
                relay_free(p);
                return rc;
        }
        /* The connection is the relay's from now on: lws reads only the
         * request's body, and no deadline of lws's ends it. */
        lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
        if (body_done)
                lws_rx_flow_control(wsi, 0);
        conns_admitted(wsi);
        return 0;
}

static void redirect_to_root(struct lws *wsi, struct http_request *r, const struct target *t)
{
        struct buf query;

        buf_init(&query, sizeof(r->location));
        if (append_query(&query, wsi, true) < 0 ||
            (size_t)snprintf(r->location, sizeof(r->location), "%sapi/kernels/%s/ports/%d/%s",
                             kernels_config()->base_url, t->id, t->port,
                             query.data ? query.data : "") >= sizeof(r->location)) {
                r->location[0] = '\0';
                http_reply_error(r, 414, "URL too long");
        } else {
                http_reply_error(r, 301, "The port's root is %s", r->location);
        }
        buf_free(&query);
}

void ports_begin(struct lws *wsi, struct http_request *r)
{
        enum admission how = ADMIT_TOKEN;
        char message[256];
        struct target t;
        int status, rc;

        if (!find_target(wsi, &t)) {
                http_reply_error(r, 404, "Not found");
                return;
        }
        status = admit(wsi, &t, &how, message, sizeof(message));
        if (status) {
                http_reply_error(r, status, "%s", message);
                return;
        }
        /* The app's relative links resolve against the directory: the
         * port's root is its prefix with a '/', as jupyter-server-proxy
         * redirects too. */
        if (t.bare && (r->method == HTTP_GET || r->method == HTTP_HEAD)) {
                redirect_to_root(wsi, r, &t);
                return;
        }
        rc = relay_start(wsi, &t, how, false, !r->reading_body);
        if (rc == -EINVAL)
                http_reply_error(r, 405, "Method not relayed to ports");
        else if (rc == -E2BIG)
                http_reply_error(r, 431, "Request headers too large to relay");
        else if (rc < 0)
                http_reply_error(r, 503, "Cannot reach the kernel-host: %s", strerror(-rc));
}

/* Takes the client's connection from lws, which cannot hand an upgraded
 * connection on as plain bytes (it would answer the upgrade itself, or
 * end the connection): the relay keeps the socket under a new descriptor,
 * and lws's descriptor number now names a fresh unconnected socket, which
 * lws closes, with the wsi, as it ends the request. 0 or -errno (the relay
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

int ports_confirm_upgrade(struct lws *wsi)
{
        enum admission how = ADMIT_TOKEN;
        char message[256];
        struct target t;
        int status;

        if (!find_target(wsi, &t)) {
                http_write_error_now(wsi, 404, "Not found");
                return 1;
        }
        status = admit(wsi, &t, &how, message, sizeof(message));
        /* Taken from lws, a relayed upgrade no longer counts among its
         * connections: it has a cap of its own, the same. */
        if (status == 0 && taken >= (size_t)kernels_config()->max_connections) {
                status = 503;
                snprintf(message, sizeof(message),
                         "Too many relayed port connections (--max-connections %lld)",
                         (long long)kernels_config()->max_connections);
        }
        if (status == 0 && relay_start(wsi, &t, how, true, true) < 0) {
                status = 503;
                snprintf(message, sizeof(message), "Cannot relay this request");
        }
        if (status) {
                http_write_error_now(wsi, status, message);
                return 1;
        }
        if (take_connection(relay_of(wsi)) < 0)
                return -1;
        /* lws hangs up: on a socket that is no longer the connection. */
        return -1;
}

int ports_body(struct lws *wsi, const void *data, size_t len)
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

void ports_body_done(struct lws *wsi)
{
        struct relay *p = relay_of(wsi);

        if (!p || p->body_done)
                return;
        p->body_done = true;
        lws_rx_flow_control(wsi, 0);
        step(p);
}

bool ports_relaying(struct lws *wsi)
{
        return relays && relay_of(wsi) != NULL;
}

bool ports_finished(struct lws *wsi)
{
        struct relay *p = relays ? relay_of(wsi) : NULL;

        return p && p->finished;
}

void ports_closed(struct lws *wsi)
{
        struct relay *p = relays ? relay_of(wsi) : NULL;

        if (p)
                relay_free(p);
}

/* ---- which ports are public ---------------------------------------------- */

int ports_parse_public(const char *text, struct sandbox *box, char *err, size_t errlen)
{
        unsigned short ports[SANDBOX_MAX_PUBLIC_PORTS];
        size_t n = 0;
        const char *p = text;

        while (p && *p) {
                size_t len = strcspn(p, ",");
                int port;

                while (len && *p == ' ') {
                        p++;
                        len--;
                }
                while (len && p[len - 1] == ' ')
                        len--;
                port = parse_port(p, len);
                if (port < 0 || n == SANDBOX_MAX_PUBLIC_PORTS) {
                        if (err)
                                snprintf(err, errlen,
                                         "give at most %d ports from 1 to 65535, comma-separated",
                                         SANDBOX_MAX_PUBLIC_PORTS);
                        return -EINVAL;
                }
                ports[n++] = (unsigned short)port;
                p += strcspn(p, ",");
                if (*p == ',')
                        p++;
        }
        if (box) {
                memcpy(box->public_ports, ports, n * sizeof(ports[0]));
                box->npublic_ports = n;
        }
        return 0;
}

static json_t *public_json(const struct sandbox *box)
{
        json_t *a = json_array();

        for (size_t i = 0; a && i < box->npublic_ports; i++)
                json_array_append_new(a, json_integer(box->public_ports[i]));
        return json_pack("{s:o, s:s}", "public", a, "domain", domain);
}

void ports_api(struct http_request *r, struct kernel *k)
{
        unsigned short ports[SANDBOX_MAX_PUBLIC_PORTS];
        json_t *body, *list, *v;
        size_t n = 0, i;

        if (!k->sandbox) {
                http_reply_error(r, 409, "The kernel has no sandbox now (it is starting)");
                return;
        }
        if (r->method == HTTP_GET) {
                http_reply_json(r, 200, public_json(k->sandbox));
                return;
        }
        if (r->method != HTTP_PUT) {
                http_reply_error(r, 405, "Use GET or PUT on a kernel's ports");
                return;
        }
        body = api_parse_body(r);
        if (!body)
                return;
        list = json_object_get(body, "public");
        if (!json_is_array(list) || json_array_size(list) > SANDBOX_MAX_PUBLIC_PORTS) {
                http_reply_error(r, 400, "Give {\"public\": [PORT, ...]}, at most %d ports",
                                 SANDBOX_MAX_PUBLIC_PORTS);
                goto out;
        }
        json_array_foreach(list, i, v) {
                json_int_t port = json_integer_value(v);

                if (!json_is_integer(v) || port < 1 || port > 65535) {
                        http_reply_error(r, 400, "A port is a number from 1 to 65535");
                        goto out;
                }
                ports[n++] = (unsigned short)port;
        }
        memcpy(k->sandbox->public_ports, ports, n * sizeof(ports[0]));
        k->sandbox->npublic_ports = n;
        klog_info(k->id, "public ports: %zu", n);
        http_reply_json(r, 200, public_json(k->sandbox));
out:
        json_decref(body);
}
