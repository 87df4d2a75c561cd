#include "autoconf.h"

#include "gateway/core/hostcheck.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

int hostcheck_name(const char *authority, char *out, size_t size)
{
        const char *name = authority, *port = NULL;
        bool bracketed = authority[0] == '[';
        size_t len;

        if (bracketed) {
                const char *close = strchr(authority, ']');

                if (!close)
                        return -EINVAL;
                name = authority + 1;
                len = (size_t)(close - name);
                if (close[1] == ':')
                        port = close + 2;
                else if (close[1])
                        return -EINVAL;
        } else {
                const char *colon = strchr(authority, ':');

                len = colon ? (size_t)(colon - authority) : strlen(authority);
                if (colon)
                        port = colon + 1;
        }
        /* An empty port ("host:") is allowed by RFC 3986; anything else
         * must be a port number. */
        if (port && (strlen(port) > 5 || strspn(port, "0123456789") != strlen(port)))
                return -EINVAL;
        /* "localhost." is the same name as "localhost" to a resolver. */
        if (!bracketed && len > 1 && name[len - 1] == '.')
                len--;
        if (len == 0)
                return -EINVAL;
        if (len >= size)
                return -E2BIG;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)name[i];
                bool ok = bracketed ? isxdigit(c) || c == ':' || c == '.'
                                    : isalnum(c) || c == '-' || c == '.' || c == '_';

                if (!ok)
                        return -EINVAL;
                out[i] = (char)tolower(c);
        }
        out[len] = '\0';
        return 0;
}

/* Parses an IPv4 or IPv6 literal into its IPv6 form (IPv4 mapped). */
static bool ip_literal(const char *name, struct in6_addr *addr)
{
        struct in_addr v4;

        if (inet_pton(AF_INET, name, &v4) == 1) {
                memset(addr, 0, sizeof(*addr));
                addr->s6_addr[10] = 0xff;
                addr->s6_addr[11] = 0xff;
                memcpy(&addr->s6_addr[12], &v4, 4);
                return true;
        }
        return inet_pton(AF_INET6, name, addr) == 1;
}

static bool ip_loopback(const struct in6_addr *addr)
{
        return IN6_IS_ADDR_LOOPBACK(addr) ||
               (IN6_IS_ADDR_V4MAPPED(addr) && addr->s6_addr[12] == 127);
}

bool hostcheck_is_loopback(const char *listen_host)
{
        struct in6_addr addr;

        if (strcasecmp(listen_host, "localhost") == 0)
                return true;
        return ip_literal(listen_host, &addr) && ip_loopback(&addr);
}

/* Is name one of the comma-separated entries of list (each normalised as
 * a Host is, so a port or capitals on an entry do not matter)? */
static bool listed(const char *list, const char *name)
{
        const char *p = list;

        while (*p) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);
                char entry[HOSTCHECK_MAX], normal[HOSTCHECK_MAX];

                while (n && *p == ' ') {
                        p++;
                        n--;
                }
                while (n && p[n - 1] == ' ')
                        n--;
                if (n && n < sizeof(entry)) {
                        memcpy(entry, p, n);
                        entry[n] = '\0';
                        if (strcmp(entry, "*") == 0 || strcmp(entry, name) == 0 ||
                            (hostcheck_name(entry, normal, sizeof(normal)) == 0 &&
                             strcmp(normal, name) == 0))
                                return true;
                }
                if (!comma)
                        break;
                p = comma + 1;
        }
        return false;
}

bool hostcheck_allowed(const char *authority, const char *listen_host, const char *allow_list)
{
        char name[HOSTCHECK_MAX], listen[HOSTCHECK_MAX];
        struct in6_addr addr;

        if (listed(allow_list, "*"))
                return true;
        if (hostcheck_name(authority, name, sizeof(name)) < 0)
                return false;
        if (ip_literal(name, &addr)) {
                /* An address cannot be rebound: a page whose origin is an IP
                 * address was served from that address. So a gateway that
                 * listens beyond loopback takes any of them (the machine's
                 * own, or a public one that NAT forwards to it). On loopback,
                 * as Jupyter Server does, only loopback addresses. */
                return ip_loopback(&addr) || !hostcheck_is_loopback(listen_host);
        }
        /* Browsers resolve "localhost" themselves, never through DNS, so
         * no attacker's name server can answer for it. */
        if (strcmp(name, "localhost") == 0)
                return true;
        if (hostcheck_name(listen_host, listen, sizeof(listen)) == 0 && strcmp(name, listen) == 0)
                return true;
        return listed(allow_list, name);
}
