#include "autoconf.h"

#include "gateway/ports/ports.h"
#include "gateway/core/ports_domain.h"
#include "gateway/ports/port_relay.h"
#include "gateway/core/http.h"
#include "gateway/core/conns.h"
#include "gateway/core/hostcheck.h"
#include "gateway/kernels/sandboxes.h"
#include "gateway/core/tenants.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COOKIE_NAME "glovebox-port"
#define COOKIE_SECONDS (12 * 3600) /* a port cookie's life */
/* "KEY~EXPIRES~MAC": a key's name, Unix seconds, 64 hex digits */
#define COOKIE_VALUE_MAX (KEYS_NAME_MAX + 24 + 64)
#define HEAD_MAX    (32 * 1024) /* the rebuilt request head */
/* A document served under the gateway's own origin could read what the
 * gateway's page keeps (the token): in the path form it runs in an opaque
 * origin instead. The Host form is an origin of its own and needs none. */
#define PATH_FORM_CSP "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

/* The answer when a tenant's share of the kernel-host's connecting slots
 * is taken (port_relay_start's -EBUSY). */
#define BUSY_MESSAGE                                                                               \
        "Too many connections being made into this tenant's sandboxes at once "                    \
        "(--port-max-connecting-per-tenant %lld); try again"

struct target {
        char id[JP_UUID_SIZE]; /* the kernel's or the E2B sandbox's */
        int port;
        bool host_form;
        bool bare;        /* the path form without a '/' after the port */
        bool known;       /* the id is a kernel's or an E2B sandbox's */
        const char *rest; /* path (and nothing of the query) for the app, in uri_storage */
        char uri_storage[HTTP_PATH_MAX];
        struct sandbox *box;
        bool named; /* found by a family's name for it (sandboxes.h) */
        bool asleep; /* that name's sandbox sleeps: box is shape, woken at the relay */
        struct sandbox shape;
        const char *owner; /* the tenant whose kernel or sandbox it is */
        char key[KEYS_NAME_MAX]; /* the key that admitted the request, or "" */
};

int ports_init(const struct config *cfg)
{
        port_relay_init((size_t)cfg->port_buffer_bytes, cfg->port_idle_timeout,
                        (size_t)cfg->port_max_connecting_per_tenant);
        if (!ports_domain()[0])
                return -EINVAL;
        if (!*cfg->ports_domain && !hostcheck_is_loopback(cfg->host))
                log_info("sandbox ports by name: {port}-{id}.%s; for clients on other machines, "
                         "point a wildcard DNS name at the gateway and give it as --ports-domain",
                         ports_domain());
        return 0;
}

/* ---- which sandbox, which port ------------------------------------------ */

/* "{port}-{id}.{domain}": the id and port, when the Host names our
 * ports domain. */
static bool host_target(struct lws *wsi, struct target *t)
{
        char host[HOSTCHECK_MAX], name[HOSTCHECK_MAX];
        int len = lws_hdr_total_length(wsi, WSI_TOKEN_HOST);
        const char *dash, *dot;
        const char *domain_name = ports_domain_name();
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
        t->port = sandbox_port_number(name, (size_t)(dash - name));
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
        t->port = sandbox_port_number(port, (size_t)(end - port));
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

/* The sandbox of the target: a kernel's or an E2B sandbox's, in both
 * forms (E2B's getHost names the Host form; the path form serves a client
 * that has no wildcard DNS name for the ports domain). */
static void resolve(struct target *t)
{
        /* Any tenant's: a public port or a sandbox's traffic token needs no
         * key, and a key that may not reach the owner is told 404 below. */
        struct kernel *k = kernel_find_any(t->id);

        if (k) {
                t->known = true;
                t->box = k->sandbox;
                t->owner = k->owner;
                return;
        }
        /* A name another family gives a sandbox (E2B's sandbox id). */
        if (sandbox_resolve_name(t->id, &t->box, &t->owner)) {
                t->known = true;
                t->named = true;
        } else if (sandbox_name_asleep(t->id, &t->shape, &t->owner)) {
                /* Asleep, with no box: its stand-in says what admission
                 * reads, and the relay wakes it. */
                t->known = t->named = t->asleep = true;
                t->box = &t->shape;
        }
}

static bool port_public(const struct sandbox *box, int port)
{
        if (box->all_ports_public)
                return true;
        for (size_t i = 0; i < box->npublic_ports; i++) {
                if (box->public_ports[i] == port)
                        return true;
        }
        return false;
}

/* ---- credentials -------------------------------------------------------- */

/* The MAC of a cookie for one port of one sandbox, issued to key (a
 * key's name, or "" for the sandbox's traffic token) until expires (Unix
 * seconds): an HMAC under a secret of this gateway's run, so that the
 * cookie opens that port only, only while that key stays in force, and
 * only until it expires. */
static int cookie_mac(const struct target *t, const char *key, long long expires, char out[65])
{
        static unsigned char secret[32];
        static bool have_secret;
        unsigned char mac[32];
        unsigned int len = 0;
        char what[JP_UUID_SIZE + KEYS_NAME_MAX + 64];

        if (!have_secret) {
                if (RAND_bytes(secret, sizeof(secret)) != 1)
                        return -EIO;
                have_secret = true;
        }
        snprintf(what, sizeof(what), "port:%s:%d:%s:%lld", t->id, t->port, key, expires);
        if (!HMAC(EVP_sha256(), secret, (int)sizeof(secret), (const unsigned char *)what,
                  strlen(what), mac, &len) ||
            len != sizeof(mac))
                return -EIO;
        for (size_t i = 0; i < sizeof(mac); i++)
                snprintf(out + 2 * i, 3, "%02x", mac[i]);
        return 0;
}

/* The cookie's value: "KEY~EXPIRES~MAC" (a key's name has no '~'). */
static int cookie_value(const struct target *t, char *out, size_t size)
{
        long long expires = (long long)time(NULL) + COOKIE_SECONDS;
        char mac[65];

        if (cookie_mac(t, t->key, expires, mac) < 0)
                return -EIO;
        snprintf(out, size, "%s~%lld~%s", t->key, expires, mac);
        return 0;
}

/* The next "name=value" of a Cookie header from *p: its bounds, and *p
 * moved past it; false at the end. */
static bool next_cookie(const char **p, const char **start, const char **end)
{
        while (**p == ' ' || **p == ';')
                (*p)++;
        if (!**p)
                return false;
        *start = *p;
        *end = strchr(*p, ';');
        if (!*end)
                *end = *p + strlen(*p);
        *p = *end;
        return true;
}

/* Finds "name=value" in a Cookie header; copies value. */
static bool cookie_find(const char *cookies, const char *name, char *out, size_t size)
{
        size_t nlen = strlen(name);
        const char *p = cookies, *start, *end;

        while (next_cookie(&p, &start, &end)) {
                if ((size_t)(end - start) > nlen && strncmp(start, name, nlen) == 0 &&
                    start[nlen] == '=') {
                        snprintf(out, size, "%.*s", (int)(end - start - (long)nlen - 1),
                                 start + nlen + 1);
                        return true;
                }
        }
        return false;
}

/* A cookie of ours for t's port, unexpired, whose key is still in force
 * and may still reach the port's owner; t->key becomes that key. */
static bool cookie_ok(struct lws *wsi, struct target *t)
{
        char cookies[4096], given[COOKIE_VALUE_MAX + 1], expected[65], *tilde, *mac, *end;
        int n = lws_hdr_copy(wsi, cookies, sizeof(cookies), WSI_TOKEN_HTTP_COOKIE);
        const struct key_entry *key;
        long long expires;

        if (n <= 0 || !cookie_find(cookies, COOKIE_NAME, given, sizeof(given)))
                return false;
        tilde = strchr(given, '~');
        mac = tilde ? strchr(tilde + 1, '~') : NULL;
        if (!mac || (size_t)(tilde - given) >= KEYS_NAME_MAX)
                return false;
        *tilde = *mac++ = '\0';
        errno = 0;
        expires = strtoll(tilde + 1, &end, 10);
        if (errno || *end || end == tilde + 1 || expires < (long long)time(NULL) ||
            strlen(mac) != 64 || cookie_mac(t, given, expires, expected) < 0 ||
            CRYPTO_memcmp(mac, expected, 64) != 0)
                return false;
        /* Issued with the sandbox's traffic token: that lives as long as
         * the sandbox. Issued to a key: that key must still be in force. */
        if (given[0]) {
                key = tenants_key(given);
                if (!key || (!key->admin && strcmp(given, t->owner ? t->owner : "") != 0))
                        return false;
        }
        snprintf(t->key, sizeof(t->key), "%s", given);
        return true;
}

static bool traffic_token_ok(struct lws *wsi, const struct target *t)
{
        char token[128];
        int n;

        if (!t->named)
                return false;
        n = lws_hdr_custom_copy(wsi, token, sizeof(token), "e2b-traffic-access-token:", 25);
        return n > 0 && sandbox_name_token_ok(t->id, token);
}

enum admission { ADMIT_PUBLIC, ADMIT_TOKEN, ADMIT_COOKIE };

/* The answer to a request without credentials that would do: 401 in the
 * path form, as for every route; 403 in the Host form, as E2B answers a
 * private port asked without its traffic access token there (its SDKs'
 * getHost names that form). The same whether the id is known or not, so
 * that it tells nobody which sandboxes exist. */
static int refused_status(const struct target *t)
{
        return t->host_form ? 403 : 401;
}

/* Everything the headers decide; 0 with *how set, or an HTTP status with
 * message filled. */
static int admit(struct lws *wsi, struct target *t, enum admission *how, char *message, size_t size)
{
        const struct config *cfg = config_get();
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
                        return refused_status(t);
                }
                /* Another tenant's kernel does not exist for this key,
                 * not even as one that is starting. */
                if (t->known && tenants_may_reach(t->owner)) {
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
        else if (traffic_token_ok(wsi, t))
                *how = ADMIT_TOKEN;
        else if (http_authorized(wsi)) {
                /* Another tenant's kernel does not exist for this key. */
                if (!tenants_may_reach(t->owner)) {
                        snprintf(message, size, "No kernel or sandbox %.64s", t->id);
                        return 404;
                }
                snprintf(t->key, sizeof(t->key), "%s", tenants_caller()->name);
                *how = ADMIT_TOKEN;
        }
        else if (cookie_ok(wsi, t))
                *how = ADMIT_COOKIE;
        else {
                snprintf(message, size, "Missing or wrong token");
                return refused_status(t);
        }
        /* A page elsewhere must not reach a private port with the user's
         * cookie. */
        if (*how != ADMIT_PUBLIC && http_origin(wsi, NULL, 0) == HTTP_ORIGIN_DENIED) {
                snprintf(message, size, "Origin not allowed");
                return 403;
        }
        if (t->asleep)
                return 0;
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
        const char *p = cookies, *start, *end;
        bool any = false;
        int rc = 0;

        if (n <= 0)
                return 0;
        while (rc == 0 && next_cookie(&p, &start, &end)) {
                if (strncmp(start, COOKIE_NAME "=", sizeof(COOKIE_NAME)) != 0) {
                        rc = buf_printf(b, "%s%.*s", any ? "; " : "Cookie: ", (int)(end - start),
                                        start);
                        any = true;
                }
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


/* The Host the app gets: the sandbox's own (its placeholders expanded)
 * or 127.0.0.1:PORT. */
static int append_request_host(struct buf *b, const struct target *t)
{
        const char *p = t->box->request_host;
        int rc;

        if (!*p)
                return buf_printf(b, "Host: 127.0.0.1:%d\r\n", t->port);
        rc = buf_append_str(b, "Host: ");
        while (rc == 0 && *p) {
                const char *at = strstr(p, SANDBOX_PORT_PLACEHOLDER);
                size_t n = at ? (size_t)(at - p) : strlen(p);

                rc = buf_printf(b, "%.*s", (int)n, p);
                if (rc == 0 && at)
                        rc = buf_printf(b, "%d", t->port);
                p += n + (at ? strlen(SANDBOX_PORT_PLACEHOLDER) : 0);
        }
        return rc == 0 ? buf_append_str(b, "\r\n") : rc;
}

/* The request head for the app, into b (bounded by HEAD_MAX). 0,
 * -EINVAL for a method not relayed, -E2BIG when it does not fit. */
static int build_head(struct buf *b, struct lws *wsi, const struct target *t, bool upgrade)
{
        const char *method = method_name(wsi);
        char value[4096], host[HOSTCHECK_MAX] = "", peer[64] = "";
        int rc;

        if (!method)
                return -EINVAL;
        rc = buf_printf(b, "%s ", method);
        if (rc == 0)
                rc = append_encoded(b, t->rest, strlen(t->rest), "/!$&'()*+,;=:@");
        if (rc == 0)
                rc = append_query(b, wsi, false);
        if (rc == 0)
                rc = buf_append_str(b, " HTTP/1.1\r\n");
        if (rc == 0)
                rc = append_request_host(b, t);
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
        if (rc == 0 && upgrade && lws_hdr_copy(wsi, value, sizeof(value), WSI_TOKEN_UPGRADE) > 0)
                rc = buf_printf(b, "Connection: Upgrade\r\nUpgrade: %s\r\n", value);
        else if (rc == 0)
                rc = buf_append_str(b, "Connection: close\r\n");
        if (rc == 0 && lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) > 0)
                rc = buf_printf(b, "X-Forwarded-Host: %s\r\n", host);
        if (rc == 0 && !t->host_form)
                rc = buf_printf(b, "X-Forwarded-Prefix: %sapi/kernels/%s/ports/%d\r\n",
                                config_get()->base_url, t->id, t->port);
        if (rc == 0 && lws_get_peer_simple(wsi, peer, sizeof(peer)))
                rc = buf_printf(b, "X-Forwarded-For: %s\r\nX-Forwarded-Proto: http\r\n", peer);
        if (rc == 0)
                rc = buf_append_str(b, "\r\n");
        return rc;
}

/* Header lines that go into the answer after its first line. */
static void build_inject(char *out, size_t size, const struct target *t, enum admission how)
{
        char value[COOKIE_VALUE_MAX + 1];
        size_t at = 0;

        out[0] = '\0';
        if (!t->host_form)
                at += (size_t)snprintf(out, size, "Content-Security-Policy: " PATH_FORM_CSP "\r\n");
        /* The first visit with the token (a browser's, with ?token=) gets
         * the cookie, so that the app's own relative links keep working;
         * SameSite keeps other sites' pages from sending it. */
        if (how == ADMIT_TOKEN && cookie_value(t, value, sizeof(value)) == 0) {
                if (t->host_form)
                        snprintf(out + at, size - at,
                                 "Set-Cookie: " COOKIE_NAME "=%s; Path=/; Max-Age=%d; HttpOnly; "
                                 "SameSite=Lax\r\n",
                                 value, COOKIE_SECONDS);
                else
                        snprintf(out + at, size - at,
                                 "Set-Cookie: " COOKIE_NAME "=%s; Path=%sapi/kernels/%s/ports/%d/; "
                                 "Max-Age=%d; HttpOnly; SameSite=Lax\r\n",
                                 value, config_get()->base_url, t->id, t->port,
                                 COOKIE_SECONDS);
        }
}

/* Rebuilds the request for the app and starts relaying it. */
static int relay_start(struct lws *wsi, const struct target *t, enum admission how, bool upgrade,
                       bool body_done)
{
        char inject[PORT_RELAY_INJECT_MAX], prefix[PORT_RELAY_PREFIX_MAX];
        struct buf head;
        int rc;

        buf_init(&head, HEAD_MAX);
        rc = build_head(&head, wsi, t, upgrade);
        if (rc < 0) {
                buf_free(&head);
                return rc == -E2BIG || rc == -EINVAL ? rc : -ENOMEM;
        }
        build_inject(inject, sizeof(inject), t, how);
        if ((size_t)snprintf(prefix, sizeof(prefix), "%sapi/kernels/%s/ports/%d",
                             config_get()->base_url, t->id, t->port) >= sizeof(prefix)) {
                buf_free(&head);
                return -E2BIG;
        }
        return port_relay_start(wsi, t->asleep ? t->id : t->box->id, t->owner ? t->owner : "",
                                t->port, &head, inject, t->host_form ? NULL : prefix, upgrade,
                                body_done, t->key, t->asleep);
}

static void redirect_to_root(struct lws *wsi, struct http_request *r, const struct target *t)
{
        struct buf query;

        buf_init(&query, sizeof(r->location));
        if (append_query(&query, wsi, true) < 0 ||
            (size_t)snprintf(r->location, sizeof(r->location), "%sapi/kernels/%s/ports/%d/%s",
                             config_get()->base_url, t->id, t->port,
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
        else if (rc == -EBUSY)
                http_reply_error(r, 503, BUSY_MESSAGE,
                                 (long long)config_get()->port_max_connecting_per_tenant);
        else if (rc < 0)
                http_reply_error(r, 503, "Cannot reach the kernel-host: %s", strerror(-rc));
}

int ports_confirm_upgrade(struct lws *wsi)
{
        enum admission how = ADMIT_TOKEN;
        char message[256];
        struct target t;
        int status, rc;

        if (!find_target(wsi, &t)) {
                http_write_error_now(wsi, 404, "Not found");
                return 1;
        }
        status = admit(wsi, &t, &how, message, sizeof(message));
        /* Taken from lws, a relayed upgrade no longer counts among its
         * connections: it has a cap of its own, the same. */
        if (status == 0 && port_relay_taken() >= (size_t)config_get()->max_connections) {
                status = 503;
                snprintf(message, sizeof(message),
                         "Too many relayed port connections (--max-connections %lld)",
                         (long long)config_get()->max_connections);
        }
        rc = status == 0 ? relay_start(wsi, &t, how, true, true) : 0;
        if (rc == -EBUSY) {
                status = 503;
                snprintf(message, sizeof(message), BUSY_MESSAGE,
                         (long long)config_get()->port_max_connecting_per_tenant);
        } else if (rc < 0) {
                status = 503;
                snprintf(message, sizeof(message), "Cannot relay this request");
        }
        if (status) {
                http_write_error_now(wsi, status, message);
                return 1;
        }
        /* The relay has the connection: lws hangs up on a socket that is
         * no longer it. */
        return -1;
}

/* ---- which ports are public ---------------------------------------------- */

static json_t *public_json(const struct sandbox *box)
{
        json_t *a = json_array();

        for (size_t i = 0; a && i < box->npublic_ports; i++)
                json_array_append_new(a, json_integer(box->public_ports[i]));
        return json_pack("{s:o, s:s}", "public", a, "domain", ports_domain());
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
        body = http_parse_body(r);
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
