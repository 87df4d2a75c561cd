#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/core/conns.h"
#include "gateway/core/hostcheck.h"
#include "gateway/core/metrics.h"
#include "gateway/core/server.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdint.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *status_phrase(int status)
{
        switch (status) {
        case 200:
                return "OK";
        case 201:
                return "Created";
        case 204:
                return "No Content";
        case 301:
                return "Moved Permanently";
        case 302:
                return "Found";
        case 400:
                return "Bad Request";
        case 401:
                return "Unauthorized";
        case 403:
                return "Forbidden";
        case 404:
                return "Not Found";
        case 405:
                return "Method Not Allowed";
        case 409:
                return "Conflict";
        case 413:
                return "Payload Too Large";
        case 415:
                return "Unsupported Media Type";
        case 429:
                return "Too Many Requests";
        case 431:
                return "Request Header Fields Too Large";
        case 500:
                return "Internal Server Error";
        case 501:
                return "Not Implemented";
        case 502:
                return "Bad Gateway";
        case 503:
                return "Service Unavailable";
        case 504:
                return "Gateway Timeout";
        default:
                return "Error";
        }
}

/* The authority the client addressed: Host, or HTTP/2's :authority.
 * Returns its length; 0 when there is none; -E2BIG when it is longer than
 * any host name. */
static int request_authority(struct lws *wsi, char *out, size_t size)
{
        static const enum lws_token_indexes tokens[] = {WSI_TOKEN_HOST,
                                                        WSI_TOKEN_HTTP_COLON_AUTHORITY};

        for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
                int len = lws_hdr_total_length(wsi, tokens[i]);

                if (len <= 0)
                        continue;
                if ((size_t)len >= size || lws_hdr_copy(wsi, out, (int)size, tokens[i]) != len)
                        return -E2BIG;
                return len;
        }
        out[0] = '\0';
        return 0;
}

bool http_host_allowed(struct lws *wsi, char *name, size_t size)
{
        const struct config *cfg = config_get();
        char authority[HOSTCHECK_MAX];
        int len = request_authority(wsi, authority, sizeof(authority));

        name[0] = '\0';
        /* Browsers always send Host; a request without one (HTTP/1.0) is
         * not a page's, so not what this check is about. */
        if (len == 0)
                return true;
        if (len > 0 && hostcheck_allowed(authority, cfg->host, cfg->allow_host))
                return true;
        if (len < 0 || hostcheck_name(authority, name, size) < 0)
                snprintf(name, size, "(malformed)");
        return false;
}

/* A page elsewhere must not drive kernels with the user's credentials: an
 * Origin, when present, must be the gateway's own or one --allow-origin
 * names ('*' for any). "The gateway's own" is only as good as the Host
 * check before it: a rebound name's page is its own origin. */
enum http_origin_kind http_origin(struct lws *wsi, char *out, size_t size)
{
        const char *allowed = config_get()->allow_origin;
        char origin[HTTP_ORIGIN_MAX], host[HOSTCHECK_MAX];
        int len = lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN);
        const char *o, *p;
        size_t olen;

        if (len <= 0)
                return HTTP_ORIGIN_NONE;
        /* An Origin too long to read is still an Origin: never "none". */
        if ((size_t)len >= sizeof(origin) ||
            lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) != len)
                return HTTP_ORIGIN_DENIED;
        o = strstr(origin, "://");
        if (o && request_authority(wsi, host, sizeof(host)) > 0 && strcasecmp(o + 3, host) == 0)
                return HTTP_ORIGIN_SAME;
        olen = strlen(origin);
        for (p = allowed; *p;) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);

                while (n && *p == ' ') {
                        p++;
                        n--;
                }
                if ((n == 1 && *p == '*') || (n == olen && strncasecmp(p, origin, n) == 0)) {
                        if (out)
                                snprintf(out, size, "%s", origin);
                        return HTTP_ORIGIN_ALLOWED;
                }
                p = comma ? comma + 1 : p + n;
        }
        return HTTP_ORIGIN_DENIED;
}

void http_log_refused_host(const char *name)
{
        static time_t last;
        time_t now = time(NULL);

        /* A page can send these as fast as it likes: one line a minute. */
        if (now - last < 60)
                return;
        last = now;
        if (name[0] == '(')
                log_warn("refused a request with a malformed Host");
        else
                log_warn("refused a request for Host %s: not a name this gateway serves under "
                         "(a DNS rebinding page?); if it is yours, start with --allow-host %s",
                         name, name);
}

bool http_authorized_key(const char *key, size_t len)
{
        struct tenant_caller caller;

        if (!tenants_authenticate(key, len, &caller))
                return false;
        tenants_set_caller(&caller);
        return true;
}

bool http_authorized(struct lws *wsi)
{
        const struct config *cfg = config_get();
        char value[1024];
        const char *arg;
        bool ok = false;
        int n;

        if (cfg->no_auth)
                return http_authorized_key("", 0);
        n = lws_hdr_copy(wsi, value, sizeof(value), WSI_TOKEN_HTTP_AUTHORIZATION);
        if (n > 0) {
                const char *schemes[] = {"token ", "bearer "};

                for (size_t i = 0; i < 2; i++) {
                        size_t slen = strlen(schemes[i]);

                        if ((size_t)n > slen && strncasecmp(value, schemes[i], slen) == 0) {
                                ok = http_authorized_key(value + slen, (size_t)n - slen);
                                goto out;
                        }
                }
        }
        arg = lws_get_urlarg_by_name(wsi, "token=", value, sizeof(value));
        ok = arg && http_authorized_key(arg, strlen(arg));
out:
        explicit_bzero(value, sizeof(value));
        return ok;
}

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

int http_query_arg(struct lws *wsi, const char *name, char *out, size_t size)
{
        /* Any argument fits: they are all within the request's headers. */
        static char fragment[SERVER_MAX_HEADER_DATA];
        size_t n = strlen(name), vlen;

        for (int i = 0; lws_hdr_copy_fragment(wsi, fragment, sizeof(fragment),
                                              WSI_TOKEN_HTTP_URI_ARGS, i) >= 0;
             i++) {
                if (strncmp(fragment, name, n) != 0 || fragment[n] != '=')
                        continue;
                vlen = strlen(fragment + n + 1);
                if (vlen >= size)
                        return -E2BIG;
                memcpy(out, fragment + n + 1, vlen + 1);
                return 0;
        }
        return -ENOENT;
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

#define STREAM_PIECE (64 * 1024) /* bytes written per writable callback */

static int add_headers(struct lws *wsi, const struct http_request *r, unsigned char **p,
                       unsigned char *end);
static int add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                      unsigned char *end);

static void request_reset(struct http_request *r)
{
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

/* Counts the answer by route class (never the path) and status. */
static void count_request(const struct http_request *r, int status)
{
        char port[16];
        bool sandbox_plane =
            r->wsi && lws_hdr_custom_copy(r->wsi, port, sizeof(port), "e2b-sandbox-port:", 17) > 0;

        metrics_http_request(metrics_route_class(r->path, sandbox_plane), status);
}

void http_stream_start(struct http_request *r, int status, const char *content_type)
{
        if (r->responded)
                return;
        count_request(r, status);
        r->responded = true;
        r->streaming = true;
        r->status = status;
        r->content_type = content_type;
        /* A slow client may fall this far behind before the stream ends. */
        buf_init(&r->out, (size_t)config_get()->max_message_bytes * 2);
        if (r->reading_body)
                r->close_after = true;
        lws_callback_on_writable(r->wsi);
}

size_t http_stream_pending(const struct http_request *r)
{
        return r->out.len - r->out_at;
}

void http_stream_set_limit(struct http_request *r, size_t max)
{
        r->out.max = max;
}

int http_stream_write(struct http_request *r, const void *data, size_t len)
{
        int rc;

        if (!r->streaming || r->stream_ended)
                return -EPIPE;
        if (http_stream_pending(r) + len > r->out.max)
                return -E2BIG;
        /* What was written is dropped from the front once it is most of
         * the buffer: each byte moves at most once, where moving the rest
         * after every piece cost the loop quadratic time behind a slow
         * client. */
        if (r->out_at && (r->out_at >= r->out.len / 2 || r->out.len + len > r->out.max)) {
                memmove(r->out.data, r->out.data + r->out_at, r->out.len - r->out_at);
                r->out.len -= r->out_at;
                r->out_at = 0;
        }
        rc = buf_append(&r->out, data, len);
        if (rc == 0)
                lws_callback_on_writable(r->wsi);
        return rc;
}

int http_stream_write_always(struct http_request *r, const void *data, size_t len)
{
        size_t max = r->out.max;
        int rc;

        r->out.max = SIZE_MAX;
        rc = http_stream_write(r, data, len);
        r->out.max = max;
        return rc;
}

void http_stream_end(struct http_request *r)
{
        if (!r->streaming || r->stream_ended)
                return;
        r->stream_ended = true;
        lws_callback_on_writable(r->wsi);
}

void http_stream_abort(struct http_request *r)
{
        if (!r->streaming || r->stream_ended)
                return;
        r->stream_aborted = true;
        http_stream_end(r);
}

void http_reply_fd(struct http_request *r, int status, const char *content_type, int fd,
                   uint64_t len)
{
        http_stream_start(r, status, content_type);
        r->stream_fd = fd;
        r->stream_left = len;
        r->stream_ended = true;
}

/* Ends a streamed response that has been written whole. */
static int stream_finished(struct lws *wsi, struct http_request *r)
{
        bool close_after = r->close_after || r->stream_fd < 0;

        request_reset(r);
        if (close_after)
                return -1;
        return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* Bytes of a produced stream one request writes per writable callback
 * before the rest of the loop gets its turn: more than a kernel's socket
 * brings in per turn (zio.c), so that a client that reads keeps up. */
#define STREAM_TURN (16 * 1024 * 1024)

/* A chunk's size line: at most 8 hex digits and CRLF. */
#define CHUNK_HEAD 10
/* Its CRLF, and the last chunk "0\r\n\r\n". */
#define CHUNK_TAIL (2 + 5)

/* Writes produced bytes while the client takes them (at most STREAM_TURN
 * at a time), so lws never holds more than a piece of ours. */
static int stream_out_step(struct lws *wsi, struct http_request *r)
{
        static unsigned char piece[LWS_PRE + CHUNK_HEAD + STREAM_PIECE + CHUNK_TAIL];
        size_t written = 0;

        for (;;) {
                size_t n = http_stream_pending(r), at = LWS_PRE + CHUNK_HEAD, len;
                bool last;

                if (n > STREAM_PIECE)
                        n = STREAM_PIECE;
                last = r->stream_ended && http_stream_pending(r) == n;
                if (!n && !last)
                        break;
                if (n)
                        memcpy(piece + at, r->out.data + r->out_at, n);
                r->out_at += n;
                len = n;
                if (r->chunked_out && n) {
                        char head[CHUNK_HEAD + 1];
                        int hlen = snprintf(head, sizeof(head), "%zx\r\n", n);

                        at -= (size_t)hlen;
                        memcpy(piece + at, head, (size_t)hlen);
                        memcpy(piece + at + hlen + n, "\r\n", 2);
                        len += (size_t)hlen + 2;
                }
                /* A cut-short stream never says it ended: no last chunk, and
                 * the connection closes once what came before is written. */
                if (last && r->stream_aborted) {
                        if (len && lws_write(wsi, piece + at, len, LWS_WRITE_HTTP) < (int)len)
                                return -1;
                        request_reset(r);
                        return -1;
                }
                if (last && r->chunked_out) {
                        memcpy(piece + at + len, "0\r\n\r\n", 5);
                        len += 5;
                }
                if (lws_write(wsi, piece + at, len, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) <
                    (int)len)
                        return -1;
                if (last)
                        return stream_finished(wsi, r);
                written += n;
                if (written >= STREAM_TURN || lws_send_pipe_choked(wsi))
                        break;
        }
        if (r->out_at == r->out.len) {
                /* Drained: a burst's buffer is given back rather than kept
                 * for the rest of a long run. */
                size_t max = r->out.max;

                r->out_at = 0;
                if (r->out.cap > STREAM_PIECE) {
                        buf_free(&r->out);
                        buf_init(&r->out, max);
                } else {
                        buf_reset(&r->out);
                }
                if (r->drained)
                        r->drained(r);
        } else {
                lws_callback_on_writable(wsi);
        }
        return 0;
}

/* Whether the request came as HTTP/1.1 (or later): a client that can read
 * a chunked body. lws keeps the request line's version as a token. */
static bool http_version_1_1(struct lws *wsi)
{
        char version[16];

        return lws_hdr_copy(wsi, version, sizeof(version), WSI_TOKEN_HTTP) >= 8 &&
               strncmp(version, "HTTP/1.", 7) == 0 && version[7] >= '1' && version[7] <= '9';
}

/* Writes the next piece of a streamed response. Returns what the lws
 * callback must return. */
static int stream_step(struct lws *wsi, struct http_request *r)
{
        static unsigned char piece[LWS_PRE + STREAM_PIECE];
        size_t n = 0;
        bool last;

        if (!r->headers_sent) {
                unsigned char headers[LWS_PRE + 4096];
                unsigned char *start = headers + LWS_PRE, *p = start;
                unsigned char *end = headers + sizeof(headers) - 1;
                /* A file has a length; a produced stream ends with the
                 * connection. */
                lws_filepos_t length =
                    r->stream_fd >= 0 ? r->stream_left : LWS_ILLEGAL_HTTP_CONTENT_LEN;

                r->chunked_out = r->stream_fd < 0 && http_version_1_1(wsi);
                if (lws_add_http_common_headers(wsi, (unsigned)r->status, r->content_type, length,
                                                &p, end) ||
                    add_headers(wsi, r, &p, end) ||
                    (r->chunked_out && add_header(wsi, "transfer-encoding:", "chunked", &p, end)) ||
                    lws_finalize_write_http_header(wsi, start, &p, end))
                        return -1;
                r->headers_sent = true;
                if (r->stream_fd < 0 || r->stream_left > 0) {
                        lws_callback_on_writable(wsi);
                        return 0;
                }
        }
        if (r->stream_fd >= 0) {
                ssize_t got = 0;

                n = r->stream_left < STREAM_PIECE ? (size_t)r->stream_left : STREAM_PIECE;
                if (n)
                        got = read(r->stream_fd, piece + LWS_PRE, n);
                if (got < 0 || (size_t)got != n)
                        return -1;
                r->stream_left -= n;
                last = r->stream_left == 0;
        } else {
                return stream_out_step(wsi, r);
        }
        if ((n || last) && lws_write(wsi, piece + LWS_PRE, n,
                                     last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n)
                return -1;
        if (last)
                return stream_finished(wsi, r);
        lws_callback_on_writable(wsi);
        return 0;
}

void http_reply_bytes(struct http_request *r, int status, const char *content_type,
                      const char *body, size_t len)
{
        char *pre;

        if (r->responded)
                return;
        buf_free(&r->response);
        buf_init(&r->response, SIZE_MAX);
        if (buf_grow(&r->response, LWS_PRE, &pre) < 0 || buf_append(&r->response, body, len) < 0) {
                status = 500;
                content_type = "application/json";
                buf_free(&r->response);
                buf_init(&r->response, SIZE_MAX);
                (void)!buf_grow(&r->response, LWS_PRE, &pre);
        }
        count_request(r, status);
        r->responded = true;
        r->status = status;
        r->content_type = content_type;
        if (r->reading_body)
                r->close_after = true;
        lws_callback_on_writable(r->wsi);
}

void http_reply_json(struct http_request *r, int status, json_t *body)
{
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

        json_decref(body);
        if (!text) {
                http_reply_error(r, 500, "out of memory");
                return;
        }
        http_reply_bytes(r, status, "application/json", text, strlen(text));
        free(text);
}

static char *error_body(int status, const char *message)
{
        json_t *o = json_pack("{s:s, s:s}", "message", message, "reason", status_phrase(status));
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

        json_decref(o);
        return text;
}

void http_reply_error(struct http_request *r, int status, const char *fmt, ...)
{
        char message[1024];
        char *text;
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        text = error_body(status, message);
        http_reply_bytes(r, status, "application/json", text ? text : "{}",
                         text ? strlen(text) : 2);
        free(text);
}

void http_reply_empty(struct http_request *r, int status)
{
        http_reply_bytes(r, status, NULL, "", 0);
}

static int add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                      unsigned char *end)
{
        return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
                                           (const unsigned char *)value, (int)strlen(value), p,
                                           end);
}

/* CORS: the allowed origin is echoed, and a preflight (OPTIONS) also
 * learns which methods and headers it may use. */
static int add_cors(struct lws *wsi, const char *origin, bool preflight, unsigned char **p,
                    unsigned char *end)
{
        char asked[512];

        if (!origin || !*origin)
                return 0;
        if (add_header(wsi, "access-control-allow-origin:", origin, p, end) ||
            add_header(wsi, "access-control-allow-credentials:", "true", p, end) ||
            add_header(wsi, "vary:", "Origin", p, end))
                return -1;
        if (!preflight)
                return 0;
        if (lws_hdr_custom_copy(wsi, asked, sizeof(asked), "access-control-request-headers:", 31) <=
            0)
                snprintf(asked, sizeof(asked), "Authorization, Content-Type");
        return add_header(wsi,
                          "access-control-allow-methods:", "GET, POST, PUT, PATCH, DELETE, OPTIONS",
                          p, end) ||
                       add_header(wsi, "access-control-allow-headers:", asked, p, end) ||
                       add_header(wsi, "access-control-max-age:", "600", p, end)
                   ? -1
                   : 0;
}

/* The headers of every response, then those the request set (r may be
 * NULL for an error written before there is a request). */
static int add_headers(struct lws *wsi, const struct http_request *r, unsigned char **p,
                       unsigned char *end)
{
        if (add_header(wsi, "cache-control:", "no-store", p, end) ||
            add_header(wsi, "x-content-type-options:", "nosniff", p, end))
                return -1;
        if (!r)
                return 0;
        if (r->csp && (add_header(wsi, "content-security-policy:", r->csp, p, end) ||
                       add_header(wsi, "referrer-policy:", "no-referrer", p, end)))
                return -1;
        if (r->location[0] && add_header(wsi, "location:", r->location, p, end))
                return -1;
        if (r->next_token[0] && add_header(wsi, "x-next-token:", r->next_token, p, end))
                return -1;
        if (r->fleet_missing[0] &&
            add_header(wsi, "x-glovebox-fleet-missing:", r->fleet_missing, p, end))
                return -1;
        /* A page's MCP client reads the session id from the answer. */
        if (r->mcp_session_id[0] &&
            (add_header(wsi, "mcp-session-id:", r->mcp_session_id, p, end) ||
             (r->cors_origin[0] &&
              add_header(wsi, "access-control-expose-headers:", "Mcp-Session-Id", p, end))))
                return -1;
        return add_cors(wsi, r->cors_origin, r->method == HTTP_OPTIONS, p, end);
}

static int write_response(struct lws *wsi, const struct http_request *r, int status,
                          const char *content_type, unsigned char *body, size_t len)
{
        unsigned char headers[LWS_PRE + 4096];
        unsigned char *start = headers + LWS_PRE, *p = start, *end = headers + sizeof(headers) - 1;

        if (lws_add_http_common_headers(wsi, (unsigned)status, content_type, len, &p, end) ||
            add_headers(wsi, r, &p, end) || lws_finalize_write_http_header(wsi, start, &p, end))
                return -1;
        if (len && lws_write(wsi, body, len, LWS_WRITE_HTTP_FINAL) < (int)len)
                return -1;
        return 0;
}

int http_write_error_now(struct lws *wsi, int status, const char *message)
{
        char *text = error_body(status, message);
        size_t len = text ? strlen(text) : 0;
        unsigned char *body = malloc(LWS_PRE + len + 1);
        int rc = -1;

        /* Only refused WebSocket upgrades are answered this way. */
        metrics_http_request("channels", status);
        if (body && text) {
                memcpy(body + LWS_PRE, text, len);
                rc = write_response(wsi, NULL, status, "application/json", body + LWS_PRE, len);
        }
        free(body);
        free(text);
        return rc;
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
        if (http_route_path(wsi, r->path, sizeof(r->path)) < 0) {
                http_reply_error(r, 404, "Not found");
                return false;
        }
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

        request_reset(r);
        r->wsi = wsi;
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
                if (content_length < 0)
                        http_reply_error(r, 400, "Bad Content-Length");
                else
                        router->relay_begin(wsi, r);
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
                        return stream_step(wsi, r);
                rc = write_response(wsi, r, r->status, r->content_type,
                                    (unsigned char *)r->response.data + LWS_PRE,
                                    r->response.len - LWS_PRE);
                request_reset(r);
                if (rc < 0 || close_after)
                        return -1;
                return lws_http_transaction_completed(wsi) ? -1 : 0;
        }
        case LWS_CALLBACK_CLOSED_HTTP:
                request_reset(r);
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
