/* Connections into a sandbox's own loopback, for the gateway's port proxy.
 *
 * The gateway may run without privileges, and a sandbox's network namespace
 * is reachable only by entering it, which the kernel-host can do. A small
 * child does it: it enters the namespace, connects to 127.0.0.1:port there
 * (a socket stays in the namespace it was made in), and sends the
 * answer, the socket with it, straight to the gateway. The kernel-host
 * itself never changes namespace and never waits for a sandbox's server. */
#ifndef GLOVEBOX_PORTS_H
#define GLOVEBOX_PORTS_H

#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <sys/types.h>

/* At most this many connections are being made at once; more are refused
 * with EAGAIN. */
#define PORTS_MAX_CONNECTING 64
/* Of them, one sandbox's at most: a port that never accepts (its backlog
 * full) holds its connects for CONNECT_TIMEOUT_S each, and must not hold
 * every other sandbox's too. */
#define PORTS_MAX_CONNECTING_PER_SANDBOX 8

/* Starts connecting for req; the answer (HOSTMSG_CONNECTED) goes to link,
 * from the child or, when no child could start, from here. */
void ports_connect(int link, const struct hostmsg_connect *req);
/* Whether pid was one of the children (then it is forgotten); one that
 * ended without answering (status) is answered for, on link. */
bool ports_reaped(int link, pid_t pid, int status);

#endif
