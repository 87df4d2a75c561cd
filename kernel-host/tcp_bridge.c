#include "autoconf.h"

#include "kernel-host/tcp_bridge.h"
#include "protocol/buf.h"
#include "protocol/hostmsg.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BRIDGE_PROGRAM "glovebox-kernel-bridge"

static char bridge_path[PATH_MAX];

int tcp_bridge_init(void)
{
        if (program_beside_self(BRIDGE_PROGRAM, bridge_path, sizeof(bridge_path)) < 0) {
                bridge_path[0] = '\0';
                return -ENOENT;
        }
        return 0;
}

void tcp_bridge_connection(struct jp_connection *conn, const char *id)
{
        unsigned long h = 5381;

        for (const char *p = id; *p; p++)
                h = h * 33 + (unsigned char)*p;
        snprintf(conn->transport, sizeof(conn->transport), "tcp");
        snprintf(conn->ip, sizeof(conn->ip), "127.0.0.1");
        /* Five in a row from 20000-32499: below Linux's ephemeral range
         * (32768-60999), or the bridge's own connections to a kernel still
         * binding could take one of its ports first. The sandbox's network
         * namespace is its own: only its other kernels could collide. */
        for (int i = 0; i < JP_CHANNEL_COUNT; i++)
                conn->ports[i] = 20000 + (int)(h % 2500) * 5 + i;
}

char **tcp_bridge_argv(char **argv, const char *ipc_prefix, const struct jp_connection *conn)
{
        size_t n = 0, at = 0;
        char **out;

        while (argv && argv[n])
                n++;
        out = bridge_path[0] && argv ? calloc(n + JP_CHANNEL_COUNT + 4, sizeof(char *)) : NULL;
        if (!out)
                goto fail;
        out[at++] = strdup(bridge_path);
        out[at++] = strdup(ipc_prefix);
        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                char pair[32];

                snprintf(pair, sizeof(pair), "%d:%d", HOSTMSG_PORT(i), conn->ports[i]);
                out[at++] = strdup(pair);
        }
        out[at++] = strdup("--");
        for (size_t i = 0; i < at; i++) {
                if (!out[i])
                        goto fail;
        }
        memcpy(out + at, argv, (n + 1) * sizeof(char *));
        free(argv);
        return out;
fail:
        for (size_t i = 0; out && i < at; i++)
                free(out[i]);
        free(out);
        for (size_t i = 0; argv && i < n; i++)
                free(argv[i]);
        free(argv);
        return NULL;
}
