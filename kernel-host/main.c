/* glovebox-kernel-host: the small process that starts, signals and reaps
 * kernels for the gateway.
 *
 * The gateway forks and execs it before it creates any thread or ZMQ
 * context and talks to it over one SOCK_SEQPACKET socket (fd 3 by default)
 * with the typed messages of protocol/hostmsg.h. It is single-threaded: one
 * poll loop over that socket and a signalfd for SIGCHLD. It never parses
 * network input, which is why it is the only process that builds sandboxes.
 * When the gateway goes away it kills every kernel it started, removes their
 * files and exits. */
#include "autoconf.h"

#include "kernel-host/cgroup.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/seccomp.h"
#include "kernel-host/spawn.h"
#include "protocol/hostmsg.h"
#include "protocol/log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

struct host {
        int link;  /* socket to the gateway */
        int sigfd; /* SIGCHLD, SIGTERM */
        const char *runtime_dir;
        struct kernel_proc *kernels;
        size_t count;
        size_t cap;
        int stopping;
};

static struct kernel_proc *find_kernel(struct host *h, const char *id)
{
        for (size_t i = 0; i < h->count; i++) {
                if (strcmp(h->kernels[i].kernel_id, id) == 0)
                        return &h->kernels[i];
        }
        return NULL;
}

static struct kernel_proc *find_pid(struct host *h, pid_t pid)
{
        for (size_t i = 0; i < h->count; i++) {
                if (h->kernels[i].pid == pid)
                        return &h->kernels[i];
        }
        return NULL;
}

static void forget_kernel(struct host *h, struct kernel_proc *k)
{
        size_t i = (size_t)(k - h->kernels);

        h->kernels[i] = h->kernels[h->count - 1];
        h->count--;
}

static void send_or_warn(struct host *h, enum hostmsg_type type, json_t *body)
{
        int rc = body ? hostmsg_send(h->link, type, body) : -ENOMEM;

        if (rc < 0 && !h->stopping)
                log_warn("cannot report to the gateway: %s", strerror(-rc));
        json_decref(body);
}

static void handle_start(struct host *h, json_t *body)
{
        struct hostmsg_start req;
        struct hostmsg_started started = {0};
        struct hostmsg_failed fail = {0};
        struct kernel_proc proc;
        int rc = hostmsg_start_decode(body, &req);

        if (rc < 0) {
                log_error("malformed start request dropped");
                return;
        }
        if (find_kernel(h, req.kernel_id)) {
                snprintf(fail.kernel_id, sizeof(fail.kernel_id), "%s", req.kernel_id);
                snprintf(fail.step, sizeof(fail.step), "register");
                fail.error = EEXIST;
                snprintf(fail.message, sizeof(fail.message), "kernel is already running");
                send_or_warn(h, HOSTMSG_START_FAILED, hostmsg_failed_encode(&fail));
                goto out;
        }
        if (h->count == h->cap) {
                size_t cap = h->cap ? h->cap * 2 : 16;
                struct kernel_proc *grown = realloc(h->kernels, cap * sizeof(*grown));

                if (!grown) {
                        log_error("out of memory");
                        goto out;
                }
                h->kernels = grown;
                h->cap = cap;
        }
        rc = spawn_kernel(&req, h->runtime_dir, &proc, &started, &fail);
        if (rc < 0) {
                klog_warn(req.kernel_id, "start failed: %s", fail.message);
                send_or_warn(h, HOSTMSG_START_FAILED, hostmsg_failed_encode(&fail));
                goto out;
        }
        h->kernels[h->count++] = proc;
        klog_info(req.kernel_id, "started pid %d", (int)proc.pid);
        send_or_warn(h, HOSTMSG_STARTED, hostmsg_started_encode(&started));
out:
        hostmsg_start_clear(&req);
}

static void handle_signal(struct host *h, enum hostmsg_type type, json_t *body)
{
        struct hostmsg_signal req;
        struct kernel_proc *k;
        int sig;

        if (hostmsg_signal_decode(body, &req) < 0 || (type == HOSTMSG_SIGNAL && !req.signal)) {
                log_error("malformed signal request dropped");
                return;
        }
        k = find_kernel(h, req.kernel_id);
        if (!k) {
                klog_debug(req.kernel_id, "signal for a kernel that is gone");
                return;
        }
        if (type == HOSTMSG_STOP) {
                spawn_kill(k);
                return;
        }
        sig = req.signal;
        if (spawn_signal(k, sig) < 0 && errno != ESRCH)
                klog_warn(k->kernel_id, "signal %d: %s", sig, strerror(errno));
}

static void handle_link(struct host *h)
{
        for (;;) {
                enum hostmsg_type type;
                json_t *body;
                int rc = hostmsg_recv(h->link, &type, &body);

                if (rc == -EAGAIN)
                        return;
                if (rc == -EPIPE || rc == -ECONNRESET) {
                        h->stopping = 1;
                        return;
                }
                if (rc < 0) {
                        log_error("malformed message from the gateway dropped");
                        continue;
                }
                switch (type) {
                case HOSTMSG_START:
                        handle_start(h, body);
                        break;
                case HOSTMSG_SIGNAL:
                case HOSTMSG_STOP:
                        handle_signal(h, type, body);
                        break;
                default:
                        log_error("unknown message type %d dropped", (int)type);
                }
                json_decref(body);
        }
}

static void report_exit(struct host *h, struct kernel_proc *k, int status)
{
        struct hostmsg_exit ex;

        spawn_reap(k, status, &ex);
        klog_info(k->kernel_id, "pid %d %s (code %d, signal %d)", (int)k->pid, ex.reason,
                  ex.exit_code, ex.signal);
        send_or_warn(h, HOSTMSG_EXITED, hostmsg_exit_encode(&ex));
        forget_kernel(h, k);
}

static void reap(struct host *h)
{
        int status;
        pid_t pid;

        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                struct kernel_proc *k = find_pid(h, pid);

                if (k)
                        report_exit(h, k, status);
        }
}

static void handle_signals(struct host *h)
{
        struct signalfd_siginfo si;

        while (read(h->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGTERM)
                        h->stopping = 1;
        }
        reap(h);
}

/* Kills every kernel and waits for each, so nothing outlives us. */
static void stop_all(struct host *h)
{
        for (size_t i = 0; i < h->count; i++)
                spawn_kill(&h->kernels[i]);
        while (h->count > 0) {
                int status;
                pid_t pid = waitpid(-1, &status, 0);
                struct kernel_proc *k;

                if (pid < 0 && errno == EINTR)
                        continue;
                if (pid < 0)
                        break;
                k = find_pid(h, pid);
                if (k)
                        report_exit(h, k, status);
        }
}

static void usage(void)
{
        fprintf(stderr, "usage: glovebox-kernel-host --runtime-dir DIR [--fd N] "
                        "[--log-level LEVEL]\n"
                        "       glovebox-kernel-host --print-seccomp\n"
                        "Started by glovebox; not meant to be run by hand. --print-seccomp\n"
                        "prints the kernels' seccomp filter as pseudo-filter code.\n");
}

int main(int argc, char **argv)
{
        struct host h = {.link = 3, .sigfd = -1};
        sigset_t mask;
        int rc = 1;

        log_set_program("kernel-host");
        /* argv's strings lie end to end; sandbox inits overwrite them. */
        sandbox_set_title_area(argv[0], (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]));
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--print-seccomp") == 0) {
                        return seccomp_policy_export_pfc(1) < 0 ? 1 : 0;
                } else if (strcmp(argv[i], "--runtime-dir") == 0 && i + 1 < argc) {
                        h.runtime_dir = argv[++i];
                } else if (strcmp(argv[i], "--fd") == 0 && i + 1 < argc) {
                        char *end;
                        long fd = strtol(argv[++i], &end, 10);

                        if (*end || fd < 0 || fd > 1023) {
                                usage();
                                return 2;
                        }
                        h.link = (int)fd;
                } else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
                        if (log_level_parse(argv[++i], &log_threshold) < 0) {
                                usage();
                                return 2;
                        }
                } else {
                        usage();
                        return 2;
                }
        }
        if (!h.runtime_dir) {
                usage();
                return 2;
        }
        /* If the gateway dies without a word, we still clean up: the closed
         * link wakes the loop, and this signal covers a gateway killed hard. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        /* Ctrl-C reaches the whole terminal group; the gateway decides when
         * kernels stop, so we ignore it. */
        signal(SIGINT, SIG_IGN);
        signal(SIGPIPE, SIG_IGN);
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        h.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (h.sigfd < 0) {
                log_error("signalfd: %s", strerror(errno));
                return 1;
        }
        if (getppid() == 1)
                h.stopping = 1;
        if (spawn_init() < 0)
                return 1;
        cgroup_init();

        while (!h.stopping) {
                struct pollfd fds[2] = {{h.link, POLLIN, 0}, {h.sigfd, POLLIN, 0}};

                if (poll(fds, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("poll: %s", strerror(errno));
                        goto out;
                }
                if (fds[1].revents)
                        handle_signals(&h);
                if (fds[0].revents & POLLIN)
                        handle_link(&h);
                else if (fds[0].revents & (POLLHUP | POLLERR))
                        h.stopping = 1;
        }
        rc = 0;
out:
        stop_all(&h);
        cgroup_shutdown();
        free(h.kernels);
        close(h.sigfd);
        return rc;
}
