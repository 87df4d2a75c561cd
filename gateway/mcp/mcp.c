/* The MCP endpoint: the Streamable HTTP transport, JSON-RPC 2.0, and the
 * sessions, each mapped to one kernel (and so one sandbox). The tools are
 * in mcp_tools.c. */
#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/kernels/start.h"
#include "gateway/core/fleet.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "gateway/mcp/mcp.h"
#include "gateway/core/tenants.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MCP_LATEST_VERSION "2025-06-18"

/* JSON-RPC's error codes, and the SDKs' own for a session. */
#define RPC_PARSE_ERROR      -32700
#define RPC_INVALID_REQUEST  -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS   -32602
#define RPC_INTERNAL_ERROR   -32603
#define RPC_SERVER_ERROR     -32000
#define RPC_NO_SESSION       -32001

static const char *const versions[] = {"2025-03-26", "2025-06-18"};

struct mcp_session {
        struct mcp_session *next;
        char id[JP_UUID_SIZE];
        char kernel_id[JP_UUID_SIZE]; /* "" until the first tool call */
        char owner[KEYS_NAME_MAX];    /* the tenant whose key initialized it */
        double active_at;             /* monotonic seconds of its last request */
        unsigned calls;               /* tools/call under way */
};

static struct mcp_session *sessions;
static size_t session_count;
static lws_sorted_usec_list_t expiry_timer;
static bool expiry_started;

bool mcp_route(const char *path)
{
        return strcmp(path, "mcp") == 0 || strcmp(path, "mcp/") == 0;
}

/* ---- answers ------------------------------------------------------------- */

/* A JSON-RPC response with an error, at HTTP status. id may be NULL (JSON
 * null: the request's id could not be read). */
static void reply_rpc_error(struct http_request *r, int status, json_t *id, int code,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void reply_rpc_error(struct http_request *r, int status, json_t *id, int code,
                            const char *fmt, ...)
{
        char message[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        http_reply_json(r, status,
                        json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                                  id ? id : json_null(), "error", "code", code, "message",
                                  message));
}

static void reply_rpc_result(struct http_request *r, json_t *id, json_t *result)
{
        http_reply_json(r, 200,
                        json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result",
                                  result ? result : json_object()));
}

/* ---- sessions ------------------------------------------------------------ */

/* A session the caller may reach: another tenant's is not found. */
static struct mcp_session *session_find(const char *id)
{
        for (struct mcp_session *s = sessions; s; s = s->next) {
                if (strcmp(s->id, id) == 0 && tenants_may_reach(s->owner))
                        return s;
        }
        return NULL;
}

/* Ends s and shuts its kernel (and so its sandbox) down; calls still
 * running in it end with the kernel. */
static void session_end(struct mcp_session *s, const char *why)
{
        struct kernel *k = s->kernel_id[0] ? kernel_find_any(s->kernel_id) : NULL;

        for (struct mcp_session **link = &sessions; *link; link = &(*link)->next) {
                if (*link == s) {
                        *link = s->next;
                        break;
                }
        }
        session_count--;
        log_info("MCP session ended (%s)%s", why, k ? "; shutting its kernel down" : "");
        if (k)
                kernel_shutdown(k, NULL);
        free(s);
}

/* When sessions end on their own: at the idle culler's rule (a session
 * that never started a kernel, or whose kernel it has already taken, is
 * over once it has been idle for --cull-idle-timeout; its kernel, if any,
 * is culled by the same rule in kernels.c); and, culling or not, a
 * session that never started its kernel after
 * --mcp-unused-session-timeout, since an initialize costs nothing and
 * would otherwise hold a place under --mcp-max-sessions for ever. */
static double expiry_interval_ms(void)
{
        const struct config *cfg = config_get();
        double every = cfg->mcp_unused_session_timeout / 4;

        if (cfg->cull_idle_timeout > 0 && cfg->cull_interval < every)
                every = cfg->cull_interval;
        return every * 1000.0;
}

static void on_expiry(lws_sorted_usec_list_t *sul)
{
        const struct config *cfg = config_get();
        double now = loop_now();
        struct mcp_session *s = sessions, *next;

        (void)sul;
        for (; s; s = next) {
                double idle = now - s->active_at;

                next = s->next;
                if (s->calls)
                        continue;
                if (cfg->cull_idle_timeout > 0 && idle > cfg->cull_idle_timeout)
                        session_end(s, "idle");
                else if (!s->kernel_id[0] && idle > cfg->mcp_unused_session_timeout)
                        session_end(s, "unused");
        }
        if (sessions)
                loop_timer_start(&expiry_timer, on_expiry, expiry_interval_ms());
        else
                expiry_started = false;
}

static struct mcp_session *session_new(void)
{
        struct mcp_session *s = calloc(1, sizeof(*s));

        if (!s || fleet_new_uuid(s->id) < 0) {
                free(s);
                return NULL;
        }
        s->active_at = loop_now();
        snprintf(s->owner, sizeof(s->owner), "%s", tenants_owner_now());
        s->next = sessions;
        sessions = s;
        session_count++;
        if (!expiry_started) {
                expiry_started = true;
                loop_timer_start(&expiry_timer, on_expiry, expiry_interval_ms());
        }
        return s;
}

/* The sessions owner holds. */
static size_t sessions_of(const char *owner)
{
        size_t n = 0;

        for (struct mcp_session *s = sessions; s; s = s->next)
                n += strcmp(s->owner, owner) == 0;
        return n;
}

/* How many sessions the caller's key may hold: an admin (and the
 * gateway's own token) any number under the gateway's bound. */
static int64_t per_key_cap(void)
{
        const struct config *cfg = config_get();
        const struct tenant_caller *c = tenants_caller();

        if (!c || c->admin)
                return INT64_MAX;
        if (cfg->mcp_max_sessions_per_key > 0)
                return cfg->mcp_max_sessions_per_key;
        return cfg->mcp_max_sessions / 4 > 0 ? cfg->mcp_max_sessions / 4 : 1;
}

void mcp_shutdown(void)
{
        loop_timer_stop(&expiry_timer);
        while (sessions)
                session_end(sessions, "the gateway is shutting down");
}

/* The session a request names in Mcp-Session-Id; NULL after answering
 * 400 (none named) or 404 (unknown, ended, or its kernel gone). */
static struct mcp_session *request_session(struct http_request *r, json_t *id)
{
        char value[64];
        int n = lws_hdr_custom_copy(r->wsi, value, sizeof(value), "mcp-session-id:", 15);
        struct mcp_session *s;

        if (n <= 0) {
                reply_rpc_error(r, 400, id, RPC_SERVER_ERROR,
                                "Bad Request: an Mcp-Session-Id header is required (send "
                                "initialize first)");
                return NULL;
        }
        s = session_find(value);
        if (s && s->kernel_id[0] && !kernel_find_any(s->kernel_id)) {
                /* Culled, or deleted through the kernels API: the session
                 * was its sandbox, so it is over; the client starts anew. */
                session_end(s, "its kernel is gone");
                s = NULL;
        }
        if (!s) {
                reply_rpc_error(r, 404, id, RPC_NO_SESSION,
                                "Session not found (ended or expired): initialize a new one");
                return NULL;
        }
        s->active_at = loop_now();
        return s;
}

static bool version_supported(const char *v)
{
        for (size_t i = 0; v && i < sizeof(versions) / sizeof(versions[0]); i++) {
                if (strcmp(v, versions[i]) == 0)
                        return true;
        }
        return false;
}

/* ---- tool calls ---------------------------------------------------------- */

static void call_free(struct mcp_call *call)
{
        json_decref(call->id);
        json_decref(call->arguments);
        free(call);
}

static struct mcp_session *call_session(struct mcp_call *call)
{
        return session_find(call->session_id);
}

/* The client left before the answer (or the request ended after it). */
static void on_call_gone(struct http_request *r)
{
        struct mcp_call *call = r->ctx;
        struct mcp_session *s = call_session(call);

        r->ctx = NULL;
        call->r = NULL;
        if (s && s->calls)
                s->calls--;
        if (!call->answered && call->abandon)
                call->abandon(call);
        call_free(call);
}

void mcp_call_result(struct mcp_call *call, json_t *content, json_t *structured, bool is_error)
{
        json_t *result;

        if (call->answered || !call->r) {
                json_decref(content);
                json_decref(structured);
                return;
        }
        call->answered = true;
        result = json_pack("{s:o, s:b}", "content", content ? content : json_array(), "isError",
                           is_error);
        if (result && structured)
                json_object_set_new(result, "structuredContent", structured);
        else
                json_decref(structured);
        reply_rpc_result(call->r, call->id, result);
}

void mcp_call_fail(struct mcp_call *call, const char *fmt, ...)
{
        char text[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        mcp_call_result(call, json_pack("[{s:s, s:s}]", "type", "text", "text", text), NULL, true);
}

static struct mcp_call *call_of(struct waiter *w)
{
        struct http_request *r = lws_container_of(w, struct http_request, waiter);

        return r->ctx;
}

static void on_kernel_ready(struct waiter *w, void *subject, int status,
                            const char *message)
{
        struct kernel *k = subject;
        struct mcp_call *call = call_of(w);

        if (status) {
                mcp_call_fail(call, "The session's python3 kernel is not available: %s",
                              message ? message : "it failed");
                return;
        }
        kernel_touch(k);
        mcp_tools_run(call, k);
}

/* The session's kernel, started now at its first tool call; NULL after
 * failing the call. */
static struct kernel *session_kernel(struct mcp_session *s, struct mcp_call *call)
{
        const struct jp_kernelspec *ks;
        struct kernel *k;
        int rc;

        if (s->kernel_id[0])
                return kernel_find(s->kernel_id);
        ks = jp_kernelspec_find(kernels_specs(), "python3");
        if (!ks) {
                mcp_call_fail(call, "This gateway has no python3 kernelspec");
                return NULL;
        }
        rc = start_plain_kernel(ks, NULL, &k);
        if (rc == -EAGAIN) {
                mcp_call_fail(call,
                              "Kernel limit of %lld reached (--max-kernels): no sandbox "
                              "for this session",
                              (long long)config_get()->max_kernels);
                return NULL;
        }
        if (rc < 0) {
                mcp_call_fail(call, "Cannot start the session's kernel: %s", strerror(-rc));
                return NULL;
        }
        snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", k->id);
        klog_info(k->id, "started for an MCP session");
        return k;
}

static void tools_call(struct http_request *r, struct mcp_session *s, json_t *id, json_t *params)
{
        json_t *jname = json_object_get(params, "name");
        json_t *args = json_object_get(params, "arguments");
        const char *name = json_string_value(jname);
        struct mcp_call *call;
        struct kernel *k;
        char err[256];

        if (!json_is_object(params) || !name) {
                reply_rpc_error(r, 200, id, RPC_INVALID_PARAMS,
                                "tools/call needs params {\"name\": string, \"arguments\"?: "
                                "object}");
                return;
        }
        if (args && !json_is_object(args) && !json_is_null(args)) {
                reply_rpc_error(r, 200, id, RPC_INVALID_PARAMS, "\"arguments\" must be an object");
                return;
        }
        args = json_is_object(args) ? json_incref(args) : json_object();
        if (mcp_tools_check(name, args, err, sizeof(err)) < 0) {
                reply_rpc_error(r, 200, id, RPC_INVALID_PARAMS, "%s", err);
                json_decref(args);
                return;
        }
        call = calloc(1, sizeof(*call));
        if (!call) {
                json_decref(args);
                reply_rpc_error(r, 500, id, RPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        call->r = r;
        call->id = json_incref(id);
        call->arguments = args;
        snprintf(call->tool, sizeof(call->tool), "%s", name);
        snprintf(call->session_id, sizeof(call->session_id), "%s", s->id);
        r->ctx = call;
        r->cleanup = on_call_gone;
        s->calls++;
        k = session_kernel(s, call);
        if (!k)
                return;
        kernel_touch(k);
        r->waiter.done = on_kernel_ready;
        kernel_when_ready(k, &r->waiter);
}

/* ---- JSON-RPC ------------------------------------------------------------ */

static json_t *initialize_result(const char *asked)
{
        return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
                         version_supported(asked) ? asked : MCP_LATEST_VERSION, "capabilities",
                         "tools", "listChanged", false, "serverInfo", "name", "glovebox", "title",
                         "Glovebox", "version", PACKAGE_VERSION, "instructions",
                         "Each MCP session is one Linux sandbox with a Python kernel (its "
                         "variables persist across run_code calls) and files under "
                         "/home/user; run_command runs bash in the same sandbox. The sandbox "
                         "has no network unless the operator allowed it.");
}

static void initialize(struct http_request *r, json_t *id, json_t *params)
{
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        struct mcp_session *s;

        if (!json_is_object(params) || !asked) {
                reply_rpc_error(r, 400, id, RPC_INVALID_PARAMS,
                                "initialize needs params with a \"protocolVersion\" string");
                return;
        }
        if ((int64_t)session_count >= config_get()->mcp_max_sessions) {
                reply_rpc_error(r, 503, id, RPC_SERVER_ERROR,
                                "MCP session limit of %lld reached (--mcp-max-sessions)",
                                (long long)config_get()->mcp_max_sessions);
                return;
        }
        if ((int64_t)sessions_of(tenants_owner_now()) >= per_key_cap()) {
                reply_rpc_error(r, 429, id, RPC_SERVER_ERROR,
                                "MCP session limit of %lld per key reached "
                                "(--mcp-max-sessions-per-key): end one (DELETE) first",
                                (long long)per_key_cap());
                return;
        }
        s = session_new();
        if (!s) {
                reply_rpc_error(r, 500, id, RPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        log_info("MCP session started (protocol %s)", asked);
        snprintf(r->mcp_session_id, sizeof(r->mcp_session_id), "%s", s->id);
        reply_rpc_result(r, id, initialize_result(asked));
}

/* A request's id: a string or an integer (MCP allows no null). */
static bool id_valid(json_t *id)
{
        return json_is_string(id) || json_is_integer(id);
}

static void post(struct http_request *r)
{
        json_error_t jerr;
        json_t *msg = json_loadb(r->body.data, r->body.len, JSON_DECODE_ANY, &jerr);
        json_t *id, *params;
        const char *method;
        char version[32];
        struct mcp_session *s;
        bool notification;

        if (!msg) {
                reply_rpc_error(r, 400, NULL, RPC_PARSE_ERROR, "Parse error: %s", jerr.text);
                return;
        }
        if (json_is_array(msg)) {
                reply_rpc_error(r, 400, NULL, RPC_INVALID_REQUEST,
                                "Invalid Request: JSON-RPC batches are not supported; send one "
                                "message per POST");
                goto out;
        }
        id = json_object_get(msg, "id");
        notification = json_is_object(msg) && !id;
        if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "jsonrpc")) ||
            strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0 ||
            (id && !id_valid(id))) {
                reply_rpc_error(r, 400, id_valid(id) ? id : NULL, RPC_INVALID_REQUEST,
                                "Invalid Request: not a JSON-RPC 2.0 message (\"jsonrpc\": "
                                "\"2.0\", a string or integer \"id\", a \"method\")");
                goto out;
        }
        method = json_string_value(json_object_get(msg, "method"));
        params = json_object_get(msg, "params");
        if (!method) {
                /* A response to a request of ours: we send none, so it
                 * answers nothing, but it is accepted as the spec says. */
                if (id && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
                        http_reply_empty(r, 202);
                        goto out;
                }
                reply_rpc_error(r, 400, id, RPC_INVALID_REQUEST,
                                "Invalid Request: \"method\" must be a string");
                goto out;
        }
        if (params && !json_is_object(params) && !json_is_null(params)) {
                reply_rpc_error(r, notification ? 400 : 200, id, RPC_INVALID_PARAMS,
                                "\"params\" must be an object");
                goto out;
        }
        if (strcmp(method, "initialize") == 0) {
                if (notification)
                        reply_rpc_error(r, 400, NULL, RPC_INVALID_REQUEST,
                                        "initialize must be a request (with an id)");
                else
                        initialize(r, id, params);
                goto out;
        }
        s = request_session(r, id);
        if (!s)
                goto out;
        if (lws_hdr_custom_copy(r->wsi, version, sizeof(version), "mcp-protocol-version:", 21) >
                0 &&
            !version_supported(version)) {
                reply_rpc_error(r, 400, id, RPC_SERVER_ERROR,
                                "Bad Request: unsupported MCP-Protocol-Version %s", version);
                goto out;
        }
        if (notification) {
                /* notifications/initialized, notifications/cancelled, ...:
                 * nothing to do for any of them. */
                http_reply_empty(r, 202);
        } else if (strcmp(method, "ping") == 0) {
                reply_rpc_result(r, id, json_object());
        } else if (strcmp(method, "tools/list") == 0) {
                reply_rpc_result(r, id, json_pack("{s:o}", "tools", mcp_tools_list()));
        } else if (strcmp(method, "tools/call") == 0) {
                tools_call(r, s, id, params);
        } else {
                reply_rpc_error(r, 200, id, RPC_METHOD_NOT_FOUND, "Method not found: %.64s",
                                method);
        }
out:
        json_decref(msg);
}

static void delete_session(struct http_request *r)
{
        struct mcp_session *s = request_session(r, NULL);

        if (!s)
                return;
        session_end(s, "the client closed it");
        http_reply_empty(r, 204);
}

void mcp_handle(struct http_request *r)
{
        switch (r->method) {
        case HTTP_POST:
                post(r);
                break;
        case HTTP_DELETE:
                delete_session(r);
                break;
        case HTTP_GET:
                /* No server-initiated messages: no stream to listen to. */
                http_reply_error(r, 405,
                                 "This MCP server offers no stream at GET; POST "
                                 "JSON-RPC messages");
                break;
        default:
                http_reply_error(r, 405,
                                 "Use POST (or DELETE to end a session) on the MCP "
                                 "endpoint");
        }
}
