#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <errno.h>
#include <limits.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"

/* The sandbox's network namespace at a checkpoint. */

char checkpoint_action[PATH_MAX];

/* ---- the gateway's connections, closed at both ends ----------------------------- */

/* CRIU cannot take a connected Unix socket whose other end is not in the
 * dump: the gateway's connections to the kernel, which it closes before
 * asking for a checkpoint, until the kernel's ZeroMQ thread has seen each
 * end and closed its own. The gateway used to wait a fixed 20 ms for that;
 * the dump's worker now waits for it to be true, reading the sandbox's
 * Unix sockets (sock_diag, in its network namespace) every millisecond:
 * done when each connected one's peer is one of them. */

#define SOCKETS_MAX   8192
#define PEERS_WAIT_MS 500

struct unix_sockets {
        uint32_t ino[SOCKETS_MAX], peer[SOCKETS_MAX];
        size_t n;
};

/* Every Unix socket of this network namespace with its peer's inode (0:
 * none). 0, or -1 (more than SOCKETS_MAX count as an error). */
static int unix_sockets_read(int nl, struct unix_sockets *out)
{
        struct {
                struct nlmsghdr nlh;
                struct unix_diag_req req;
        } ask = {
            .nlh = {.nlmsg_len = sizeof(ask),
                    .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
            .req = {.sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_show = UDIAG_SHOW_PEER},
        };
        static char buf[32768];

        out->n = 0;
        if (send(nl, &ask, sizeof(ask), 0) != (ssize_t)sizeof(ask))
                return -1;
        for (;;) {
                ssize_t len = recv(nl, buf, sizeof(buf), 0);
                struct nlmsghdr *h = (struct nlmsghdr *)buf;

                if (len <= 0)
                        return -1;
                for (; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
                        struct unix_diag_msg *m = NLMSG_DATA(h);
                        struct rtattr *a;
                        int alen;

                        if (h->nlmsg_type == NLMSG_DONE)
                                return 0;
                        if (h->nlmsg_type == NLMSG_ERROR || out->n == SOCKETS_MAX)
                                return -1;
                        out->ino[out->n] = m->udiag_ino;
                        out->peer[out->n] = 0;
                        alen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
                        for (a = (struct rtattr *)(m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
                                if (a->rta_type == UNIX_DIAG_PEER &&
                                    RTA_PAYLOAD(a) >= (int)sizeof(uint32_t))
                                        memcpy(&out->peer[out->n], RTA_DATA(a), sizeof(uint32_t));
                        }
                        out->n++;
                }
        }
}

static int by_value(const void *a, const void *b)
{
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

        return x < y ? -1 : x > y;
}

/* Whether every socket's peer is one of them (or none). */
static bool peers_inside(struct unix_sockets *s)
{
        qsort(s->ino, s->n, sizeof(s->ino[0]), by_value);
        for (size_t i = 0; i < s->n; i++) {
                if (s->peer[i] && !bsearch(&s->peer[i], s->ino, s->n, sizeof(s->ino[0]), by_value))
                        return false;
        }
        return true;
}

void checkpoint_await_unix_peers(int netns_fd)
{
        static struct unix_sockets sockets;
        struct timespec tick = {0, 1000 * 1000};
        int status, nl;
        pid_t pid;

        /* A child of its own in the sandbox's network namespace: the
         * worker's stays the host's, where criu runs. */
        pid = fork();
        if (pid == 0) {
                if (setns(netns_fd, CLONE_NEWNET) < 0)
                        _exit(1);
                nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
                if (nl < 0)
                        _exit(1);
                for (int ms = 0; ms < PEERS_WAIT_MS; ms++) {
                        if (unix_sockets_read(nl, &sockets) < 0)
                                _exit(1);
                        if (peers_inside(&sockets))
                                _exit(0);
                        nanosleep(&tick, NULL);
                }
                _exit(2);
        }
        /* However it ended, criu is tried: it says what it cannot take. */
        while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
}

/* ---- a namespace left out of the checkpoint ----------------------------------- */

/* A sandbox without egress has lo alone in its network namespace, as its
 * creation made it: nothing there a dump must keep but the sockets, which
 * CRIU takes with their processes. Its dump leaves the namespace out
 * (--empty-ns net), where saving and restoring its devices, addresses,
 * routes, rules and tables took about 35 and 25 ms; the restore gets a new
 * namespace from CRIU, owned by the restored user namespace as the old one
 * was, whose lo is down: CRIU runs glovebox-criu-action at each step
 * (criu_action_main.c), which brings lo up there at setup-namespaces,
 * before any socket is restored. */

void checkpoint_netns_init(void)
{
        if (program_beside_self(ACTION_PROGRAM, checkpoint_action, PATH_MAX) < 0) {
                checkpoint_action[0] = '\0';
                log_info("no " ACTION_PROGRAM " beside the kernel-host: checkpoints keep "
                         "the sandbox's network namespace whole");
        }
}
