/* A request's answer: whole (JSON, an error, bytes) or streamed (a body
 * produced as it goes, or a file), with the headers every response gets
 * and CORS's. */
#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/core/access_log.h"
#include "gateway/core/config.h"
#include "gateway/core/http_internal.h"
#include "gateway/core/metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#define STREAM_PIECE (64 * 1024) /* bytes written per writable callback */

static int add_headers(struct lws *wsi, const struct http_request *r, unsigned char **p,
                       unsigned char *end);
static int add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                      unsigned char *end);

const char *http_route_class(const struct http_request *r)
{
        char port[16];
        bool sandbox_plane;

        if (r->route_class)
                return r->route_class;
        sandbox_plane =
            r->wsi && lws_hdr_custom_copy(r->wsi, port, sizeof(port), "e2b-sandbox-port:", 17) > 0;
        return metrics_route_class(r->path, sandbox_plane);
}

/* Counts the answer by route class (never the path) and status. */
static void count_request(const struct http_request *r, int status)
{
        metrics_http_request(http_route_class(r), status);
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

        http_request_reset(r);
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
                        r->bytes_out += n;
                        http_request_reset(r);
                        return -1;
                }
                if (last && r->chunked_out) {
                        memcpy(piece + at + len, "0\r\n\r\n", 5);
                        len += 5;
                }
                if (lws_write(wsi, piece + at, len, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) <
                    (int)len)
                        return -1;
                r->bytes_out += n;
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
int http_stream_step(struct lws *wsi, struct http_request *r)
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
        r->bytes_out += n;
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
        /* Said when the connection ends after this answer (its body was not
         * read whole): a client would otherwise send its next request on
         * it and see the connection close without an answer. */
        if (r->close_after && add_header(wsi, "connection:", "close", p, end))
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

int http_write_response(struct lws *wsi, const struct http_request *r, int status,
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
        const char *route = http_upgrade_route_class(wsi);
        int rc = -1;

        /* Only refused WebSocket upgrades are answered this way. */
        metrics_http_request(route, status);
        access_log_write(wsi, &(struct access_record){.method = "GET",
                                                      .route = route,
                                                      .status = status,
                                                      .bytes_out = len,
                                                      .tenant = NULL});
        if (body && text) {
                memcpy(body + LWS_PRE, text, len);
                rc =
                    http_write_response(wsi, NULL, status, "application/json", body + LWS_PRE, len);
        }
        free(body);
        free(text);
        return rc;
}
