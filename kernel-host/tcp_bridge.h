/* Kernels that bind TCP only (ijavascript, tslab): their connection file
 * names loopback ports of the sandbox's own network namespace, and they run
 * under glovebox-kernel-bridge (kernel-host/bridge.c), which listens on the
 * ipc sockets the gateway connects to and joins them to those ports. */
#ifndef GLOVEBOX_TCP_BRIDGE_H
#define GLOVEBOX_TCP_BRIDGE_H

#include "protocol/connfile.h"

/* Finds the bridge beside this program; 0 or -ENOENT (then TCP-only
 * kernels fail to start, saying so). Call once at start. */
int tcp_bridge_init(void);
/* Turns conn (an ipc one) into a loopback TCP one. The ports come from id,
 * so that the kernels sharing a sandbox (an E2B sandbox's contexts) differ. */
void tcp_bridge_connection(struct jp_connection *conn, const char *id);
/* argv (taken) run under the bridge, which listens on ipc_prefix-<port>
 * and joins each to conn's TCP port; NULL (argv freed) without memory or
 * a bridge. */
char **tcp_bridge_argv(char **argv, const char *ipc_prefix, const struct jp_connection *conn);

#endif
