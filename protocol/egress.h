/* Egress rules, the words of a sandbox's network policy: an IPv4 address
 * or CIDR block ("198.51.100.7", "203.0.113.0/24") or a domain name
 * ("example.com", which also covers its subdomains; "*.example.com" means
 * the same). The gateway parses requests and the operator's lists with
 * these, and the kernel-host parses them again before any of them reaches
 * a firewall rule or a resolver's command line: a rule that parses here is
 * plain digits, dots and name characters. */
#ifndef GLOVEBOX_EGRESS_H
#define GLOVEBOX_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_MAX_DOMAIN 253
#define EGRESS_MAX_RULES  64 /* per list, operator's or a request's */

struct egress_rule {
        bool is_domain;
        uint32_t addr; /* host byte order, host bits cleared */
        unsigned prefix;
        char domain[EGRESS_MAX_DOMAIN + 1]; /* lowercase, no trailing dot */
};

/* Parses one rule. 0, -EAFNOSUPPORT for an IPv6 address (not supported
 * yet), -EINVAL for anything else that is not a rule. */
int egress_rule_parse(const char *text, struct egress_rule *out);
/* The rule in its normal form: "a.b.c.d/n" or the domain. */
void egress_rule_format(const struct egress_rule *r, char *out, size_t size);
/* Whether everything inner reaches is also reached by outer: a block
 * inside a block, a name equal to or below a name. A domain never lies
 * within a block, nor a block within a domain. */
bool egress_rule_within(const struct egress_rule *inner, const struct egress_rule *outer);

#endif
