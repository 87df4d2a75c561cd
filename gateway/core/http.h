/* One HTTP request on its way through the gateway: headers checked (base
 * URL, token, origin), body read within --max-body-bytes, handed to the
 * API, and one response written, now or later (a request may wait for a
 * kernel). */
#ifndef GLOVEBOX_HTTP_H
#define GLOVEBOX_HTTP_H

#include "gateway/core/hostcheck.h"
#include "gateway/core/waiter.h"
#include "gateway/core/loop.h"
#include "gateway/core/tenants.h"
#include "protocol/buf.h"
#include "protocol/chunked.h"

#include <jansson.h>
#include <libwebsockets.h>
#include <stdbool.h>

#define HTTP_PATH_MAX 2048
/* Longest Origin read: a scheme, a host name (hostcheck.h) and a port. */
#define HTTP_ORIGIN_MAX (HOSTCHECK_MAX + 16)

enum http_method { HTTP_GET, HTTP_POST, HTTP_PUT, HTTP_PATCH, HTTP_DELETE, HTTP_OPTIONS, HTTP_HEAD,
                   HTTP_OTHER };

struct http_request;

/* A handler that takes the body as it arrives (uploads) instead of having
 * it buffered: data() gets each piece, and may reply early (an error) and
 * return -1 to stop reading. */
typedef int (*http_body_fn)(struct http_request *r, const uint8_t *data, size_t len);

struct http_request {
        struct lws *wsi;
        enum http_method method;
        char path[HTTP_PATH_MAX]; /* below the base URL, without its leading '/' */
        struct buf body;
        bool reading_body;
        bool chunked;       /* Transfer-Encoding: chunked, decoded here */
        struct chunked dechunk;
        struct loop_watch *raw_body; /* a chunked body read straight from the socket */
        http_body_fn body_fn; /* set by api_prepare to stream the body */
        bool responded;
        bool close_after; /* the body was not read: do not reuse the connection */
        /* The access log's (access_log.h): when the request began
         * (monotonic; 0 before begin), the body bytes read and written, and
         * whether its connection went to a relay that logs it itself. */
        double started;
        uint64_t bytes_in, bytes_out;
        bool relayed;
        const char *route_class; /* a literal set before the path is known, or NULL */
        int status;
        const char *content_type;
        char location[HTTP_PATH_MAX];
        char cors_origin[HTTP_ORIGIN_MAX]; /* echoed in Access-Control-Allow-Origin when set */
        char next_token[200];  /* E2B paging (E2B_LIST_TOKEN_MAX): X-Next-Token when set */
        char mcp_session_id[40]; /* MCP: an Mcp-Session-Id header when set */
        char fleet_missing[512]; /* peers left out of a fleet list (fleet.h), when set */
        /* E2B: the sandbox a signed file URL's signature named, set at
         * admission (e2b.h); "" otherwise. */
        char e2b_signed[64];
        const char *csp;       /* a page's Content-Security-Policy (a literal), or NULL */
        struct buf response; /* LWS_PRE bytes of headroom, then the body */
        struct waiter waiter;
        /* Whose request it is, once its credentials are checked: the
         * caller (tenants.h) while any of its code runs. */
        struct tenant_caller caller;
        bool has_caller;

        /* A streamed response: headers now, the body as it is produced. */
        bool streaming;
        bool headers_sent;
        bool stream_ended;
        /* HTTP/1.1: the body goes out in chunks, so that a client can tell
         * a stream cut short (no last chunk) from one that ended. */
        bool chunked_out;
        bool stream_aborted;  /* it ends without its last chunk (http_stream_abort) */
        int stream_fd;       /* a file sent as the body, or -1 */
        uint64_t stream_left; /* its bytes still to send */
        struct buf out;      /* produced; the bytes from out_at on are not yet written */
        size_t out_at;

        /* What the handler keeps with the request; cleanup(r) runs once
         * when the request ends, however it ends (a closed connection
         * included). */
        void *ctx;
        void (*cleanup)(struct http_request *r);
        /* A streamed response's queue was written whole (NULL: nobody
         * asks): a producer that waits for a slow client goes on. */
        void (*drained)(struct http_request *r);
};

/* Called from the lws callback for the HTTP reasons; returns what the
 * callback must return. */
int http_callback(struct lws *wsi, enum lws_callback_reasons reason, struct http_request *r,
                  void *in, size_t len);

/* Who may make a request (the route table's column, gateway/routes.c). */
enum http_access {
        HTTP_ACCESS_ANYONE, /* no credentials: a public GET without a body */
        HTTP_ACCESS_KEY,    /* the token or a tenant's key */
        HTTP_ACCESS_OWN,    /* the route checks its own credentials (router->admit) */
};

/* What the routes (gateway/routes.c) tell the HTTP server, which knows no
 * route of its own: which requests are relayed as they come rather than
 * read, who may make one, and what handles it. */
struct http_router {
        /* A request relayed as it comes (a sandbox's port), its body
         * included, instead of read and handled. */
        bool (*relayed)(struct lws *wsi);
        void (*relay_begin)(struct lws *wsi, struct http_request *r);
        bool (*relay_active)(struct lws *wsi);
        int (*relay_body)(struct lws *wsi, const void *data, size_t len);
        void (*relay_body_done)(struct lws *wsi);
        /* Who may make r (its path and method are set). */
        enum http_access (*access)(struct http_request *r);
        /* HTTP_ACCESS_OWN: whether r may go on; false once answered, or
         * for a 401 the server gives. */
        bool (*admit)(struct http_request *r);
        /* At the headers, as its caller: may set r->body_fn to take the
         * body as it comes, or answer at once. */
        void (*prepare)(struct http_request *r);
        /* Once the body is read (or taken by body_fn), as its caller. */
        void (*handle)(struct http_request *r);
};

/* The routes; set once, before the server runs. */
void http_set_router(const struct http_router *router);

/* Before a WebSocket upgrade of a route that takes a key: the connection's
 * limits, the Host check and the key, and the path below the base URL into
 * path. 0, or the status and message (never sent) of the refusal. */
int http_upgrade_check(struct lws *wsi, char *path, size_t size, char *message, size_t msize);
/* After it: the Origin check (403, -1) and the connection's admission. */
int http_upgrade_admit(struct lws *wsi);
/* The route class (metrics.h) of a WebSocket upgrade on wsi: "channels",
 * "terminals", "ports", ... */
const char *http_upgrade_route_class(struct lws *wsi);

enum http_origin_kind {
        HTTP_ORIGIN_NONE,    /* no Origin header: not a browser */
        HTTP_ORIGIN_SAME,    /* the gateway's own origin */
        HTTP_ORIGIN_ALLOWED, /* another origin that --allow-origin names */
        HTTP_ORIGIN_DENIED,
};

/* Classifies the request's Origin; an allowed one is copied to out (for
 * the CORS headers) when out is given. */
enum http_origin_kind http_origin(struct lws *wsi, char *out, size_t size);
/* The Host check of every route and WebSocket upgrade (see hostcheck.h).
 * When it fails, name gets the refused name for the message. */
bool http_host_allowed(struct lws *wsi, char *name, size_t size);
/* Logs a refused Host, at most once a minute. */
void http_log_refused_host(const char *name);
/* The key check of every route and WebSocket upgrade: true when the
 * request carries a key in force (Authorization: token/Bearer, or
 * ?token=), which then becomes the caller (tenants.h) for the rest of the
 * callback. */
bool http_authorized(struct lws *wsi);
/* The same for a key found elsewhere (E2B's X-API-Key). */
bool http_authorized_key(const char *key, size_t len);
/* A request header of a name not known in advance: name in lower case
 * without its ':'. A non-zero return stops the walk and is returned. */
typedef int (*http_header_fn)(const char *name, const char *value, void *arg);
/* Calls fn for each header of r whose name begins with prefix (lower
 * case, e.g. "x-metadata-"), once per name (the first value). 0, fn's
 * non-zero return, or -ENOMEM. */
int http_custom_headers(struct http_request *r, const char *prefix, http_header_fn fn, void *arg);
/* Copies the request path below the base URL into out (no leading '/').
 * -ENOENT when the path is outside the base URL. */
int http_route_path(struct lws *wsi, char *out, size_t size);
/* The value of the first query argument called name ("path", no '='),
 * decoded once, as it came, into out: 0, -ENOENT when there is none,
 * -E2BIG when it does not fit. Every argument is looked at, however long:
 * lws_get_urlarg_by_name stops at the first one longer than its buffer,
 * which hid those after it (a long metadata filter hid nextToken). */
int http_query_arg(struct lws *wsi, const char *name, char *out, size_t size);

/* Removes every member whose value is null from the object v and the
 * objects within it: clients (the E2B Python SDK among them) send null for
 * an optional field they leave unset, which means the same as leaving it
 * out. */
void http_drop_nulls(json_t *v);
/* The request body as a JSON object, nulls dropped; NULL after replying
 * 400. */
json_t *http_parse_body(struct http_request *r);

void http_reply_json(struct http_request *r, int status, json_t *body); /* steals body */
void http_reply_error(struct http_request *r, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void http_reply_empty(struct http_request *r, int status);
/* content_type must outlive the response (a literal). */
void http_reply_bytes(struct http_request *r, int status, const char *content_type,
                      const char *body, size_t len);
/* Starts a streamed response: status and headers go out at once (without
 * a length: the body ends when the connection closes). */
void http_stream_start(struct http_request *r, int status, const char *content_type);
/* Queues body bytes; -E2BIG when the client is too far behind (more than
 * the stream's limit would be waiting for it). */
int http_stream_write(struct http_request *r, const void *data, size_t len);
/* Queues a few closing bytes even past the limit (an end line must not be
 * lost to a slow client). */
int http_stream_write_always(struct http_request *r, const void *data, size_t len);
/* Bytes queued and not yet written to the client. */
size_t http_stream_pending(const struct http_request *r);
/* Sets how many bytes may wait for the client (default: twice
 * --max-message-bytes). */
void http_stream_set_limit(struct http_request *r, size_t max);
/* Ends the streamed body once everything queued is written. */
void http_stream_end(struct http_request *r);
/* Ends it the way a connection to a server that died ends: what is queued
 * is written, then the connection closes without the body's last chunk, so
 * that an HTTP/1.1 client sees the body cut short (E2B's SDKs then ask
 * whether the sandbox is still there). An HTTP/1.0 client cannot tell. */
void http_stream_abort(struct http_request *r);
/* Replies with len bytes read from fd (taken over, closed at the end), in
 * pieces as the client takes them. */
void http_reply_fd(struct http_request *r, int status, const char *content_type, int fd,
                   uint64_t len);
/* Writes a JSON error response at once (used to refuse an upgrade; counted
 * as route class "channels"). */
int http_write_error_now(struct lws *wsi, int status, const char *message);

#endif
