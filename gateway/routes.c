/* The gateway's one route table, and the glue that hands each request,
 * upgrade and relayed connection to the family that serves it. Only this
 * file and main.c know the families (README "Layout"). */
#include "autoconf.h"

#include "gateway/routes.h"
#include "gateway/core/config.h"
#include "gateway/core/fleet.h"
#include "gateway/core/http.h"
#include "gateway/core/server.h"
#include "gateway/core/tenants.h"
#include "gateway/e2b/e2b.h"
#include "gateway/jupyter/channels.h"
#include "gateway/jupyter/snapshots_api.h"
#include "gateway/jupyter/kernels_api.h"
#include "gateway/jupyter/page.h"
#include "gateway/kernels/kernels.h"
#include "gateway/mcp/mcp.h"
#include "gateway/ops/monitor.h"
#include "gateway/ports/port_relay.h"
#include "gateway/ports/ports.h"
#include "gateway/terminals/terminals.h"

#include <stdio.h>
#include <string.h>

#define ROUTE_MAX_SEGMENTS 8
#define ROUTE_MAX_ARGS     3

/* Who may call a route. */
enum route_who {
        ANYONE, /* no credentials: the page, probes */
        TENANT, /* the token or any tenant's key */
        ADMIN,  /* the token, or a key marked admin */
        OWN,    /* credentials of the route's own (E2B's API key, a sandbox's token) */
};

#define ANY (-1) /* any method: the handler answers the others */

/* What a pattern's '*' (one segment) and '**' (the rest, maybe nothing)
 * matched, in order. */
struct route_args {
        const char *arg[ROUTE_MAX_ARGS];
        size_t n;
        char storage[HTTP_PATH_MAX];
};

typedef void (*route_fn)(struct http_request *r, const struct route_args *a);

/* One route: a method, a path pattern below the base URL (segments; "*"
 * one, "**" the rest; a trailing '/' of the path is ignored), who may
 * call it, what runs at its headers (NULL: its body is read first, within
 * --max-body-bytes; else that function may take the body as it comes) and
 * what handles it. The first that matches serves. */
struct route {
        int method;
        const char *pattern;
        enum route_who who;
        route_fn at_headers;
        route_fn handler;
};

/* ---- the families' routes, adapted to the table ----------------------- */

static void page(struct http_request *r, const struct route_args *a)
{
        (void)a;
        page_serve(r);
}

static void health(struct http_request *r, const struct route_args *a)
{
        (void)a;
        monitor_health(r);
}

static void server_metrics(struct http_request *r, const struct route_args *a)
{
        (void)a;
        monitor_metrics(r);
}

static void e2b_headers(struct http_request *r, const struct route_args *a)
{
        (void)a;
        e2b_prepare(r);
}

static void e2b(struct http_request *r, const struct route_args *a)
{
        (void)a;
        e2b_handle(r);
}

static void mcp(struct http_request *r, const struct route_args *a)
{
        (void)a;
        mcp_handle(r);
}

static void version(struct http_request *r, const struct route_args *a)
{
        (void)a;
        jupyter_version(r);
}

static void status(struct http_request *r, const struct route_args *a)
{
        (void)a;
        jupyter_status(r);
}

static void kernelspecs(struct http_request *r, const struct route_args *a)
{
        (void)a;
        jupyter_kernelspecs(r);
}

static void kernelspec(struct http_request *r, const struct route_args *a)
{
        jupyter_kernelspec(r, a->arg[0]);
}

static void kernelspec_resource(struct http_request *r, const struct route_args *a)
{
        jupyter_kernelspec_resource(r, a->arg[0], a->arg[1]);
}

static void kernels(struct http_request *r, const struct route_args *a)
{
        (void)a;
        jupyter_kernels(r);
}

static void kernel(struct http_request *r, const struct route_args *a)
{
        jupyter_kernel(r, a->arg[0], a->n > 1 ? a->arg[1] : NULL);
}

static void files_headers(struct http_request *r, const struct route_args *a)
{
        (void)a;
        jupyter_files_prepare(r);
}

static void files(struct http_request *r, const struct route_args *a)
{
        (void)a;
        jupyter_files(r);
}

/* A kernel of the caller's for another family's route below it, or NULL
 * once answered (a paused kernel's answer, or 404). */
static struct kernel *kernel_for(struct http_request *r, const char *id, const char *what)
{
        struct kernel *k;

        if (jupyter_kernel_paused(r, id, what))
                return NULL;
        k = kernel_find(id);
        if (!k)
                http_reply_error(r, 404, "Kernel does not exist: %.64s", id);
        return k;
}

static void kernel_ports(struct http_request *r, const struct route_args *a)
{
        struct kernel *k = kernel_for(r, a->arg[0], "ports");

        if (k)
                ports_api(r, k);
}

static void kernel_metrics(struct http_request *r, const struct route_args *a)
{
        struct kernel *k = kernel_for(r, a->arg[0], "metrics");

        if (k)
                monitor_kernel_metrics(r, k);
}

static void snapshots(struct http_request *r, const struct route_args *a)
{
        jupyter_snapshots(r, a->n ? a->arg[0] : NULL);
}

static void sessions(struct http_request *r, const struct route_args *a)
{
        jupyter_sessions(r, a->n ? a->arg[0] : NULL);
}

static void terminals(struct http_request *r, const struct route_args *a)
{
        terminals_handle(r, a->n ? a->arg[0] : NULL);
}

static void fleet(struct http_request *r, const struct route_args *a)
{
        fleet_handle(r, a->n ? a->arg[0] : NULL);
}

/* ---- the table ------------------------------------------------------------ */

static const struct route routes[] = {
    /* The web page, public (core refuses anything but a GET without a body). */
    {ANY, "", ANYONE, NULL, page},
    {ANY, "static/**", ANYONE, NULL, page},
    /* Probes carry no token: the answer without one says only ok or
     * unhealthy and which checks fail (ops/monitor.h). */
    {HTTP_GET, "api/health", ANYONE, NULL, health},
    /* E2B: its SDKs send the control plane and the sandbox plane to one
     * URL and tell them apart by the E2b-Sandbox-Port header, so the family
     * routes its own; signed file URLs come on the origin, as /files. */
    {ANY, "e2b/**", OWN, e2b_headers, e2b},
    {ANY, "files", OWN, e2b_headers, e2b},
    {ANY, "mcp", TENANT, NULL, mcp},
    /* The whole server's metrics cover every tenant. */
    {HTTP_GET, "metrics", ADMIN, NULL, server_metrics},
    /* Jupyter Server's API. */
    {HTTP_GET, "api", TENANT, NULL, version},
    {HTTP_GET, "api/status", TENANT, NULL, status},
    {HTTP_GET, "api/kernelspecs", TENANT, NULL, kernelspecs},
    {HTTP_GET, "api/kernelspecs/*", TENANT, NULL, kernelspec},
    {HTTP_GET, "kernelspecs/*/*", TENANT, NULL, kernelspec_resource},
    {ANY, "api/kernels", TENANT, NULL, kernels},
    {ANY, "api/kernels/*/files", TENANT, files_headers, files},
    {ANY, "api/kernels/*/files/**", TENANT, files_headers, files},
    {ANY, "api/kernels/*/ports", TENANT, NULL, kernel_ports},
    {HTTP_GET, "api/kernels/*/metrics", TENANT, NULL, kernel_metrics},
    {ANY, "api/kernels/*", TENANT, NULL, kernel},
    {ANY, "api/kernels/*/*", TENANT, NULL, kernel},
    {ANY, "api/snapshots", TENANT, NULL, snapshots},
    {ANY, "api/snapshots/*", TENANT, NULL, snapshots},
    {ANY, "api/sessions", TENANT, NULL, sessions},
    {ANY, "api/sessions/*", TENANT, NULL, sessions},
    {ANY, "api/terminals", TENANT, NULL, terminals},
    {ANY, "api/terminals/*", TENANT, NULL, terminals},
    /* Several hosts: a peer's list of what it holds (core/fleet.h). */
    {ANY, "api/fleet", TENANT, NULL, fleet},
    {ANY, "api/fleet/*", TENANT, NULL, fleet},
};

/* Whether path matches pattern, its '*' and '**' parts into a. */
static bool match(const char *pattern, const char *path, struct route_args *a)
{
        char *p = a->storage;
        size_t len;

        snprintf(a->storage, sizeof(a->storage), "%s", path);
        len = strlen(a->storage);
        if (len && a->storage[len - 1] == '/')
                a->storage[len - 1] = '\0';
        a->n = 0;
        for (;;) {
                size_t plen = strcspn(pattern, "/");
                char *slash;

                if (plen == 2 && strncmp(pattern, "**", 2) == 0) {
                        if (a->n == ROUTE_MAX_ARGS)
                                return false;
                        a->arg[a->n++] = p ? p : "";
                        return true;
                }
                if (!p)
                        return plen == 0 && !*pattern;
                slash = strchr(p, '/');
                if (slash)
                        *slash = '\0';
                if (plen == 1 && *pattern == '*') {
                        if (!*p || a->n == ROUTE_MAX_ARGS)
                                return false;
                        a->arg[a->n++] = p;
                } else if (strlen(p) != plen || strncmp(p, pattern, plen) != 0) {
                        return false;
                }
                p = slash ? slash + 1 : NULL;
                pattern += plen;
                if (*pattern == '/')
                        pattern++;
                else if (p)
                        return false; /* more path than pattern */
                else
                        return true;
        }
}

/* The route of r: the first whose pattern and method match, else NULL. */
static const struct route *route_of(const struct http_request *r, struct route_args *a)
{
        for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
                if ((routes[i].method == ANY || routes[i].method == (int)r->method) &&
                    match(routes[i].pattern, r->path, a))
                        return &routes[i];
        }
        return NULL;
}

static enum http_access route_access(struct http_request *r)
{
        struct route_args a;
        const struct route *rt = route_of(r, &a);

        if (!rt)
                return HTTP_ACCESS_KEY;
        return rt->who == ANYONE ? HTTP_ACCESS_ANYONE
               : rt->who == OWN  ? HTTP_ACCESS_OWN
                                 : HTTP_ACCESS_KEY;
}

static void prepare(struct http_request *r)
{
        struct route_args a;
        const struct route *rt = route_of(r, &a);

        if (rt && rt->at_headers)
                rt->at_headers(r, &a);
}

static void handle(struct http_request *r)
{
        struct route_args a;
        const struct route *rt = route_of(r, &a);
        const struct tenant_caller *caller = tenants_caller();

        if (!rt)
                http_reply_error(r, 404, "No route %s", r->path);
        else if (rt->who == ADMIN && !(caller && caller->admin))
                http_reply_error(r, 403, "The server's metrics need an admin key");
        else
                rt->handler(r, &a);
}

static bool relay_active(struct lws *wsi)
{
        return port_relay_active(wsi);
}

static const struct http_router router = {
    .relayed = ports_wanted,
    .relay_begin = ports_begin,
    .relay_active = relay_active,
    .relay_body = port_relay_body,
    .relay_body_done = port_relay_body_done,
    .access = route_access,
    .admit = e2b_admit,
    .prepare = prepare,
    .handle = handle,
};

/* ---- upgrades: kernels' channels, terminals, ports ---------------------- */

/* An upgraded connection of protocol 0: a kernel's channels or a
 * terminal's socket, decided once it is established. */
struct socket_state {
        bool terminal;
        struct channel_conn channel;
        struct terminal_conn term;
};

static bool terminal_path(const char *path)
{
        struct route_args a;

        return match("terminals/websocket/*", path, &a);
}

static int confirm_upgrade(struct lws *wsi)
{
        char path[HTTP_PATH_MAX], message[256];
        int status;

        if (ports_wanted(wsi))
                return ports_confirm_upgrade(wsi);
        /* The same checks, in the same order, as an HTTP request's. */
        status = http_upgrade_check(wsi, path, sizeof(path), message, sizeof(message));
        if (status == 404)
                snprintf(message, sizeof(message), "No such kernel");
        if (status) {
                http_write_error_now(wsi, status, message);
                return 1;
        }
        if (terminal_path(path) ? !terminals_socket_exists(path) : !channels_exists(path)) {
                http_write_error_now(wsi, 404,
                                     terminal_path(path) ? "No such terminal" : "No such kernel");
                return 1;
        }
        return http_upgrade_admit(wsi) < 0 ? 1 : 0;
}

static int websocket(struct lws *wsi, enum lws_callback_reasons reason, void *state, void *in,
                     size_t len, bool v1)
{
        struct socket_state *s = state;
        char path[HTTP_PATH_MAX];

        if (v1)
                return channels_callback(wsi, reason, &s->channel, in, len, RELAY_V1);
        if (reason == LWS_CALLBACK_ESTABLISHED)
                s->terminal = http_route_path(wsi, path, sizeof(path)) == 0 && terminal_path(path);
        if (s->terminal)
                return terminals_callback(wsi, reason, &s->term, in, len);
        return channels_callback(wsi, reason, &s->channel, in, len, RELAY_JSON);
}

static const struct server_sockets sockets = {
    .confirm_upgrade = confirm_upgrade,
    .websocket = websocket,
    .state_size = sizeof(struct socket_state),
    .closed = port_relay_closed,
};

const struct server_sockets *routes_init(void)
{
        http_set_router(&router);
        return &sockets;
}
