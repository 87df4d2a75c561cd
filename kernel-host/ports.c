#include "autoconf.h"

#include "kernel-host/ports.h"
#include "kernel-host/spawn.h"
#include "protocol/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long a child waits for the sandbox's server to accept (a full
 * listen backlog drops the handshake): past it the gateway answers 504. */
#define CONNECT_TIMEOUT_S 5

/* The children connecting, and the request each answers. */
static struct {
        pid_t pid;
        char id[JP_UUID_SIZE];
        char sandbox_id[JP_UUID_SIZE];
} children[PORTS_MAX_CONNECTING];

/* 0 once the answer is sent, -1 if it could not be. */
static int answer(int link, const char *id, int error, int fd)
{
        struct hostmsg_connected m = {.error = error};
        json_t *body;
        int rc = -1;

        snprintf(m.id, sizeof(m.id), "%s", id);
        body = hostmsg_connected_encode(&m);
        if (body)
                rc = hostmsg_send(link, HOSTMSG_CONNECTED, body, fd >= 0 ? &fd : NULL,
                                  fd >= 0 ? 1 : 0);
        if (rc < 0)
                log_warn("cannot answer a port connection to the gateway");
        json_decref(body);
        return rc < 0 ? -1 : 0;
}

/* In the child: the sandbox's namespaces, then the connection. Returns 0
 * with *fd set, or an errno. Only 127.0.0.1: the address is ours, never
 * the request's, so no other address of the namespace (its egress veth)
 * and nothing outside it can be named. */
static int connect_inside(int userns_fd, int netns_fd, int port, int *fd)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        struct timeval tv = {CONNECT_TIMEOUT_S, 0};
        int s;

        /* As root we may enter the network namespace at once; without
         * privileges, joining its user namespace (ours: we made it)
         * first gives the capability for that. */
        if (setns(netns_fd, CLONE_NEWNET) < 0 &&
            (setns(userns_fd, CLONE_NEWUSER) < 0 || setns(netns_fd, CLONE_NEWNET) < 0))
                return errno;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return errno;
        /* A blocking connect, bounded: a refusal is then known here, and
         * the gateway answers it at once as a closed port. */
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int err = errno == EINPROGRESS || errno == EAGAIN ? ETIMEDOUT : errno;

                close(s);
                return err;
        }
        *fd = s;
        return 0;
}

void ports_connect(int link, const struct hostmsg_connect *req)
{
        int userns_fd, netns_fd, slot = -1, fd = -1, same = 0, err;
        pid_t pid;


        err = -spawn_sandbox_netns(req->sandbox_id, &userns_fd, &netns_fd);
        for (int i = 0; err == 0 && i < PORTS_MAX_CONNECTING; i++) {
                if (children[i].pid == 0 && slot < 0)
                        slot = i;
                else if (children[i].pid != 0 &&
                         strcmp(children[i].sandbox_id, req->sandbox_id) == 0)
                        same++;
        }
        if (err == 0 && (slot < 0 || same >= PORTS_MAX_CONNECTING_PER_SANDBOX))
                err = EAGAIN;
        if (err) {
                answer(link, req->id, err, -1);
                return;
        }
        pid = fork();
        if (pid < 0) {
                answer(link, req->id, errno, -1);
                return;
        }
        if (pid == 0) {
                /* A child of a single-threaded process: any call is safe. */
                sigset_t none;

                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                alarm(CONNECT_TIMEOUT_S * 2);
                err = connect_inside(userns_fd, netns_fd, req->port, &fd);
                if (fd >= 0)
                        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                _exit(answer(link, req->id, err, fd) == 0 ? 0 : 1);
        }
        children[slot].pid = pid;
        snprintf(children[slot].id, sizeof(children[slot].id), "%s", req->id);
        snprintf(children[slot].sandbox_id, sizeof(children[slot].sandbox_id), "%s",
                 req->sandbox_id);
}

bool ports_reaped(int link, pid_t pid, int status)
{
        for (int i = 0; i < PORTS_MAX_CONNECTING; i++) {
                if (children[i].pid != pid)
                        continue;
                children[i].pid = 0;
                /* A child that did not answer (killed at its alarm, or its
                 * answer failed) is answered for: the gateway's request
                 * must not wait for ever. */
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        answer(link, children[i].id, WIFEXITED(status) ? EIO : ETIMEDOUT, -1);
                return true;
        }
        return false;
}
