#include "autoconf.h"

#include "gateway/core/server.h"
#include "gateway/core/access_log.h"
#include "gateway/core/tenants.h"
#include "gateway/core/conns.h"
#include "gateway/core/http.h"
#include "gateway/core/loop.h"
#include "protocol/log.h"
#include "protocol/wsv1.h"

#include <errno.h>
#include <linux/tcp.h>
#include <stddef.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const struct server_sockets *sockets;

/* A WebSocket's access line, written at its close (access_log.h). */
struct ws_access {
        double started; /* 0: not established */
        const char *route;
        char tenant[KEYS_NAME_MAX];
};

/* Protocol 0 serves plain HTTP and, after an upgrade without a subprotocol,
 * the JSON WebSocket format, so its per-connection data holds both: the
 * request, then the upgraded connection's state (server_sockets). */
struct http_or_ws {
        struct http_request http;
        struct ws_access access;
        max_align_t ws[]; /* sockets->state_size bytes */
};

/* Protocol 1's: the upgraded connection's state only. */
struct ws_only {
        struct ws_access access;
        max_align_t ws[]; /* sockets->state_size bytes */
};

/* The socket's bytes each way, as TCP counted them (the handshake and
 * framing included; under TLS, the encrypted bytes): the families write
 * their frames themselves, so this is where every byte is seen. */
static void socket_bytes(struct lws *wsi, uint64_t *in, uint64_t *out)
{
        struct tcp_info info;
        socklen_t len = sizeof(info);

        *in = *out = 0;
        memset(&info, 0, sizeof(info));
        if (getsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_INFO, &info, &len) < 0)
                return;
        *in = info.tcpi_bytes_received;
        *out = info.tcpi_bytes_acked;
}

/* Around the routes' WebSocket callback: an established connection is
 * noted (its route class and the tenant its family authenticated), a
 * closed one logged. */
static int websocket(struct lws *wsi, enum lws_callback_reasons reason, struct ws_access *access,
                     void *state, void *in, size_t len, bool v1)
{
        int rc = sockets->websocket(wsi, reason, state, in, len, v1);
        const struct tenant_caller *caller;
        struct access_record a = {.method = "GET", .status = 101};

        if (reason == LWS_CALLBACK_ESTABLISHED && rc == 0) {
                caller = tenants_caller();
                access->started = access_log_now();
                access->route = http_upgrade_route_class(wsi);
                snprintf(access->tenant, sizeof(access->tenant), "%s", caller ? caller->name : "");
        } else if (reason == LWS_CALLBACK_CLOSED && access->started > 0) {
                a.route = access->route;
                a.started = access->started;
                a.tenant = access->tenant;
                socket_bytes(wsi, &a.bytes_in, &a.bytes_out);
                access->started = 0;
                access_log_write(wsi, &a);
        }
        return rc;
}

static int dispatch_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
        struct http_or_ws *conn = user;

        switch (reason) {
        case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
                /* Nonzero closes the connection at once. */
                return conns_accepted(wsi) < 0 ? -1 : 0;
        case LWS_CALLBACK_WSI_DESTROY:
                /* lws sends every wsi's end here (protocol 0), raw files
                 * and WebSocket ones included. */
                conns_closed(wsi);
                sockets->closed(wsi);
                return 0;
        case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
                return sockets->confirm_upgrade(wsi);
        case LWS_CALLBACK_HTTP:
        case LWS_CALLBACK_HTTP_BODY:
        case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        case LWS_CALLBACK_HTTP_WRITEABLE:
        case LWS_CALLBACK_CLOSED_HTTP:
                return conn ? http_callback(wsi, reason, &conn->http, in, len) : 0;
        case LWS_CALLBACK_ESTABLISHED:
        case LWS_CALLBACK_RECEIVE:
        case LWS_CALLBACK_SERVER_WRITEABLE:
        case LWS_CALLBACK_CLOSED:
                return websocket(wsi, reason, &conn->access, conn->ws, in, len, false);
        default:
                return lws_callback_http_dummy(wsi, reason, user, in, len);
        }
}

static int dispatch_v1(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
        struct ws_only *conn = user;

        switch (reason) {
        case LWS_CALLBACK_ESTABLISHED:
        case LWS_CALLBACK_RECEIVE:
        case LWS_CALLBACK_SERVER_WRITEABLE:
        case LWS_CALLBACK_CLOSED:
                return conn ? websocket(wsi, reason, &conn->access, conn->ws, in, len, true) : 0;
        default:
                return 0;
        }
}

/* Every callback of a connection starts as nobody: what it looks up it
 * finds only once a key has been checked (tenants.h). */
static int callback_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
        struct tenant_scope saved;
        int rc;

        tenants_scope_enter(&saved);
        rc = dispatch_http(wsi, reason, user, in, len);
        tenants_scope_restore(&saved);
        return rc;
}

static int callback_v1(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
        struct tenant_scope saved;
        int rc;

        tenants_scope_enter(&saved);
        rc = dispatch_v1(wsi, reason, user, in, len);
        tenants_scope_restore(&saved);
        return rc;
}

#define SERVER_KEEPALIVE_S 75 /* as nginx's keepalive_timeout */
#define RX_BUFFER (64 * 1024)
/* The most libwebsockets hands the socket in one send(). Its default, the
 * receive buffer's 64 KiB, would send a large WebSocket fragment 64 KiB at
 * a time, copying all the rest aside first and then sending it one turn of
 * the loop per 64 KiB; this lets the socket take what it has room for and
 * only the remainder be copied. (A fragment is at most 16 MiB: channels.c.) */
#define TX_PACKET (16 * 1024 * 1024)

/* Their per-connection sizes are the routes': set in server_create. */
static struct lws_protocols protocols[] = {
        {"http", callback_http, 0, RX_BUFFER, 0, NULL, TX_PACKET},
        {JP_WSV1_PROTOCOL, callback_v1, 0, RX_BUFFER, 0, NULL, TX_PACKET},
        {LOOP_PROTOCOL_NAME, loop_protocol_callback, 0, 0, 0, NULL, 0},
        {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void lws_log(int level, const char *line)
{
        char text[512];
        size_t len = strlen(line);

        /* lws ends its lines with a newline; ours add one. */
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                len--;
        snprintf(text, sizeof(text), "%.*s", (int)len, line);
        /* Clients can make libwebsockets complain at will (bad handshakes,
         * broken frames): limited like any repeated warning. */
        static struct log_limit errors, warnings;

        if (level & LLL_ERR)
                LOG_LIMITED(&errors, LOG_LEVEL_ERROR, NULL, "lws: %s", text);
        else
                log_warn_limited(&warnings, "lws: %s", text);
}

/* libwebsockets takes a numeric address or an interface name: given a host
 * name it logs "DOESN'T EXIST" and serves nowhere, and a port in use shows
 * only as its own errors. So the --listen host is resolved here (an IPv4
 * address first, as "localhost" means to most clients), and a trial bind
 * says in plain words why the gateway cannot listen before lws tries. */
static int listen_address(const struct config *cfg, char *numeric, size_t size)
{
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
        struct addrinfo *res, *ai, *pick;
        char port[16];
        int one = 1, err = 0, fd, rc;

        snprintf(port, sizeof(port), "%d", cfg->port);
        rc = getaddrinfo(cfg->host, port, &hints, &res);
        if (rc != 0) {
                log_error("cannot listen on %s: %s", cfg->listen,
                          rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
                return -1;
        }
        pick = res;
        for (ai = res; ai; ai = ai->ai_next) {
                if (ai->ai_family == AF_INET) {
                        pick = ai;
                        break;
                }
        }
        rc = getnameinfo(pick->ai_addr, pick->ai_addrlen, numeric, (socklen_t)size, NULL, 0,
                         NI_NUMERICHOST);
        fd = socket(pick->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (rc != 0 || fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, pick->ai_addr, pick->ai_addrlen) < 0)
                err = rc != 0 ? EINVAL : errno;
        if (fd >= 0)
                close(fd);
        freeaddrinfo(res);
        if (err == EADDRINUSE)
                log_error("cannot listen on %s: address already in use (another server has that "
                          "port: stop it or choose another with --listen HOST:PORT)",
                          cfg->listen);
        else if (err == EADDRNOTAVAIL)
                log_error("cannot listen on %s: %s is not an address of this machine", cfg->listen,
                          numeric);
        else if (err)
                log_error("cannot listen on %s: %s", cfg->listen, strerror(err));
        return err ? -1 : 0;
}

struct lws_context *server_create(const struct config *cfg, const struct server_sockets *given)
{
        struct lws_context_creation_info info;
        struct lws_context *ctx;
        char address[NI_MAXHOST];

        if (listen_address(cfg, address, sizeof(address)) < 0)
                return NULL;

        sockets = given;
        protocols[0].per_session_data_size = sizeof(struct http_or_ws) + given->state_size;
        protocols[1].per_session_data_size = sizeof(struct ws_only) + given->state_size;
        lws_set_log_level(LLL_ERR | LLL_WARN, lws_log);
        memset(&info, 0, sizeof(info));
        info.port = cfg->port;
        info.iface = address;
        info.protocols = protocols;
        info.gid = (gid_t)-1;
        info.uid = (uid_t)-1;
        info.server_string = "glovebox";
        info.max_http_header_data = SERVER_MAX_HEADER_DATA;
        /* Requests that wait for a kernel hold a header table until they are
         * answered; allow many at once. */
        info.max_http_header_pool = 4096;
        info.pt_serv_buf_size = 64 * 1024;
        info.timeout_secs = 120;
        /* An idle keep-alive connection is kept longer than clients keep
         * theirs (httpx's pool 5 s, Node's 4 s): at lws's own 5 s a client
         * reusing its connection at that moment sent its request into our
         * close ("Server disconnected without sending a response"). */
        info.keepalive_timeout = SERVER_KEEPALIVE_S;
        info.options = strchr(address, ':') ? 0 : LWS_SERVER_OPTION_DISABLE_IPV6;
        if (*cfg->certfile) {
                info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
                info.ssl_cert_filepath = cfg->certfile;
                info.ssl_private_key_filepath = cfg->keyfile;
                /* HTTP/1.1 only: over HTTP/2 libwebsockets gives handlers no
                 * header it does not know by name, and E2B's SDKs, which
                 * offer h2 on TLS, authenticate with X-API-Key and
                 * X-Access-Token and route with E2b-Sandbox-Id. */
                info.alpn = "http/1.1";
        }
        ctx = lws_create_context(&info);
        if (!ctx)
                log_error("cannot listen on %s", cfg->listen);
        return ctx;
}
