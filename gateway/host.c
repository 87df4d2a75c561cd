#include "autoconf.h"

#include "gateway/host.h"
#include "gateway/loop.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HOST_PROGRAM "glovebox-kernel-host"
#define HOST_FD      3

static int host_fd = -1;
static pid_t host_pid = -1;
static struct loop_watch *host_watch;
static const struct host_events *host_events;

static int find_program(char *out, size_t size)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

        if (n > 0) {
                char *slash;

                self[n] = '\0';
                slash = strrchr(self, '/');
                if (slash) {
                        *slash = '\0';
                        if ((size_t)snprintf(out, size, "%s/" HOST_PROGRAM, self) < size &&
                            access(out, X_OK) == 0)
                                return 0;
                }
        }
        if ((size_t)snprintf(out, size, "%s/" HOST_PROGRAM, GLOVEBOX_LIBEXECDIR) < size &&
            access(out, X_OK) == 0)
                return 0;
        return -ENOENT;
}

int host_spawn(const char *runtime_dir, const char *log_level)
{
        char program[PATH_MAX];
        int sv[2];
        pid_t pid;
        int rc = find_program(program, sizeof(program));

        if (rc < 0) {
                log_error("cannot find " HOST_PROGRAM " beside glovebox or in %s",
                          GLOVEBOX_LIBEXECDIR);
                return rc;
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                close(sv[0]);
                close(sv[1]);
                return rc;
        }
        if (pid == 0) {
                char *argv[] = {program,       "--runtime-dir", (char *)runtime_dir, "--log-level",
                                (char *)log_level, NULL};

                /* Nothing of our environment (tokens, secrets) goes further. */
                char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};

                /* dup2 clears close-on-exec on the copy at HOST_FD. */
                if (dup2(sv[1], HOST_FD) < 0)
                        _exit(127);
                execve(program, argv, envp);
                _exit(127);
        }
        close(sv[1]);
        host_fd = sv[0];
        host_pid = pid;
        fcntl(host_fd, F_SETFL, fcntl(host_fd, F_GETFL) | O_NONBLOCK);
        return 0;
}

static void on_link(void *arg)
{
        for (;;) {
                enum hostmsg_type type;
                json_t *body;
                int rc = hostmsg_recv(host_fd, &type, &body);

                if (rc == -EAGAIN)
                        return;
                if (rc == -EBADMSG) {
                        log_error("malformed message from the kernel-host dropped");
                        continue;
                }
                if (rc < 0) {
                        log_error("the kernel-host is gone (%s)", strerror(-rc));
                        loop_unwatch(&host_watch);
                        if (host_events->lost)
                                host_events->lost();
                        return;
                }
                if (type == HOSTMSG_STARTED) {
                        struct hostmsg_started m;

                        if (hostmsg_started_decode(body, &m) == 0)
                                host_events->started(&m);
                        else
                                rc = -EBADMSG;
                } else if (type == HOSTMSG_START_FAILED) {
                        struct hostmsg_failed m;

                        if (hostmsg_failed_decode(body, &m) == 0)
                                host_events->start_failed(&m);
                        else
                                rc = -EBADMSG;
                } else if (type == HOSTMSG_EXITED) {
                        struct hostmsg_exit m;

                        if (hostmsg_exit_decode(body, &m) == 0)
                                host_events->exited(&m);
                        else
                                rc = -EBADMSG;
                } else {
                        rc = -EBADMSG;
                }
                if (rc < 0)
                        log_error("unexpected message %d from the kernel-host dropped", (int)type);
                json_decref(body);
        }
}

int host_attach(const struct host_events *events)
{
        host_events = events;
        return loop_watch_fd(host_fd, on_link, NULL, &host_watch);
}

static int send_json(enum hostmsg_type type, json_t *body)
{
        int rc = body ? hostmsg_send(host_fd, type, body) : -ENOMEM;

        json_decref(body);
        return rc;
}

int host_start(const struct hostmsg_start *req)
{
        return send_json(HOSTMSG_START, hostmsg_start_encode(req));
}

int host_signal(const char *kernel_id, int signal)
{
        struct hostmsg_signal m = {.signal = signal};

        snprintf(m.kernel_id, sizeof(m.kernel_id), "%s", kernel_id);
        return send_json(HOSTMSG_SIGNAL, hostmsg_signal_encode(&m));
}

int host_stop(const char *kernel_id)
{
        return send_json(HOSTMSG_STOP, json_pack("{s:s}", "kernel_id", kernel_id));
}

void host_close(int timeout_ms)
{
        struct timespec start, now;
        int status;

        loop_unwatch(&host_watch);
        if (host_fd >= 0) {
                /* The loop's watch holds a duplicate of the descriptor;
                 * shutdown() ends the connection for both at once. */
                shutdown(host_fd, SHUT_RDWR);
                close(host_fd);
                host_fd = -1;
        }
        if (host_pid <= 0)
                return;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
                pid_t r = waitpid(host_pid, &status, WNOHANG);

                if (r == host_pid || (r < 0 && errno != EINTR))
                        break;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
                    timeout_ms) {
                        log_warn("kernel-host did not exit in time; killing it");
                        kill(host_pid, SIGKILL);
                        waitpid(host_pid, &status, 0);
                        break;
                }
                usleep(10000);
        }
        host_pid = -1;
}
