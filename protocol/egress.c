#include "autoconf.h"

#include "protocol/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int parse_cidr(const char *text, struct egress_rule *out)
{
        char addr[INET_ADDRSTRLEN];
        const char *slash = strchr(text, '/');
        size_t len = slash ? (size_t)(slash - text) : strlen(text);
        unsigned prefix = 32;
        struct in_addr in;

        if (len == 0 || len >= sizeof(addr))
                return -EINVAL;
        memcpy(addr, text, len);
        addr[len] = '\0';
        if (slash) {
                const char *p = slash + 1;

                /* One or two digits, no sign, no spaces: strtoul is too kind. */
                if (!(p[0] >= '0' && p[0] <= '9') ||
                    !(p[1] == '\0' || (p[1] >= '0' && p[1] <= '9' && p[2] == '\0')))
                        return -EINVAL;
                prefix = (unsigned)(p[0] - '0');
                if (p[1])
                        prefix = prefix * 10 + (unsigned)(p[1] - '0');
                if (prefix > 32)
                        return -EINVAL;
        }
        if (inet_pton(AF_INET, addr, &in) != 1)
                return -EINVAL;
        memset(out, 0, sizeof(*out));
        out->prefix = prefix;
        out->addr = ntohl(in.s_addr) & (prefix ? ~0u << (32 - prefix) : 0u);
        return 0;
}

/* Letters, digits, '-' and '_' in labels of 1 to 63, dots between. */
static int parse_domain(const char *text, struct egress_rule *out)
{
        size_t len, label = 0;

        if (strncmp(text, "*.", 2) == 0)
                text += 2;
        len = strlen(text);
        if (len > 0 && text[len - 1] == '.')
                len--;
        if (len == 0 || len > EGRESS_MAX_DOMAIN)
                return -EINVAL;
        memset(out, 0, sizeof(*out));
        out->is_domain = true;
        for (size_t i = 0; i < len; i++) {
                char c = text[i];

                if (c >= 'A' && c <= 'Z')
                        c = (char)(c - 'A' + 'a');
                if (c == '.') {
                        if (label == 0 || text[i - 1] == '-')
                                return -EINVAL;
                        label = 0;
                } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                           (c == '-' && label > 0)) {
                        if (++label > 63)
                                return -EINVAL;
                } else {
                        return -EINVAL;
                }
                out->domain[i] = c;
        }
        if (label == 0 || text[len - 1] == '-')
                return -EINVAL;
        out->domain[len] = '\0';
        /* An all-digit last label is no name (RFC 3696), and would read as
         * an address once written without its trailing dot. */
        if (strspn(out->domain + len - label, "0123456789") == label)
                return -EINVAL;
        return 0;
}

int egress_rule_parse(const char *text, struct egress_rule *out)
{
        const char *last_dot;
        bool numeric = true;

        if (strchr(text, ':'))
                return -EAFNOSUPPORT;
        /* A name whose last label is all digits is an address (or nothing). */
        last_dot = strrchr(text, '.');
        if (last_dot && !last_dot[1])
                numeric = false; /* "example.com.": a name's trailing dot */
        for (const char *p = last_dot ? last_dot + 1 : text; *p && *p != '/'; p++) {
                if (*p < '0' || *p > '9')
                        numeric = false;
        }
        if (numeric || strchr(text, '/'))
                return parse_cidr(text, out);
        return parse_domain(text, out);
}

void egress_rule_format(const struct egress_rule *r, char *out, size_t size)
{
        if (r->is_domain) {
                snprintf(out, size, "%s", r->domain);
                return;
        }
        snprintf(out, size, "%u.%u.%u.%u/%u", r->addr >> 24, (r->addr >> 16) & 255,
                 (r->addr >> 8) & 255, r->addr & 255, r->prefix);
}

bool egress_rule_within(const struct egress_rule *inner, const struct egress_rule *outer)
{
        size_t il, ol;

        if (inner->is_domain != outer->is_domain)
                return false;
        if (!inner->is_domain) {
                uint32_t mask = outer->prefix ? ~0u << (32 - outer->prefix) : 0u;

                return inner->prefix >= outer->prefix && (inner->addr & mask) == outer->addr;
        }
        il = strlen(inner->domain);
        ol = strlen(outer->domain);
        if (il == ol)
                return strcmp(inner->domain, outer->domain) == 0;
        return il > ol && inner->domain[il - ol - 1] == '.' &&
               strcmp(inner->domain + il - ol, outer->domain) == 0;
}
