#include "autoconf.h"

#include "gateway/core/conns.h"
#include "gateway/core/loop.h"
#include "protocol/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define BUCKETS 1024

/* The connections of one client address. */
struct conn_addr {
        /* IPv6 form: an IPv4 address mapped, an IPv6 one cut to its /64 (a
         * single IPv6 host commonly holds a whole /64: counting its
         * addresses one by one would be no cap at all). */
        unsigned char key[16];
        char text[INET6_ADDRSTRLEN + 4];
        unsigned open;   /* every connection from here, refused ones too */
        unsigned served; /* those not refused */
        bool warned;     /* a refusal was logged since it last had none open */
        struct conn_addr *next;
};

struct conn {
        struct lws *wsi; /* the network connection's */
        struct conn_addr *addr;
        int refusal; /* 0, 429 or 503 */
        bool admitted;
        lws_sorted_usec_list_t deadline;
        struct conn *next;
};

static struct {
        const struct config *cfg;
        struct conn *by_wsi[BUCKETS];
        struct conn_addr *by_addr[BUCKETS];
        unsigned served; /* connections not refused, in all */
} conns;

void conns_init(const struct config *cfg)
{
        conns.cfg = cfg;
}

static size_t wsi_bucket(const struct lws *wsi)
{
        uintptr_t v = (uintptr_t)wsi;

        return (size_t)((v >> 4) ^ (v >> 14)) % BUCKETS;
}

static size_t addr_bucket(const unsigned char key[16])
{
        uint32_t h = 2166136261u;

        for (size_t i = 0; i < 16; i++)
                h = (h ^ key[i]) * 16777619u;
        return h % BUCKETS;
}

static struct conn *find(struct lws *wsi)
{
        struct conn *c;

        if (!wsi)
                return NULL;
        /* An HTTP/2 stream is counted as the connection it travels on. */
        wsi = lws_get_network_wsi(wsi);
        for (c = conns.by_wsi[wsi_bucket(wsi)]; c; c = c->next) {
                if (c->wsi == wsi)
                        return c;
        }
        return NULL;
}

/* The client address of wsi's socket as a key (see struct conn_addr). */
static int peer_key(struct lws *wsi, unsigned char key[16], char *text, size_t size)
{
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char ip[INET6_ADDRSTRLEN];

        if (getpeername(lws_get_socket_fd(wsi), (struct sockaddr *)&ss, &len) < 0)
                return -errno;
        memset(key, 0, 16);
        if (ss.ss_family == AF_INET) {
                const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;

                key[10] = key[11] = 0xff;
                memcpy(key + 12, &sin->sin_addr, 4);
        } else if (ss.ss_family == AF_INET6) {
                const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;

                memcpy(key, &sin6->sin6_addr, 16);
                if (!IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr))
                        memset(key + 8, 0, 8);
        } else {
                return -EAFNOSUPPORT;
        }
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)key)) {
                inet_ntop(AF_INET, key + 12, ip, sizeof(ip));
                snprintf(text, size, "%s", ip);
        } else {
                inet_ntop(AF_INET6, key, ip, sizeof(ip));
                snprintf(text, size, "%s/64", ip);
        }
        return 0;
}

static struct conn_addr *addr_get(const unsigned char key[16], const char *text)
{
        size_t b = addr_bucket(key);
        struct conn_addr *a;

        for (a = conns.by_addr[b]; a; a = a->next) {
                if (memcmp(a->key, key, 16) == 0)
                        return a;
        }
        a = calloc(1, sizeof(*a));
        if (!a)
                return NULL;
        memcpy(a->key, key, 16);
        snprintf(a->text, sizeof(a->text), "%s", text);
        a->next = conns.by_addr[b];
        conns.by_addr[b] = a;
        return a;
}

static void addr_put(struct conn_addr *a)
{
        struct conn_addr **p;

        if (a->open)
                return;
        for (p = &conns.by_addr[addr_bucket(a->key)]; *p; p = &(*p)->next) {
                if (*p == a) {
                        *p = a->next;
                        free(a);
                        return;
                }
        }
}

static void on_deadline(lws_sorted_usec_list_t *sul)
{
        struct conn *c = lws_container_of(sul, struct conn, deadline);

        /* Debug only: under a flood this would be a line per connection. */
        log_debug("closing a connection from %s: no request with credentials within %g s",
                  c->addr->text, conns.cfg->unauthenticated_timeout);
        /* Not lws_set_timeout(): lws moves a connection's one timeout
         * itself as a request comes in, which would undo this. A socket
         * shut down both ways reads as hung up, and lws closes it in
         * whatever state it is (TLS handshake, headers, keep-alive). */
        if (shutdown(lws_get_socket_fd(c->wsi), SHUT_RDWR) < 0)
                log_debug("shutdown: %s", strerror(errno));
}

int conns_accepted(struct lws *wsi)
{
        const struct config *cfg = conns.cfg;
        unsigned char key[16];
        char text[INET6_ADDRSTRLEN + 4];
        struct conn_addr *a;
        struct conn *c;
        size_t b;
        int rc;

        rc = peer_key(wsi, key, text, sizeof(text));
        if (rc < 0)
                return rc;
        a = addr_get(key, text);
        c = a ? calloc(1, sizeof(*c)) : NULL;
        if (!c) {
                if (a)
                        addr_put(a);
                return -ENOMEM;
        }
        /* Refused connections live until they have their answer, or their
         * deadline: without this ceiling a client could still hold a
         * descriptor per connection it opens. */
        if (a->open >= 2 * (uint64_t)cfg->max_connections_per_address) {
                free(c);
                return -EMFILE;
        }
        if (a->served >= (uint64_t)cfg->max_connections_per_address)
                c->refusal = 429;
        else if (conns.served >= (uint64_t)cfg->max_connections)
                c->refusal = 503;
        if (c->refusal && !a->warned) {
                a->warned = true;
                log_warn("refusing connections from %s: %s", a->text,
                         c->refusal == 429 ? "it holds --max-connections-per-address"
                                           : "the gateway holds --max-connections");
        }
        c->wsi = wsi;
        c->addr = a;
        a->open++;
        if (!c->refusal) {
                a->served++;
                conns.served++;
        }
        b = wsi_bucket(wsi);
        c->next = conns.by_wsi[b];
        conns.by_wsi[b] = c;
        loop_timer_start(&c->deadline, on_deadline, cfg->unauthenticated_timeout * 1000.0);
        return 0;
}

void conns_closed(struct lws *wsi)
{
        struct conn **p;

        /* Not find(): at its destruction a wsi no longer knows its network
         * parent, and only network connections are in the table. */
        for (p = &conns.by_wsi[wsi_bucket(wsi)]; *p; p = &(*p)->next) {
                struct conn *c = *p;

                if (c->wsi != wsi)
                        continue;
                *p = c->next;
                loop_timer_stop(&c->deadline);
                c->addr->open--;
                if (!c->refusal) {
                        c->addr->served--;
                        conns.served--;
                }
                if (!c->addr->open)
                        c->addr->warned = false;
                addr_put(c->addr);
                free(c);
                return;
        }
}

int conns_refusal(struct lws *wsi, char *msg, size_t size)
{
        const struct conn *c = find(wsi);

        if (!c || !c->refusal)
                return 0;
        if (c->refusal == 429)
                snprintf(msg, size,
                         "Too many connections from %s: at most %lld at once "
                         "(--max-connections-per-address)",
                         c->addr->text, (long long)conns.cfg->max_connections_per_address);
        else
                snprintf(msg, size,
                         "The gateway is serving its most connections, %lld "
                         "(--max-connections); try again later",
                         (long long)conns.cfg->max_connections);
        return c->refusal;
}

void conns_admitted(struct lws *wsi)
{
        struct conn *c = find(wsi);

        if (c && !c->admitted && !c->refusal) {
                c->admitted = true;
                loop_timer_stop(&c->deadline);
        }
}

void conns_public(struct lws *wsi)
{
        struct conn *c = find(wsi);

        if (c && !c->admitted && !c->refusal)
                loop_timer_start(&c->deadline, on_deadline,
                                 conns.cfg->unauthenticated_timeout * 1000.0);
}

void conns_free(void)
{
        for (size_t b = 0; b < BUCKETS; b++) {
                while (conns.by_wsi[b]) {
                        struct conn *c = conns.by_wsi[b];

                        conns.by_wsi[b] = c->next;
                        loop_timer_stop(&c->deadline);
                        free(c);
                }
                while (conns.by_addr[b]) {
                        struct conn_addr *a = conns.by_addr[b];

                        conns.by_addr[b] = a->next;
                        free(a);
                }
        }
        conns.served = 0;
}
