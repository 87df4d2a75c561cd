/* glovebox-kernel-host: the small process that starts, signals and reaps
 * kernels for the gateway.
 *
 * The gateway forks and execs it before it creates any thread or ZMQ
 * context and talks to it over one SOCK_SEQPACKET socket (fd 3 by default)
 * with the typed messages of protocol/hostmsg.h. It is single-threaded: one
 * poll loop over that socket, a signalfd for SIGCHLD and the socket every
 * sandbox's init reports its reaped children on. It never parses
 * network input, which is why it is the only process that builds sandboxes.
 * When the gateway goes away it kills every kernel it started, removes their
 * files and exits; its sandboxes die with it however it dies, and what a
 * dead one left is removed by the next (leftovers.h). */
#include "autoconf.h"

#include "kernel-host/cgroup.h"
#include "kernel-host/checkpoint.h"
#include "kernel-host/homedisk.h"
#include "kernel-host/homecache.h"
#include "kernel-host/layers.h"
#include "kernel-host/volumes.h"
#include "kernel-host/leftovers.h"
#include "kernel-host/net.h"
#include "kernel-host/ports.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/seccomp.h"
#include "kernel-host/spawn.h"
#include "kernel-host/stock.h"
#include "kernel-host/zygote.h"
#include "protocol/fleetid.h"
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
        int stopping;
};

static struct host host = {.link = 3, .sigfd = -1};

static void report(enum hostmsg_type type, json_t *body)
{
        int rc = body ? hostmsg_send(host.link, type, body, NULL, 0) : -ENOMEM;

        if (rc < 0 && !host.stopping)
                log_warn("cannot report to the gateway: %s", strerror(-rc));
        json_decref(body);
}

/* Tells the gateway which limits we can enforce: it refuses requests for
 * the others. */
static void say_hello(void)
{
        static const enum hostmsg_controller bits[CGROUP_CONTROLLERS] = {
            [CGROUP_MEMORY] = HOSTMSG_CONTROLLER_MEMORY,
            [CGROUP_PIDS] = HOSTMSG_CONTROLLER_PIDS,
            [CGROUP_CPU] = HOSTMSG_CONTROLLER_CPU};
        struct hostmsg_hello hello = {0};
        unsigned usable = cgroup_controllers();

        for (int c = 0; c < CGROUP_CONTROLLERS; c++) {
                if (usable & (1u << c))
                        hello.controllers |= bits[c];
        }
        hello.checkpoints =
            checkpoint_available(hello.checkpoint_off, sizeof(hello.checkpoint_off));
        report(HOSTMSG_HELLO, hostmsg_hello_encode(&hello));
}

/* A request we cannot act on is answered all the same, as a failure of
 * the request it names, when it names one: the gateway, and whoever waits
 * behind it, would otherwise wait for ever. type is the failure's; false
 * when there was no id to answer. */
static bool refuse(enum hostmsg_type type, json_t *body, const char *key, const char *what)
{
        struct hostmsg_failed fail = {.error = EINVAL};

        if (hostmsg_request_id(body, key, fail.id) < 0) {
                log_error("malformed %s request without an id dropped", what);
                return false;
        }
        klog_error(fail.id, "malformed %s request refused", what);
        snprintf(fail.step, sizeof(fail.step), "request");
        snprintf(fail.message, sizeof(fail.message),
                 "the kernel-host refused the %s request: malformed or past its bounds", what);
        report(type, hostmsg_failed_encode(&fail));
        return true;
}

static void handle_sandbox_create(json_t *body)
{
        struct hostmsg_sandbox req;
        struct hostmsg_sandbox_ready ready = {0};
        struct hostmsg_failed fail = {0};
        int root_fd = -1;
        json_t *msg;

        if (hostmsg_sandbox_decode(body, &req) < 0) {
                refuse(HOSTMSG_SANDBOX_FAILED, body, "sandbox_id", "sandbox");
                return;
        }
        if (spawn_sandbox_create(&req, &ready, &root_fd, &fail) < 0) {
                log_warn("sandbox %s failed: %s", fleetid_short(req.sandbox_id).s, fail.message);
                report(HOSTMSG_SANDBOX_FAILED, hostmsg_failed_encode(&fail));
        } else {
                log_info("sandbox %s ready (init pid %d)", fleetid_short(req.sandbox_id).s,
                         ready.init_pid);
                /* Its root goes along: the gateway reaches the sandbox's
                 * files through it, whatever its privileges. */
                msg = hostmsg_sandbox_ready_encode(&ready);
                if (!msg || hostmsg_send(host.link, HOSTMSG_SANDBOX_READY, msg, &root_fd, 1) < 0)
                        log_warn("cannot report to the gateway");
                json_decref(msg);
                close(root_fd);
        }
        hostmsg_sandbox_clear(&req);
}

/* A start's answer (spawn.h), sent as it comes. */
static void answer_start(const char *sandbox_id, const struct hostmsg_started *started,
                         const int *fds, size_t nfds, const struct hostmsg_failed *fail)
{
        json_t *msg;
        int rc;

        if (!started) {
                klog_warn(fail->id, "start failed: %s", fail->message);
                report(HOSTMSG_START_FAILED, hostmsg_failed_encode(fail));
                return;
        }
        klog_info(started->id, "started pid %d in sandbox %s", started->pid,
                  fleetid_short(sandbox_id).s);
        msg = hostmsg_started_encode(started);
        rc = msg ? hostmsg_send(host.link, HOSTMSG_STARTED, msg, fds, nfds) : -ENOMEM;
        if (rc < 0)
                log_warn("cannot report to the gateway: %s", strerror(-rc));
        json_decref(msg);
}

static void handle_start(json_t *body)
{
        struct hostmsg_start req;

        if (hostmsg_start_decode(body, &req) < 0) {
                refuse(HOSTMSG_START_FAILED, body, "id", "start");
                return;
        }
        spawn_start(&req, answer_start);
        hostmsg_start_clear(&req);
}

static void handle_signal(enum hostmsg_type type, json_t *body)
{
        struct hostmsg_signal req;
        int rc;

        if (hostmsg_signal_decode(body, &req) < 0 || (type == HOSTMSG_SIGNAL && !req.signal)) {
                log_error("malformed signal request dropped");
                return;
        }
        /* A start under way in it, or its own: told to the gateway first. */
        spawn_starting_settle(req.id);
        if (type == HOSTMSG_SANDBOX_DESTROY)
                rc = spawn_sandbox_destroy(req.id);
        else if (type == HOSTMSG_SANDBOX_PRIORITY)
                rc = spawn_sandbox_priority(req.id, req.signal != 0);
        else if (type == HOSTMSG_STOP)
                rc = spawn_stop(req.id);
        else
                rc = spawn_signal(req.id, req.signal);
        if (rc < 0 && rc != -ESRCH)
                klog_warn(req.id, "signal: %s", strerror(-rc));
}

/* New limits for a sandbox, answered either way. */
static void handle_relimit(json_t *body)
{
        struct hostmsg_relimit req;
        struct hostmsg_failed answer = {0};

        if (hostmsg_relimit_decode(body, &req) < 0) {
                log_error("malformed relimit request dropped");
                return;
        }
        spawn_starting_settle(req.id);
        snprintf(answer.id, sizeof(answer.id), "%s", req.id);
        snprintf(answer.step, sizeof(answer.step), "relimit");
        answer.error =
            -spawn_sandbox_relimit(req.id, &req.limits, answer.message, sizeof(answer.message));
        if (answer.error)
                klog_info(req.id, "new limits refused: %s", answer.message);
        report(HOSTMSG_SANDBOX_RELIMITED, hostmsg_failed_encode(&answer));
}

static void handle_layer_delete(json_t *body)
{
        struct hostmsg_layer req;

        if (hostmsg_layer_decode(body, &req) < 0) {
                log_error("malformed layer request dropped");
                return;
        }
        layers_delete(req.id);
}

/* Opens (size_mb: makes first) a volume and answers with its root. */
static void handle_volume_open(json_t *body)
{
        struct hostmsg_volume req;
        struct hostmsg_connected m = {0};
        const char *step = "request";
        json_t *answer;
        int fd = -1, rc;

        if (hostmsg_volume_decode(body, &req) < 0) {
                if (hostmsg_request_id(body, "id", m.id) < 0) {
                        log_error("malformed volume request without an id dropped");
                        return;
                }
                rc = -EINVAL;
        } else {
                snprintf(m.id, sizeof(m.id), "%s", req.id);
                rc = volumes_open(req.volume_id, req.size_mb, &fd, &step);
                if (rc < 0)
                        log_warn("volume %.8s: %s: %s", req.volume_id, step, strerror(-rc));
        }
        m.error = rc < 0 ? -rc : 0;
        answer = hostmsg_connected_encode(&m);
        if (!answer || hostmsg_send(host.link, HOSTMSG_VOLUME_OPENED, answer, fd >= 0 ? &fd : NULL,
                                    fd >= 0 ? 1 : 0) < 0)
                log_warn("cannot answer a volume request to the gateway");
        json_decref(answer);
        if (fd >= 0)
                close(fd);
}

static void handle_volume_delete(json_t *body)
{
        struct hostmsg_volume req;

        if (hostmsg_volume_decode(body, &req) < 0) {
                log_error("malformed volume request dropped");
                return;
        }
        volumes_delete(req.volume_id);
}

static void handle_connect(json_t *body)
{
        struct hostmsg_connect req;

        if (hostmsg_connect_decode(body, &req) < 0) {
                struct hostmsg_connected no = {.error = EINVAL};

                /* Its answer is CONNECTED with an error, not a failure. */
                if (hostmsg_request_id(body, "id", no.id) == 0)
                        report(HOSTMSG_CONNECTED, hostmsg_connected_encode(&no));
                else
                        log_error("malformed connect request without an id dropped");
                return;
        }
        ports_connect(host.link, &req);
}

/* SANDBOX_CREATEs read and not yet served, oldest first. Making a
 * sandbox holds the loop for some milliseconds (its init's setup is
 * waited for), and a burst of creates comes before any of their starts
 * (the gateway sends a start once its sandbox is ready): served in the
 * order read, no kernel would start before every sandbox of the burst
 * was made, one core idle meanwhile. So creates are served one a turn of
 * the loop, and a START in a sandbox already made is served before them:
 * it cannot be about any of them, and its kernel runs while the next
 * sandboxes are made. Any other message is served after every create
 * read before it. */
#define CREATES_MAX 256

static struct {
        json_t *body[CREATES_MAX];
        size_t n;
} creates;

static void serve_creates(size_t max)
{
        size_t k = 0;

        for (; k < max && k < creates.n; k++) {
                handle_sandbox_create(creates.body[k]);
                json_decref(creates.body[k]);
        }
        creates.n -= k;
        memmove(creates.body, creates.body + k, creates.n * sizeof(creates.body[0]));
}

static bool start_in_made_sandbox(enum hostmsg_type type, json_t *body)
{
        const char *sandbox;

        if (type != HOSTMSG_START)
                return false;
        sandbox = json_string_value(json_object_get(body, "sandbox_id"));
        return sandbox && spawn_sandbox_made(sandbox);
}

static void handle_link(void)
{
        for (;;) {
                enum hostmsg_type type;
                json_t *body;
                int rc = hostmsg_recv(host.link, &type, &body, NULL, NULL);

                if (rc == -EAGAIN)
                        return;
                if (rc == -EPIPE || rc == -ECONNRESET) {
                        host.stopping = 1;
                        return;
                }
                stock_busy();
                if (rc < 0) {
                        log_error("malformed message from the gateway dropped");
                        continue;
                }
                if (type == HOSTMSG_SANDBOX_CREATE && creates.n < CREATES_MAX) {
                        creates.body[creates.n++] = body;
                        continue;
                }
                if (creates.n && !start_in_made_sandbox(type, body))
                        serve_creates(creates.n);
                switch (type) {
                case HOSTMSG_SANDBOX_CREATE:
                        handle_sandbox_create(body);
                        break;
                case HOSTMSG_START:
                        handle_start(body);
                        break;
                case HOSTMSG_CONNECT:
                        handle_connect(body);
                        break;
                case HOSTMSG_SANDBOX_RELIMIT:
                        handle_relimit(body);
                        break;
                case HOSTMSG_LAYER_DELETE:
                        handle_layer_delete(body);
                        break;
                case HOSTMSG_VOLUME_OPEN:
                        handle_volume_open(body);
                        break;
                case HOSTMSG_VOLUME_DELETE:
                        handle_volume_delete(body);
                        break;
                case HOSTMSG_CHECKPOINT:
                case HOSTMSG_RESTORE:
                case HOSTMSG_CHECKPOINT_DELETE:
                        /* A checkpoint takes a sandbox's processes whole. */
                        spawn_starting_settle(NULL);
                        checkpoint_handle(type, body, host.link, report);
                        break;
                case HOSTMSG_SANDBOX_DESTROY:
                case HOSTMSG_SANDBOX_PRIORITY:
                case HOSTMSG_SIGNAL:
                case HOSTMSG_STOP:
                        handle_signal(type, body);
                        break;
                default:
                        log_error("unknown message type %d dropped", (int)type);
                }
                json_decref(body);
        }
}

static void handle_signals(void)
{
        struct signalfd_siginfo si;
        int status;
        pid_t pid;

        while (read(host.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGTERM)
                        host.stopping = 1;
        }
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                if (!ports_reaped(host.link, pid, status) && !zygote_reaped(pid, status) &&
                    !stock_reaped(pid) && !checkpoint_reaped(pid, status, host.link, report))
                        spawn_reap(pid, status, report);
        }
}

static void usage(void)
{
        fprintf(stderr, "usage: glovebox-kernel-host --runtime-dir DIR [--fd N] "
                        "[--log-level LEVEL] [--home-disk-dir STATE_DIR]\n"
                        "                            [--layers-dir DIR] [--volumes-dir DIR]\n"
                        "                            [--zygote NAME:MODULE,...]...\n"
                        "                            [--checkpoints-dir DIR] [--criu PATH]\n"
                        "                            [--compress-after SECONDS]\n"
                        "                            [--sandbox-stock N]\n"
                        "       glovebox-kernel-host --print-seccomp\n"
                        "Started by glovebox; not meant to be run by hand. --print-seccomp\n"
                        "prints the kernels' seccomp filter as pseudo-filter code.\n");
}

int main(int argc, char **argv)
{
        const char *runtime_dir = NULL;
        const char *home_disk_dir = NULL;
        const char *layers_dir = NULL;
        const char *volumes_dir = NULL;
        const char *checkpoints_dir = NULL;
        const char *criu = "criu";
        int compress_after = 60;
        long sandbox_stock = 0;
        const char *zygote_specs[8];
        size_t nzygote_specs = 0;
        char reason[HOSTMSG_ERROR_SIZE];
        sigset_t mask;
        int rc = 1;

        log_set_program("kernel-host");
        /* argv's strings lie end to end; sandbox inits overwrite them. */
        sandbox_set_title_area(argv[0],
                               (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]));
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--print-seccomp") == 0) {
                        return seccomp_policy_export_pfc(1) < 0 ? 1 : 0;
                } else if (strcmp(argv[i], "--runtime-dir") == 0 && i + 1 < argc) {
                        runtime_dir = argv[++i];
                } else if (strcmp(argv[i], "--fd") == 0 && i + 1 < argc) {
                        char *end;
                        long fd = strtol(argv[++i], &end, 10);

                        if (*end || fd < 0 || fd > 1023) {
                                usage();
                                return 2;
                        }
                        host.link = (int)fd;
                } else if (strcmp(argv[i], "--home-disk-dir") == 0 && i + 1 < argc) {
                        home_disk_dir = argv[++i];
                } else if (strcmp(argv[i], "--layers-dir") == 0 && i + 1 < argc) {
                        layers_dir = argv[++i];
                } else if (strcmp(argv[i], "--volumes-dir") == 0 && i + 1 < argc) {
                        volumes_dir = argv[++i];
                } else if (strcmp(argv[i], "--checkpoints-dir") == 0 && i + 1 < argc) {
                        checkpoints_dir = argv[++i];
                } else if (strcmp(argv[i], "--criu") == 0 && i + 1 < argc) {
                        criu = argv[++i];
                } else if (strcmp(argv[i], "--compress-after") == 0 && i + 1 < argc) {
                        char *end;
                        long seconds = strtol(argv[++i], &end, 10);

                        if (end == argv[i] || *end || seconds < -1 || seconds > 1L << 24) {
                                usage();
                                return 2;
                        }
                        compress_after = (int)seconds;
                } else if (strcmp(argv[i], "--sandbox-stock") == 0 && i + 1 < argc) {
                        char *end;

                        sandbox_stock = strtol(argv[++i], &end, 10);
                        if (end == argv[i] || *end || sandbox_stock < 0 ||
                            sandbox_stock > STOCK_MAX) {
                                usage();
                                return 2;
                        }
                } else if (strcmp(argv[i], "--zygote") == 0 && i + 1 < argc &&
                           nzygote_specs < sizeof(zygote_specs) / sizeof(zygote_specs[0])) {
                        zygote_specs[nzygote_specs++] = argv[++i];
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
        if (!runtime_dir) {
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
        host.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (host.sigfd < 0) {
                log_error("signalfd: %s", strerror(errno));
                return 1;
        }
        if (getppid() == 1)
                host.stopping = 1;
        if (spawn_init(runtime_dir) < 0)
                return 1;
        cgroup_init();
        stock_init((unsigned)sandbox_stock);
        /* Asked for and not possible: no sandbox would have the home the
         * operator chose, so none is made at all (no hello: the gateway
         * does not start). */
        if (home_disk_dir && homedisk_init(home_disk_dir) < 0)
                goto out;
        /* Without them only template builds are off (logged). */
        if (layers_dir && geteuid() == 0)
                layers_init(layers_dir);
        /* Without them only volumes are off (logged). */
        if (volumes_dir && geteuid() == 0)
                volumes_init(volumes_dir);
        checkpoint_init(criu, checkpoints_dir, compress_after);
        if (!checkpoint_available(reason, sizeof(reason)) && checkpoints_dir)
                log_info("memory pause, fork and snapshots are off: %s", reason);
        say_hello();
        /* Before the first sandbox: a predecessor's directories would be in
         * the way of ours. */
        if (leftovers_remove(runtime_dir) < 0)
                return 1;
        leftovers_record_write();
        if (geteuid() == 0)
                net_init();
        /* Before the zygotes, whose imports would build it otherwise. */
        homecache_prepare();
        /* A zygote that cannot start only costs speed: its kernels start
         * cold, as without one. */
        for (size_t i = 0; i < nzygote_specs; i++)
                zygote_start(zygote_specs[i]);

        while (!host.stopping) {
                struct pollfd fds[3 + ZYGOTE_MAX + SPAWN_STARTING_MAX] = {
                    {host.link, POLLIN, 0},
                    {host.sigfd, POLLIN, 0},
                    {sandbox_exits_fd(), POLLIN, 0}};
                size_t nzygotes = zygote_output_fds(fds + 3, ZYGOTE_MAX);
                size_t nfds = 3 + nzygotes;
                int due = stock_due_ms(), starts_due = spawn_starting_due_ms();

                nfds += spawn_starting_fds(fds + nfds, SPAWN_STARTING_MAX);
                if (starts_due >= 0 && (due < 0 || starts_due < due))
                        due = starts_due;
                if (creates.n)
                        due = 0;
                if (poll(fds, nfds, due) < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("poll: %s", strerror(errno));
                        goto out;
                }
                /* The starts' reports, then the inits': a process is told
                 * started before it is told ended. Inits' reports before
                 * the signals: a sandbox's end, seen among the signals,
                 * takes whatever its init said before it. */
                spawn_starting_read();
                if (fds[2].revents)
                        spawn_init_reports(report);
                if (nzygotes)
                        zygote_read_output();
                if (fds[1].revents)
                        handle_signals();
                if (fds[0].revents & POLLIN)
                        handle_link();
                else if (fds[0].revents & (POLLHUP | POLLERR))
                        host.stopping = 1;
                if (!host.stopping)
                        serve_creates(1);
                /* Nothing is made ahead while a start is under way, or a
                 * sandbox asked for: it would take the CPU that start's
                 * kernel is waiting for. */
                if (spawn_starting_due_ms() >= 0 || creates.n)
                        stock_busy();
                if (!host.stopping)
                        stock_fill();
        }
        rc = 0;
out:
        while (creates.n)
                json_decref(creates.body[--creates.n]);
        checkpoint_compact_stop();
        zygote_stop_all();
        stock_stop_all();
        spawn_stop_all(report);
        cgroup_shutdown();
        leftovers_record_remove();
        close(host.sigfd);
        return rc;
}
