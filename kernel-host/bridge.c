/* glovebox-kernel-bridge: runs a kernel that only speaks ZMQ over TCP
 * (ijavascript, tslab: they ignore "transport": "ipc" and bind
 * tcp://ip:port) inside a sandbox whose gateway reaches kernels through
 * ipc sockets in /run/kernel.
 *
 *   glovebox-kernel-bridge PREFIX IPC_PORT:TCP_PORT... -- KERNEL ARGV...
 *
 * It listens on each PREFIX-IPC_PORT (a Unix socket), starts the kernel,
 * and joins every connection it accepts to 127.0.0.1:TCP_PORT. ZMTP is the
 * same over both transports, so bytes pass unchanged. It runs as the
 * kernel does, inside the sandbox, with the kernel's limits and seccomp
 * filter: it reaches only the sandbox's own loopback, and the sandbox
 * keeps no network. It ends with the kernel's status. */
#include "autoconf.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CHANNELS 8
#define MAX_LINKS    64 /* connections at once; the gateway makes a handful */
#define LINK_BUFFER  (256 * 1024)

struct channel {
        int listen_fd;
        int tcp_port;
};

/* One accepted connection and its TCP peer; buf[i] holds what was read
 * from fd[i] and not yet written to the other. */
struct link {
        int fd[2];
        char *buf[2];
        size_t len[2];
        bool eof[2];
};

static struct channel channels[MAX_CHANNELS];
static size_t nchannels;
static struct link links[MAX_LINKS];
static volatile sig_atomic_t child_done;

static void on_child(int sig)
{
        (void)sig;
        child_done = 1;
}

static int listen_unix(const char *path)
{
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int fd;

        if (strlen(path) >= sizeof(a.sun_path))
                return -1;
        memcpy(a.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -1;
        unlink(path);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* A blocking connect on loopback is immediate: refused while the kernel
 * has not bound yet (then the gateway's ZMQ reconnects). */
static int connect_tcp(int port)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -1;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static void link_close(struct link *l)
{
        for (int i = 0; i < 2; i++) {
                if (l->fd[i] >= 0)
                        close(l->fd[i]);
                free(l->buf[i]);
        }
        memset(l, 0, sizeof(*l));
        l->fd[0] = l->fd[1] = -1;
}

static void accept_one(struct channel *c)
{
        int in = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC), out;
        struct link *l = NULL;

        if (in < 0)
                return;
        for (size_t i = 0; i < MAX_LINKS && !l; i++) {
                if (links[i].fd[0] < 0)
                        l = &links[i];
        }
        out = l ? connect_tcp(c->tcp_port) : -1;
        if (out < 0) {
                close(in);
                return;
        }
        l->fd[0] = in;
        l->fd[1] = out;
        l->buf[0] = malloc(LINK_BUFFER);
        l->buf[1] = malloc(LINK_BUFFER);
        if (!l->buf[0] || !l->buf[1])
                link_close(l);
}

/* Moves bytes one step; false when the link is over. */
static bool link_step(struct link *l, const short revents[2])
{
        for (int i = 0; i < 2; i++) {
                int other = 1 - i;

                if ((revents[i] & (POLLIN | POLLHUP | POLLERR)) && !l->eof[i] &&
                    l->len[i] < LINK_BUFFER) {
                        ssize_t n = read(l->fd[i], l->buf[i] + l->len[i], LINK_BUFFER - l->len[i]);

                        if (n > 0)
                                l->len[i] += (size_t)n;
                        else if (n == 0 || (errno != EINTR && errno != EAGAIN))
                                l->eof[i] = true;
                }
                if (l->len[i] > 0 && (revents[other] & POLLOUT)) {
                        ssize_t n = write(l->fd[other], l->buf[i], l->len[i]);

                        if (n < 0 && errno != EINTR && errno != EAGAIN)
                                return false;
                        if (n > 0) {
                                memmove(l->buf[i], l->buf[i] + n, l->len[i] - (size_t)n);
                                l->len[i] -= (size_t)n;
                        }
                }
        }
        /* Either end gone, and what it sent delivered: ZMQ reconnects. */
        return !((l->eof[0] && l->len[0] == 0) || (l->eof[1] && l->len[1] == 0));
}

static void serve(pid_t kernel, int *status)
{
        struct pollfd pfd[MAX_CHANNELS + 2 * MAX_LINKS];
        size_t at[MAX_LINKS];

        for (size_t i = 0; i < MAX_LINKS; i++)
                at[i] = (size_t)-1;
        for (;;) {
                size_t n = 0;

                if (child_done && waitpid(kernel, status, WNOHANG) == kernel)
                        return;
                for (size_t i = 0; i < nchannels; i++)
                        pfd[n++] = (struct pollfd){channels[i].listen_fd, POLLIN, 0};
                for (size_t i = 0; i < MAX_LINKS; i++) {
                        struct link *l = &links[i];

                        if (l->fd[0] < 0)
                                continue;
                        at[i] = n;
                        for (int s = 0; s < 2; s++) {
                                short ev = 0;

                                if (!l->eof[s] && l->len[s] < LINK_BUFFER)
                                        ev |= POLLIN;
                                if (l->len[1 - s] > 0)
                                        ev |= POLLOUT;
                                pfd[n++] = (struct pollfd){l->fd[s], ev, 0};
                        }
                }
                if (poll(pfd, n, 1000) < 0 && errno != EINTR)
                        return;
                for (size_t i = 0; i < nchannels; i++) {
                        if (pfd[i].revents & POLLIN)
                                accept_one(&channels[i]);
                }
                for (size_t i = 0; i < MAX_LINKS; i++) {
                        struct link *l = &links[i];
                        short rev[2];

                        /* Links accepted in this turn have no poll entry yet. */
                        if (l->fd[0] < 0 || at[i] == (size_t)-1)
                                continue;
                        rev[0] = pfd[at[i]].revents;
                        rev[1] = pfd[at[i] + 1].revents;
                        if (!link_step(l, rev))
                                link_close(l);
                }
                for (size_t i = 0; i < MAX_LINKS; i++)
                        at[i] = (size_t)-1;
        }
}

int main(int argc, char **argv)
{
        struct sigaction sa = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
        int status = 0, sep = 0;
        const char *prefix;
        sigset_t none;
        pid_t kernel;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--") == 0) {
                        sep = i;
                        break;
                }
        }
        if (sep < 3 || sep + 1 >= argc || sep - 2 > MAX_CHANNELS) {
                fprintf(stderr, "usage: %s PREFIX IPC_PORT:TCP_PORT... -- KERNEL ARGV...\n",
                        argv[0]);
                return 2;
        }
        prefix = argv[1];
        for (size_t i = 0; i < MAX_LINKS; i++) {
                links[i].fd[0] = links[i].fd[1] = -1;
        }
        for (int i = 2; i < sep; i++) {
                char path[sizeof(((struct sockaddr_un *)0)->sun_path)], *end;
                long ipc = strtol(argv[i], &end, 10), tcp;

                tcp = *end == ':' ? strtol(end + 1, &end, 10) : 0;
                if (*end || ipc <= 0 || ipc > 65535 || tcp <= 0 || tcp > 65535 ||
                    (size_t)snprintf(path, sizeof(path), "%s-%ld", prefix, ipc) >= sizeof(path)) {
                        fprintf(stderr, "glovebox-kernel-bridge: bad channel %s\n", argv[i]);
                        return 2;
                }
                channels[nchannels].tcp_port = (int)tcp;
                channels[nchannels].listen_fd = listen_unix(path);
                if (channels[nchannels].listen_fd < 0) {
                        fprintf(stderr, "glovebox-kernel-bridge: cannot listen on %s: %s\n", path,
                                strerror(errno));
                        return 1;
                }
                nchannels++;
        }
        /* An interrupt is for the kernel (the group gets it): not for us. */
        signal(SIGINT, SIG_IGN);
        signal(SIGPIPE, SIG_IGN);
        sigaction(SIGCHLD, &sa, NULL);
        kernel = fork();
        if (kernel < 0) {
                perror("glovebox-kernel-bridge: fork");
                return 1;
        }
        if (kernel == 0) {
                /* Ignored signals survive execve: give the kernel defaults. */
                signal(SIGINT, SIG_DFL);
                signal(SIGPIPE, SIG_DFL);
                signal(SIGCHLD, SIG_DFL);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                for (size_t i = 0; i < nchannels; i++)
                        close(channels[i].listen_fd);
                execvp(argv[sep + 1], argv + sep + 1);
                fprintf(stderr, "glovebox-kernel-bridge: cannot run %s: %s\n", argv[sep + 1],
                        strerror(errno));
                _exit(127);
        }
        serve(kernel, &status);
        if (WIFSIGNALED(status)) {
                signal(WTERMSIG(status), SIG_DFL);
                raise(WTERMSIG(status));
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
