#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/core/access_log.h"
#include "gateway/core/config.h"
#include "gateway/core/metrics.h"
#include "gateway/core/conns.h"
#include "gateway/core/fleet.h"
#include "gateway/core/hostcheck.h"
#include "gateway/core/http_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int http_route_path(struct lws *wsi, char *out, size_t size)
{
        const char *base = config_get()->base_url;
        size_t blen = strlen(base);
        char *uri;
        int len;

        if (lws_http_get_uri_and_method(wsi, &uri, &len) < 0 || len <= 0)
                return -ENOENT;
        /* "/base" alone counts as the base URL's root. */
        if ((size_t)len + 1 == blen && strncmp(uri, base, (size_t)len) == 0) {
                out[0] = '\0';
                return 0;
        }
        if ((size_t)len < blen || strncmp(uri, base, blen) != 0)
                return -ENOENT;
        if ((size_t)len - blen >= size)
                return -ENAMETOOLONG;
        memcpy(out, uri + blen, (size_t)len - blen);
        out[(size_t)len - blen] = '\0';
        return 0;
}

static const struct http_router *router;

void http_set_router(const struct http_router *routes)
{
        router = routes;
}

int http_upgrade_check(struct lws *wsi, char *path, size_t size, char *message, size_t msize)
{
        char name[HOSTCHECK_MAX];
        int status = conns_refusal(wsi, message, msize);

        if (status)
                return status;
        if (!http_host_allowed(wsi, name, sizeof(name))) {
                http_log_refused_host(name);
                snprintf(message, msize,
                         "Host %s is not a name this gateway serves under (the operator may "
                         "allow it with --allow-host)",
                         name);
                return 403;
        }
        /* The key first: it decides what exists for the caller (another
         * tenant's kernel is "no such kernel", as a made-up id is). */
        if (!http_authorized(wsi)) {
                snprintf(message, msize, "Missing or wrong token");
                return 401;
        }
        if (http_route_path(wsi, path, size) < 0) {
                snprintf(message, msize, "Not found");
                return 404;
        }
        return 0;
}

int http_upgrade_admit(struct lws *wsi)
{
        if (http_origin(wsi, NULL, 0) == HTTP_ORIGIN_DENIED) {
                http_write_error_now(wsi, 403, "Origin not allowed");
                return -1;
        }
        conns_admitted(wsi);
        return 0;
}

const char *http_upgrade_route_class(struct lws *wsi)
{
        char path[HTTP_PATH_MAX];

        if (router && router->relayed(wsi))
                return "ports";
        if (http_route_path(wsi, path, sizeof(path)) < 0)
                return "other";
        return metrics_route_class(path, false);
}

static const char *method_name(enum http_method m)
{
        static const char *const names[] = {"GET",    "POST",    "PUT",  "PATCH",
                                            "DELETE", "OPTIONS", "HEAD", "OTHER"};

        return (size_t)m < sizeof(names) / sizeof(names[0]) ? names[m] : "OTHER";
}

/* The access line of a request that ends, answered or not (a client that
 * left before its answer gets nginx's 499). */
static void log_request(const struct http_request *r)
{
        struct access_record a = {
            .method = method_name(r->method),
            .route = http_route_class(r),
            .status = r->responded ? r->status : 499,
            .bytes_in = r->bytes_in,
            .bytes_out = r->bytes_out,
            .started = r->started,
            .tenant = r->has_caller ? r->caller.name : NULL,
        };

        access_log_write(r->wsi, &a);
}

void http_request_reset(struct http_request *r)
{
        if (r->wsi && r->started > 0 && !r->relayed)
                log_request(r);
        loop_unwatch(&r->raw_body);
        if (r->cleanup)
                r->cleanup(r);
        waiter_cancel(&r->waiter);
        if (r->wsi && r->stream_fd >= 0)
                close(r->stream_fd);
        buf_free(&r->body);
        buf_free(&r->response);
        buf_free(&r->out);
        memset(r, 0, sizeof(*r));
        r->stream_fd = -1;
}

static enum http_method method_of(struct lws *wsi)
{
        char *uri;
        int len;

        switch (lws_http_get_uri_and_method(wsi, &uri, &len)) {
        case LWSHUMETH_GET:
                return HTTP_GET;
        case LWSHUMETH_POST:
                return HTTP_POST;
        case LWSHUMETH_PUT:
                return HTTP_PUT;
        case LWSHUMETH_PATCH:
                return HTTP_PATCH;
        case LWSHUMETH_DELETE:
                return HTTP_DELETE;
        case LWSHUMETH_OPTIONS:
                return HTTP_OPTIONS;
        case LWSHUMETH_HEAD:
                return HTTP_HEAD;
        default:
                return HTTP_OTHER;
        }
}

/* A request answered before its body is read (refused, or an error
 * found in its headers) never has its body read: the connection closes
 * once the answer is written. So nobody without the token can make the
 * gateway take in bytes, or hold a connection by sending them slowly. */
static void stop_reading(struct http_request *r)
{
        if (r->reading_body) {
                r->close_after = true;
                r->reading_body = false;
        }
}

/* Everything about a request that its headers decide, in this order:
 * the connection's caps, the Host (DNS rebinding), the base URL, the
 * Origin, then the credentials of its route. Returns true when the
 * request may go on; false after replying. */
static bool admit(struct lws *wsi, struct http_request *r)
{
        enum http_origin_kind origin;
        enum http_access access;
        char message[256], name[HOSTCHECK_MAX];
        /* The path first, for the route class of a refusal's log line and
         * metrics; a path outside the base URL is refused after the
         * Host and Origin checks, as before. */
        int path_rc = http_route_path(wsi, r->path, sizeof(r->path));
        int status = conns_refusal(wsi, message, sizeof(message));

        if (status) {
                http_reply_error(r, status, "%s", message);
                /* The next request would be refused the same way. */
                r->close_after = true;
                return false;
        }
        if (!http_host_allowed(wsi, name, sizeof(name))) {
                http_log_refused_host(name);
                http_reply_error(r, 403,
                                 "Host %s is not a name this gateway serves under (the "
                                 "operator may allow it with --allow-host)",
                                 name);
                return false;
        }
        origin = http_origin(wsi, r->cors_origin, sizeof(r->cors_origin));
        if (path_rc < 0) {
                r->path[0] = '\0';
                http_reply_error(r, 404, "Not found");
                return false;
        }
        /* Before the credentials: a gateway checking its peers at start
         * has none for them. */
        if (fleet_refuse_same_host_id(r))
                return false;
        access = router->access(r);
        if (access == HTTP_ACCESS_ANYONE) {
                /* Public routes (the page's files, probes' /api/health)
                 * are fetched, whatever the Origin (a sandboxed output
                 * frame fetches frame.js with "Origin: null"), never sent
                 * anything. */
                if (r->method != HTTP_GET) {
                        http_reply_error(r, 405, "Use GET on the page's files");
                        return false;
                }
                if (r->reading_body) {
                        http_reply_error(r, 400, "The page's files take no request body");
                        return false;
                }
                /* Served without credentials: the connection's deadline
                 * starts again rather than ends (conns.h). */
                conns_public(wsi);
                return true;
        }
        if (origin == HTTP_ORIGIN_DENIED) {
                http_reply_error(r, 403,
                                 "Cross-origin request from a page --allow-origin does not name");
                return false;
        }
        if (r->method == HTTP_OPTIONS) {
                /* A preflight carries no credentials; it only learns the
                 * rules. Answered here, it is not let through: a
                 * connection needs a request with credentials for that. */
                http_reply_empty(r, 204);
                return false;
        }
        /* A route with credentials of its own (E2B's: its API key, or a
         * sandbox's access token) checks them itself. */
        if (access == HTTP_ACCESS_OWN ? !router->admit(r) : !http_authorized(wsi)) {
                if (!r->responded)
                        http_reply_error(r, 401, "Missing or wrong token");
                return false;
        }
        /* With credentials: the connection's deadline ends (conns.h). */
        conns_admitted(wsi);
        if (tenants_caller() && tenants_caller()->name[0]) {
                r->caller = *tenants_caller();
                r->has_caller = true;
        }
        return true;
}

/* Runs the request's own code as its caller, whatever callback (lws's, or
 * the loop's for a body read from the socket) it runs in. */
static void as_caller(struct http_request *r, void (*fn)(struct http_request *))
{
        struct tenant_scope saved;

        tenants_scope_enter(&saved);
        if (r->has_caller)
                tenants_set_caller(&r->caller);
        fn(r);
        tenants_scope_restore(&saved);
}

static int begin(struct lws *wsi, struct http_request *r)
{
        const struct config *cfg = config_get();
        char length[32];
        long long content_length = 0;

        http_request_reset(r);
        r->wsi = wsi;
        r->started = access_log_now();
        r->method = method_of(wsi);
        buf_init(&r->body, (size_t)cfg->max_body_bytes);
        if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0) {
                char *end;

                /* One too long to copy is no length we would take either. */
                content_length = -1;
                if (lws_hdr_copy(wsi, length, sizeof(length), WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0) {
                        errno = 0;
                        content_length = strtoll(length, &end, 10);
                        if (errno || *end || end == length || content_length < 0)
                                content_length = -1;
                }
        }
        /* lws 4.1 hands chunked bodies over undecoded: we decode them, and
         * since lws then expects more body, such a connection is not reused. */
        if (lws_hdr_copy(wsi, length, sizeof(length), WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0 &&
            strcasestr(length, "chunked")) {
                r->chunked = true;
                r->close_after = true;
                chunked_init(&r->dechunk);
                content_length = 0;
        }
        /* Until the body is read (or refused), the connection is mid-request. */
        r->reading_body = content_length != 0 || r->chunked;
        if (router->relayed(wsi)) {
                /* Relayed as it comes, chunked or not, to a sandbox's port. */
                r->route_class = "ports";
                if (content_length < 0)
                        http_reply_error(r, 400, "Bad Content-Length");
                else
                        router->relay_begin(wsi, r);
                /* A relay that started logs the connection itself. */
                r->relayed = !r->responded;
                if (r->responded)
                        stop_reading(r);
                return 0;
        }
        if (!admit(wsi, r) || content_length < 0) {
                if (!r->responded)
                        http_reply_error(r, 400, "Bad Content-Length");
                stop_reading(r);
                return 0;
        }
        as_caller(r, router->prepare);
        if (!r->responded && !r->body_fn && content_length > cfg->max_body_bytes)
                http_reply_error(r, 413, "Request body larger than %lld bytes",
                                 (long long)cfg->max_body_bytes);
        if (r->responded)
                stop_reading(r);
        else if (!r->reading_body)
                as_caller(r, router->handle);
        return 0;
}

/* One decoded piece of the body: to the route's body_fn, or buffered. */
static int body_piece(void *arg, const uint8_t *data, size_t len)
{
        struct http_request *r = arg;

        r->bytes_in += len;
        if (r->responded)
                return 0;
        if (r->body_fn)
                return r->body_fn(r, data, len) < 0 ? -ECANCELED : 0;
        if (buf_append(&r->body, data, len) < 0) {
                http_reply_error(r, 413, "Request body larger than %lld bytes",
                                 (long long)config_get()->max_body_bytes);
                return -E2BIG;
        }
        return 0;
}

static void body_complete(struct http_request *r)
{
        r->reading_body = false;
        if (!r->responded)
                as_caller(r, router->handle);
}

static void dechunk(struct http_request *r, const uint8_t *in, size_t len)
{
        long used = chunked_feed(&r->dechunk, in, len, body_piece, r);

        if (used < 0) {
                if (!r->responded)
                        http_reply_error(r, 400, "Malformed chunked request body");
                r->reading_body = false;
        } else if (r->dechunk.done) {
                body_complete(r);
        }
        if (!r->reading_body && r->raw_body) {
                /* lws reads (nothing more comes) and writes the answer again. */
                loop_unwatch(&r->raw_body);
                lws_rx_flow_control(r->wsi, 1);
                lws_callback_on_writable(r->wsi);
        }
}

static void on_raw_body(void *arg)
{
        static uint8_t data[64 * 1024];
        struct http_request *r = arg;
        ssize_t n = read(lws_get_socket_fd(r->wsi), data, sizeof(data));
        struct tenant_scope saved;

        if (n > 0) {
                /* A loop callback, not lws's: the caller is set here. */
                tenants_scope_enter(&saved);
                if (r->has_caller)
                        tenants_set_caller(&r->caller);
                dechunk(r, data, (size_t)n);
                tenants_scope_restore(&saved);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                /* The client went away mid-body; lws notices on its own. */
                r->reading_body = false;
                loop_unwatch(&r->raw_body);
                lws_rx_flow_control(r->wsi, 1);
        }
}

/* libwebsockets 4.1 stops a body without a Content-Length at 100 MiB of raw
 * bytes (and would read the rest as a new request), so a chunked body is
 * read from the socket itself after its first piece: lws has handed over
 * all it read, and with its reading paused it reads no more. (Not under
 * TLS, where the socket carries ciphertext: there the cap stays.) */
static void take_over_body(struct http_request *r)
{
        if (lws_is_ssl(r->wsi) || r->raw_body)
                return;
        lws_rx_flow_control(r->wsi, 0);
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
        if (loop_watch_fd(lws_get_socket_fd(r->wsi), on_raw_body, r, &r->raw_body) < 0)
                lws_rx_flow_control(r->wsi, 1);
}

static int on_body(struct http_request *r, const uint8_t *in, size_t len)
{
        if (router->relay_active(r->wsi))
                return router->relay_body(r->wsi, in, len);
        if (!r->reading_body)
                return 0;
        if (!r->chunked) {
                body_piece(r, in, len);
                return 0;
        }
        dechunk(r, in, len);
        if (r->reading_body)
                take_over_body(r);
        return 0;
}

int http_callback(struct lws *wsi, enum lws_callback_reasons reason, struct http_request *r,
                  void *in, size_t len)
{
        /* The rest of a request runs as its caller (server.c made the
         * callback start as nobody). A new request starts as nobody: r
         * may still hold the caller of the connection's previous one
         * until begin() resets it. */
        if (r->has_caller && reason != LWS_CALLBACK_HTTP)
                tenants_set_caller(&r->caller);
        switch (reason) {
        case LWS_CALLBACK_HTTP:
                return begin(wsi, r);
        case LWS_CALLBACK_HTTP_BODY:
                return on_body(r, in, len);
        case LWS_CALLBACK_HTTP_BODY_COMPLETION:
                /* lws calls this for "Content-Length: 0" too, after begin()
                 * has already handed the request on; a chunked body ends
                 * when its last chunk is decoded. */
                if (router->relay_active(wsi))
                        router->relay_body_done(wsi);
                else if (r->reading_body && !r->chunked)
                        body_complete(r);
                return 0;
        case LWS_CALLBACK_HTTP_WRITEABLE: {
                bool close_after = r->close_after;
                int rc;

                if (!r->responded || !r->wsi)
                        return 0;
                if (r->streaming)
                        return http_stream_step(wsi, r);
                rc = http_write_response(wsi, r, r->status, r->content_type,
                                         (unsigned char *)r->response.data + LWS_PRE,
                                         r->response.len - LWS_PRE);
                if (rc == 0)
                        r->bytes_out = r->response.len - LWS_PRE;
                http_request_reset(r);
                if (rc < 0 || close_after)
                        return -1;
                return lws_http_transaction_completed(wsi) ? -1 : 0;
        }
        case LWS_CALLBACK_CLOSED_HTTP:
                http_request_reset(r);
                return 0;
        default:
                return 0;
        }
}

void http_drop_nulls(json_t *v)
{
        const char *key;
        json_t *value;
        void *tmp;

        json_object_foreach_safe(v, tmp, key, value) {
                if (json_is_null(value))
                        json_object_del(v, key);
                else
                        http_drop_nulls(value);
        }
}

json_t *http_parse_body(struct http_request *r)
{
        json_error_t jerr;
        json_t *body;

        if (r->body.len == 0)
                return json_object();
        body = json_loadb(r->body.data, r->body.len, 0, &jerr);
        if (!body) {
                http_reply_error(r, 400, "Invalid JSON in request body: %s", jerr.text);
        } else if (!json_is_object(body)) {
                http_reply_error(r, 400, "Request body must be a JSON object");
                json_decref(body);
                body = NULL;
        }
        http_drop_nulls(body);
        return body;
}
