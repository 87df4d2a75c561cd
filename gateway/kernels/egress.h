/* The operator's egress policy and the requests within it.
 *
 * The operator says what may ever be reached (--egress-allow: CIDR blocks
 * and domain names; nothing by default) and what never (--egress-deny,
 * which always wins); the kernel-host adds what is denied unless the
 * operator names it in --egress-allow: loopback, link-local (with the
 * metadata address 169.254.169.254), the host's own addresses. A request
 * asks for egress within that ({"network": ...} on /api/kernels, an E2B
 * sandbox's allow_internet_access and network.allowOut/denyOut): it can
 * only narrow the operator's lists, and asking for anything outside them
 * is an error naming it. */
#ifndef GLOVEBOX_EGRESS_GATEWAY_H
#define GLOVEBOX_EGRESS_GATEWAY_H

#include "gateway/core/config.h"
#include "protocol/hostmsg.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Parses and checks the operator's lists (at start; --check-config).
 * 0, or -EINVAL after printing the reason to stderr. */
int egress_configure(const struct config *cfg);
/* Whether the operator allows any egress at all. */
bool egress_enabled(void);
/* Fills net with the egress a request asks for: allow_out NULL means all
 * the operator allows, else a JSON array of rules within it; deny_out NULL
 * or an array of rules. field names the request's fields in errors
 * ("network"). 0 (net owns its lists: egress_network_clear), or -EINVAL
 * with err saying which rule and why. */
int egress_request(json_t *allow_out, json_t *deny_out, const char *field,
                   struct hostmsg_network *net, char *err, size_t errlen);
/* /api/kernels' "network" (network is that member or NULL): absent, null
 * or false: none (net->enabled false); true: all the operator allows;
 * {"allowOut"?: [...], "denyOut"?: [...]}: narrowed. 0 or -EINVAL with err. */
int egress_kernel_request(json_t *network, struct hostmsg_network *net, char *err, size_t errlen);
void egress_network_clear(struct hostmsg_network *net);
/* {"allowOut": [...], "denyOut": [...], "rateKiB": n, "maxConnections": n}:
 * the network in effect, as the API reports it. New reference. */
json_t *egress_describe(const struct hostmsg_network *net);
/* A deep copy (lists and all); 0 or -ENOMEM. */
int egress_network_copy(const struct hostmsg_network *from, struct hostmsg_network *to);

#endif
