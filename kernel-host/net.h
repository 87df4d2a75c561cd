/* A sandbox's network, when its request asks for egress (DESIGN §4: by
 * default a sandbox has only loopback, and nothing here runs for it).
 *
 * Built from stock tools, run as the kernel-host's children: ip(8) makes a
 * veth pair, one end ("gbe<slot>", 100.127.x.y/30) in the host's network
 * namespace and the other ("eth0") in the sandbox's; nft(8) loads one
 * table per sandbox ("inet glovebox_gbe<slot>") that filters its traffic
 * in the host's forward and input hooks and masquerades it; dnsmasq(8), in
 * a pid namespace of its own so that it dies with the kernel-host however
 * that dies, is the sandbox's only resolver: it answers names within the
 * allowed domains (pinning every address it answers into the table's set,
 * which is then all a domain rule lets through) and NXDOMAIN to the rest.
 *
 * Slots are claimed by creating the link: the kernel refuses a name that
 * another kernel-host took. The veth pair dies with the sandbox's network
 * namespace; the table and the resolver are removed when the sandbox ends,
 * and a killed kernel-host's tables at the next start (net_init). */
#ifndef GLOVEBOX_NET_H
#define GLOVEBOX_NET_H

#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct net_egress {
        struct net_egress *next;
        int slot;        /* -1: no network */
        pid_t keeper;    /* the resolver's pid namespace init; 0: none */
        char ifname[16]; /* host end of the pair */
        char peer[16];   /* sandbox end, until it moves into the sandbox */
        char table[32];
        char host_addr[16];
        char sandbox_addr[16];
        double setup_ms; /* spent in net_prepare and net_attach, for the log */
        bool table_loaded;
};

/* Removes what killed kernel-hosts left: tables whose link is gone, pairs
 * that never reached a sandbox. Logs; never fails. */
void net_init(void);
/* Claims a slot (prefer first, when >= 0 and free: the same addresses
 * again), makes the pair and starts the resolver for policy; fills resolv
 * (the sandbox's /etc/resolv.conf). 0 or -errno with fail filled;
 * net_release still needed. */
int net_prepare(struct net_egress *ne, const struct hostmsg_network *policy, int prefer,
                char *resolv, size_t resolv_size, struct hostmsg_failed *fail);
/* After the sandbox exists: moves the pair's end into its network
 * namespace (netns_fd; init_pid names it to ip), loads the rules, waits
 * for the resolver. 0 or -errno with fail filled; net_release still needed. */
int net_attach(struct net_egress *ne, const struct hostmsg_network *policy, pid_t init_pid,
               int netns_fd, struct hostmsg_failed *fail);
/* Before a memory checkpoint (kernel-host/checkpoint.h): every socket in
 * the sandbox's network namespace (netns_fd) on the sandbox's address is
 * closed (its connections out, by SOCK_DESTROY: ss -K), then all of
 * net_release goes, so the namespace CRIU takes holds nothing of the
 * host's; net_prepare and net_attach give it egress again. 0, or -errno
 * with ne untouched (-EADDRINUSE: a socket could not be closed). */
int net_detach(struct net_egress *ne, int netns_fd);
/* Stops the resolver, removes the table and the pair. Idempotent. */
void net_release(struct net_egress *ne);
/* A child the main loop reaped: true if it was a resolver's keeper. */
bool net_reaped(pid_t pid);

#endif
