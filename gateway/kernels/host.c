#include "autoconf.h"

#include "gateway/kernels/host.h"
#include "gateway/kernels/host_private.h"
#include "gateway/core/loop.h"
#include "gateway/core/metrics.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HOST_PROGRAM     "glovebox-kernel-host"
#define HOST_FD          3
#define HOST_MAX_ZYGOTES 8

static int host_fd = -1;
static pid_t host_pid = -1;
static unsigned host_controller_bits; /* from the kernel-host's hello */
static bool checkpoints_on;           /* the same: memory checkpoints */
static char checkpoint_off[HOSTMSG_ERROR_SIZE] = "no kernel-host yet";
static struct loop_watch *host_watch;

/* What a new kernel-host is started with, kept for a replacement. */
static struct {
        char program[PATH_MAX];
        char runtime_dir[PATH_MAX];
        char log_level[16];
        char home_dir[PATH_MAX];        /* "": a tmpfs home */
        char layers_dir[PATH_MAX];      /* "": no template builds */
        char volumes_dir[PATH_MAX];     /* "": no volumes */
        char checkpoints_dir[PATH_MAX]; /* "": no memory checkpoints */
        char criu[PATH_MAX];            /* --criu */
        char compress_after[16];        /* --pause-compress-after, as --compress-after */
        char sandbox_stock[16];         /* --sandbox-stock; "": none */
        char *const *zygotes;           /* --zygote entries, the configuration's */
        int max_restarts;               /* replacements allowed after a kernel-host died */
        int restarts;
} spawn_args;

static int find_program(char *out, size_t size)
{
        if (program_beside_self(HOST_PROGRAM, out, size) == 0)
                return 0;
        if ((size_t)snprintf(out, size, "%s/" HOST_PROGRAM, GLOVEBOX_LIBEXECDIR) < size &&
            access(out, X_OK) == 0)
                return 0;
        return -ENOENT;
}

bool host_has_file(const char *name, int mode)
{
        char path[PATH_MAX], *slash;
        size_t room;

        if (find_program(path, sizeof(path)) < 0 || !(slash = strrchr(path, '/')))
                return false;
        room = sizeof(path) - (size_t)(slash + 1 - path);
        return (size_t)snprintf(slash + 1, room, "%s", name) < room && access(path, mode) == 0;
}

void host_set_zygotes(char *const *zygotes)
{
        spawn_args.zygotes = zygotes;
}

/* Forks and execs the kernel-host. Also runs when the gateway has threads
 * (a replacement): the child makes only async-signal-safe calls. */
static int start_process(void)
{
        /* The program, --runtime-dir and --log-level with their values,
         * --home-disk-dir, --layers-dir, --volumes-dir, --checkpoints-dir,
         * --criu, --compress-after and --sandbox-stock with theirs, two
         * words per zygote, the end. */
        char *argv[19 + 2 * HOST_MAX_ZYGOTES + 1] = {spawn_args.program, (char *)"--runtime-dir",
                                                     spawn_args.runtime_dir, (char *)"--log-level",
                                                     spawn_args.log_level};
        size_t argc = 5;
        /* Nothing of our environment (tokens, secrets) goes further. */
        char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                        log_format == LOG_FORMAT_JSON ? (char *)"GLOVEBOX_LOG_FORMAT=json" : NULL,
                        NULL};
        sigset_t none;
        int sv[2];
        pid_t pid;
        int rc;

        if (spawn_args.home_dir[0]) {
                argv[argc++] = (char *)"--home-disk-dir";
                argv[argc++] = spawn_args.home_dir;
        }
        if (spawn_args.layers_dir[0]) {
                argv[argc++] = (char *)"--layers-dir";
                argv[argc++] = spawn_args.layers_dir;
        }
        if (spawn_args.volumes_dir[0]) {
                argv[argc++] = (char *)"--volumes-dir";
                argv[argc++] = spawn_args.volumes_dir;
        }
        if (spawn_args.checkpoints_dir[0]) {
                argv[argc++] = (char *)"--checkpoints-dir";
                argv[argc++] = spawn_args.checkpoints_dir;
        }
        if (spawn_args.criu[0]) {
                argv[argc++] = (char *)"--criu";
                argv[argc++] = spawn_args.criu;
        }
        if (spawn_args.compress_after[0]) {
                argv[argc++] = (char *)"--compress-after";
                argv[argc++] = spawn_args.compress_after;
        }
        if (spawn_args.sandbox_stock[0]) {
                argv[argc++] = (char *)"--sandbox-stock";
                argv[argc++] = spawn_args.sandbox_stock;
        }
        for (size_t i = 0; spawn_args.zygotes && spawn_args.zygotes[i] && i < HOST_MAX_ZYGOTES;
             i++) {
                argv[argc++] = (char *)"--zygote";
                argv[argc++] = spawn_args.zygotes[i];
        }
        argv[argc] = NULL;
        sigemptyset(&none);
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
                /* Our blocked signals (SIGTERM, SIGINT: read by signalfd)
                 * would stay blocked across execve. */
                sigprocmask(SIG_SETMASK, &none, NULL);
                /* dup2 clears close-on-exec on the copy at HOST_FD; a
                 * descriptor already there keeps it unless told. */
                if (sv[1] == HOST_FD ? fcntl(HOST_FD, F_SETFD, 0) < 0 : dup2(sv[1], HOST_FD) < 0)
                        _exit(127);
                /* Only the link: not a listening socket or any other
                 * descriptor the loop made without close-on-exec. */
                syscall(SYS_close_range, HOST_FD + 1, ~0u, 0);
                execve(spawn_args.program, argv, envp);
                _exit(127);
        }
        close(sv[1]);
        host_fd = sv[0];
        host_pid = pid;
        fcntl(host_fd, F_SETFL, fcntl(host_fd, F_GETFL) | O_NONBLOCK);
        return 0;
}

static void take_hello(json_t *body)
{
        struct hostmsg_hello hello;

        if (hostmsg_hello_decode(body, &hello) < 0) {
                log_error("malformed hello from the kernel-host: no limit counts as enforced");
                hello.controllers = 0;
                hello.checkpoints = false;
                snprintf(hello.checkpoint_off, sizeof(hello.checkpoint_off),
                         "the kernel-host's hello was malformed");
        }
        host_controller_bits = hello.controllers;
        checkpoints_on = hello.checkpoints;
        snprintf(checkpoint_off, sizeof(checkpoint_off), "%s", hello.checkpoint_off);
}

bool host_checkpoints(const char **why)
{
        if (why)
                *why = checkpoints_on ? "" : checkpoint_off;
        return checkpoints_on;
}

void host_set_checkpoints(bool on, const char *why)
{
        checkpoints_on = on;
        snprintf(checkpoint_off, sizeof(checkpoint_off), "%s", why ? why : "");
}

void host_set_checkpoints_dir(const char *dir, const char *criu, int compress_after)
{
        snprintf(spawn_args.checkpoints_dir, sizeof(spawn_args.checkpoints_dir), "%s",
                 dir ? dir : "");
        snprintf(spawn_args.criu, sizeof(spawn_args.criu), "%s", criu ? criu : "");
        snprintf(spawn_args.compress_after, sizeof(spawn_args.compress_after), "%d",
                 compress_after);
}

void host_set_sandbox_stock(int n)
{
        if (n > 0)
                snprintf(spawn_args.sandbox_stock, sizeof(spawn_args.sandbox_stock), "%d", n);
        else
                spawn_args.sandbox_stock[0] = '\0';
}

/* The kernel-host's first message says which limits it can enforce; every
 * request for limits is checked against it, so none is served before. */
static int wait_hello(int timeout_ms)
{
        struct pollfd p = {host_fd, POLLIN, 0};
        enum hostmsg_type type;
        json_t *body = NULL;
        int rc;

        do {
                rc = poll(&p, 1, timeout_ms);
        } while (rc < 0 && errno == EINTR);
        if (rc == 0)
                return -ETIMEDOUT;
        rc = rc < 0 ? -errno : hostmsg_recv(host_fd, &type, &body, NULL, NULL);
        if (rc == 0 && type != HOSTMSG_HELLO)
                rc = -EBADMSG;
        if (rc == 0)
                take_hello(body);
        json_decref(body);
        return rc;
}

unsigned host_controllers(void)
{
        return host_controller_bits;
}

int host_spawn(const char *runtime_dir, const char *log_level, char *const *zygotes,
               int max_restarts, const char *home_dir)
{
        int rc = find_program(spawn_args.program, sizeof(spawn_args.program));

        if (rc < 0) {
                log_error("cannot find " HOST_PROGRAM " beside glovebox or in %s",
                          GLOVEBOX_LIBEXECDIR);
                return rc;
        }
        snprintf(spawn_args.runtime_dir, sizeof(spawn_args.runtime_dir), "%s", runtime_dir);
        snprintf(spawn_args.log_level, sizeof(spawn_args.log_level), "%s", log_level);
        snprintf(spawn_args.home_dir, sizeof(spawn_args.home_dir), "%s", home_dir ? home_dir : "");
        spawn_args.zygotes = zygotes;
        spawn_args.max_restarts = max_restarts;
        rc = start_process();
        if (rc == 0) {
                rc = wait_hello(30000);
                if (rc < 0)
                        log_error("no hello from the kernel-host: %s", strerror(-rc));
        }
        return rc;
}

int host_adopt(int fd, int pid, unsigned controllers, const char *runtime_dir,
               const char *log_level, char *const *zygotes, int max_restarts, const char *home_dir)
{
        int rc = find_program(spawn_args.program, sizeof(spawn_args.program));

        /* Without the program a replacement cannot start; this one runs. */
        if (rc < 0)
                log_warn("cannot find " HOST_PROGRAM ": a kernel-host that dies is not replaced");
        snprintf(spawn_args.runtime_dir, sizeof(spawn_args.runtime_dir), "%s", runtime_dir);
        snprintf(spawn_args.log_level, sizeof(spawn_args.log_level), "%s", log_level);
        snprintf(spawn_args.home_dir, sizeof(spawn_args.home_dir), "%s", home_dir ? home_dir : "");
        spawn_args.zygotes = zygotes;
        spawn_args.max_restarts = rc < 0 ? 0 : max_restarts;
        /* The link must be a socket, and the pid our own child: anything
         * else means the record does not describe this process. */
        if (pid <= 0 || waitpid(pid, NULL, WNOHANG) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                return -ESRCH;
        host_fd = fd;
        host_pid = pid;
        host_controller_bits = controllers;
        fcntl(host_fd, F_SETFL, fcntl(host_fd, F_GETFL) | O_NONBLOCK);
        return 0;
}

int host_keep_link(int *fd, int *pid)
{
        if (host_fd < 0)
                return -EPIPE;
        /* Across execve: the new image takes the same link. */
        if (fcntl(host_fd, F_SETFD, 0) < 0)
                return -errno;
        *fd = host_fd;
        *pid = (int)host_pid;
        return 0;
}

/* Who asked for what: reports are routed back by id. */
struct listener {
        struct listener *next;
        char id[JP_UUID_SIZE];
        const struct host_sandbox_ops *sandbox;
        const struct host_process_ops *process;
        host_connected_fn connected;
        void *ctx;
};

static struct listener *listeners;
static void (*on_lost)(void);

static host_layer_sealed_fn on_layer_sealed;

static struct listener *listener_find(const char *id)
{
        for (struct listener *l = listeners; l; l = l->next) {
                if (strcmp(l->id, id) == 0)
                        return l;
        }
        return NULL;
}

static int listener_add(const char *id, const struct host_sandbox_ops *sandbox,
                        const struct host_process_ops *process, void *ctx)
{
        struct listener *l;

        if (listener_find(id))
                return -EEXIST;
        l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        snprintf(l->id, sizeof(l->id), "%s", id);
        l->sandbox = sandbox;
        l->process = process;
        l->ctx = ctx;
        l->next = listeners;
        listeners = l;
        return 0;
}

static void listener_remove(struct listener *l)
{
        for (struct listener **link = &listeners; *link; link = &(*link)->next) {
                if (*link == l) {
                        *link = l->next;
                        free(l);
                        return;
                }
        }
}

static void close_fds(int *fds, size_t nfds)
{
        for (size_t i = 0; i < nfds; i++)
                close(fds[i]);
}

/* Routes one report; returns -EBADMSG when it does not decode. */
static int dispatch(enum hostmsg_type type, json_t *body, int *fds, size_t nfds)
{
        union {
                struct hostmsg_sandbox_ready ready;
                struct hostmsg_started started;
                struct hostmsg_failed failed;
                struct hostmsg_exit exit;
                struct hostmsg_connected connected;
                struct hostmsg_layer layer;
        } m;
        struct listener *l;
        int rc = -EBADMSG;

        switch (type) {
        case HOSTMSG_SANDBOX_READY:
                rc = hostmsg_sandbox_ready_decode(body, &m.ready);
                l = rc == 0 && nfds == 1 ? listener_find(m.ready.sandbox_id) : NULL;
                if (l && l->sandbox)
                        l->sandbox->ready(l->ctx, &m.ready, fds[0]);
                if (rc == 0)
                        hostmsg_sandbox_ready_clear(&m.ready);
                if (l && l->sandbox)
                        return 0;
                break;
        case HOSTMSG_SANDBOX_FAILED:
        case HOSTMSG_START_FAILED:
                rc = hostmsg_failed_decode(body, &m.failed);
                l = rc == 0 ? listener_find(m.failed.id) : NULL;
                if (l && l->sandbox && type == HOSTMSG_SANDBOX_FAILED) {
                        const struct host_sandbox_ops *ops = l->sandbox;
                        void *ctx = l->ctx;

                        listener_remove(l);
                        ops->failed(ctx, &m.failed);
                } else if (l && l->process && type == HOSTMSG_START_FAILED) {
                        const struct host_process_ops *ops = l->process;
                        void *ctx = l->ctx;

                        listener_remove(l);
                        ops->failed(ctx, &m.failed);
                }
                break;
        case HOSTMSG_SANDBOX_GONE:
        case HOSTMSG_EXITED:
                rc = hostmsg_exit_decode(body, &m.exit);
                l = rc == 0 ? listener_find(m.exit.id) : NULL;
                if (l && l->sandbox && type == HOSTMSG_SANDBOX_GONE) {
                        const struct host_sandbox_ops *ops = l->sandbox;
                        void *ctx = l->ctx;

                        listener_remove(l);
                        ops->gone(ctx, &m.exit);
                } else if (l && l->process && type == HOSTMSG_EXITED) {
                        const struct host_process_ops *ops = l->process;
                        void *ctx = l->ctx;

                        listener_remove(l);
                        ops->exited(ctx, &m.exit);
                }
                break;
        case HOSTMSG_LAYER_SEALED:
                rc = hostmsg_layer_decode(body, &m.layer);
                if (rc == 0 && on_layer_sealed)
                        on_layer_sealed(m.layer.id, m.layer.error);
                break;
        case HOSTMSG_HELLO:
                /* A replacement's: the same machine, but said again. */
                take_hello(body);
                rc = 0;
                break;
        case HOSTMSG_CONNECTED:
        case HOSTMSG_VOLUME_OPENED:
                rc = hostmsg_connected_decode(body, &m.connected);
                l = rc == 0 ? listener_find(m.connected.id) : NULL;
                /* A socket comes with success, and only then. */
                if (rc == 0 && (m.connected.error == 0) != (nfds == 1))
                        rc = -EBADMSG;
                if (rc == 0 && l && l->connected) {
                        host_connected_fn done = l->connected;
                        void *ctx = l->ctx;

                        listener_remove(l);
                        done(ctx, m.connected.error, nfds == 1 ? fds[0] : -1);
                        return 0;
                }
                break;
        case HOSTMSG_CHECKPOINTED:
        case HOSTMSG_SANDBOX_RELIMITED:
                rc = hostmsg_failed_decode(body, &m.failed);
                if (rc == 0)
                        host_answer(type, &m.failed);
                break;
        case HOSTMSG_STARTED:
                rc = hostmsg_started_decode(body, &m.started);
                l = rc == 0 ? listener_find(m.started.id) : NULL;
                if (l && l->process) {
                        l->process->started(l->ctx, &m.started, fds, nfds);
                        return 0;
                }
                break;
        default:
                break;
        }
        close_fds(fds, nfds);
        return rc;
}

/* The kernel-host died: every object that was waiting for it hears it
 * is gone. Those that ask the new kernel-host for something meanwhile (a
 * kernel restarting) are listeners of the new one, not told. */
static void lose_everything(void)
{
        struct listener *lost = listeners;

        host_answers_lose();
        listeners = NULL;
        /* Sandboxes first: a kernel that hears of its own death next
         * restarts in a new sandbox, not in its dead one. */
        for (int pass = 0; pass < 2; pass++) {
                struct listener **link = &lost;

                while (*link) {
                        struct listener *l = *link;
                        struct hostmsg_exit ex = {.exit_code = -1, .signal = SIGKILL};

                        if ((pass == 0) != (l->sandbox != NULL)) {
                                link = &l->next;
                                continue;
                        }
                        *link = l->next;
                        snprintf(ex.id, sizeof(ex.id), "%s", l->id);
                        snprintf(ex.reason, sizeof(ex.reason), "host-lost");
                        if (l->sandbox)
                                l->sandbox->gone(l->ctx, &ex);
                        else if (l->connected)
                                l->connected(l->ctx, EPIPE, -1);
                        else
                                l->process->exited(l->ctx, &ex);
                        free(l);
                }
        }
}

static void on_link(void *arg);

/* Waits for the kernel-host to exit, at most timeout_ms, then kills it. */
static int reap(int timeout_ms)
{
        struct timespec start, now;
        int status = 0;

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
        return status;
}

/* The link broke: the kernel-host died (or closed it, which it does only
 * when exiting). Its sandboxes died with it. A new one takes over, within
 * --max-host-restarts, and then every kernel that waited for the old one
 * hears that it died (and restarts on the new one); past that limit the
 * gateway must not run on without one: on_lost ends it. */
static void host_lost(void)
{
        pid_t pid = host_pid;
        int status;
        bool replaced = false;

        loop_unwatch(&host_watch);
        close(host_fd);
        host_fd = -1;
        status = reap(2000);
        if (WIFSIGNALED(status))
                log_error("the kernel-host (pid %d) died: killed by signal %d", (int)pid,
                          WTERMSIG(status));
        else
                log_error("the kernel-host (pid %d) exited with status %d", (int)pid,
                          WEXITSTATUS(status));
        if (spawn_args.restarts < spawn_args.max_restarts) {
                spawn_args.restarts++;
                if (start_process() == 0 &&
                    loop_watch_fd(host_fd, on_link, NULL, &host_watch) == 0) {
                        replaced = true;
                        metrics_kernel_host_restarted();
                        log_warn("started a new kernel-host (pid %d; %d of %d replacements)",
                                 (int)host_pid, spawn_args.restarts, spawn_args.max_restarts);
                } else {
                        log_error("cannot start a new kernel-host");
                }
        } else {
                log_error("no new kernel-host: --max-host-restarts (%d) reached",
                          spawn_args.max_restarts);
        }
        lose_everything();
        if (!replaced && on_lost)
                on_lost();
}

static void on_link(void *arg)
{
        for (;;) {
                enum hostmsg_type type;
                json_t *body;
                int fds[HOSTMSG_MAX_FDS];
                size_t nfds = 0;
                int rc = hostmsg_recv(host_fd, &type, &body, fds, &nfds);

                if (rc == -EAGAIN)
                        return;
                if (rc == -EBADMSG) {
                        log_error("malformed message from the kernel-host dropped");
                        continue;
                }
                if (rc < 0) {
                        log_error("the link to the kernel-host broke (%s)", strerror(-rc));
                        host_lost();
                        return;
                }
                if (dispatch(type, body, fds, nfds) < 0)
                        log_error("unexpected message %d from the kernel-host dropped", (int)type);
                json_decref(body);
        }
}

int host_listen(const char *id, const struct host_sandbox_ops *sandbox,
                const struct host_process_ops *process, void *ctx)
{
        return listener_add(id, sandbox, process, ctx);
}

bool host_running(void)
{
        return host_fd >= 0;
}

int host_process_id(void)
{
        return host_fd >= 0 ? (int)host_pid : -1;
}

int host_attach(void (*lost)(void))
{
        on_lost = lost;
        return loop_watch_fd(host_fd, on_link, NULL, &host_watch);
}

int host_send_json(enum hostmsg_type type, json_t *body)
{
        int rc = !body         ? -ENOMEM
                 : host_fd < 0 ? -EPIPE
                               : hostmsg_send(host_fd, type, body, NULL, 0);

        json_decref(body);
        return rc;
}

int host_sandbox_create(const struct hostmsg_sandbox *req, const struct host_sandbox_ops *ops,
                        void *ctx)
{
        json_t *body = hostmsg_sandbox_encode(req);
        struct hostmsg_sandbox check;
        int rc = body ? 0 : -ENOMEM;

        /* What the kernel-host would refuse is not sent: its decoder is
         * the rule (ro_paths, egress rules and their bounds). */
        if (rc == 0 && hostmsg_sandbox_decode(body, &check) < 0) {
                log_warn("sandbox %s: request not sent: past the bounds of SANDBOX_CREATE",
                         fleetid_short(req->sandbox_id).s);
                rc = -EINVAL;
        } else if (rc == 0) {
                hostmsg_sandbox_clear(&check);
        }
        if (rc == 0)
                rc = listener_add(req->sandbox_id, ops, NULL, ctx);
        if (rc == 0) {
                rc = host_send_json(HOSTMSG_SANDBOX_CREATE, body);
                body = NULL;
        }
        json_decref(body);
        if (rc < 0 && rc != -EEXIST)
                listener_remove(listener_find(req->sandbox_id));
        return rc;
}

static int send_signal(enum hostmsg_type type, const char *id, int signal)
{
        struct hostmsg_signal m = {.signal = signal};

        snprintf(m.id, sizeof(m.id), "%s", id);
        return host_send_json(type, hostmsg_signal_encode(&m));
}

int host_sandbox_destroy(const char *sandbox_id)
{
        return send_signal(HOSTMSG_SANDBOX_DESTROY, sandbox_id, 0);
}

int host_sandbox_priority(const char *sandbox_id, bool background)
{
        return send_signal(HOSTMSG_SANDBOX_PRIORITY, sandbox_id, background ? 1 : 0);
}

void host_set_layers_dir(const char *dir)
{
        snprintf(spawn_args.layers_dir, sizeof(spawn_args.layers_dir), "%s", dir ? dir : "");
}

void host_on_layer_sealed(host_layer_sealed_fn fn)
{
        on_layer_sealed = fn;
}

int host_layer_delete(const char *layer_id)
{
        struct hostmsg_layer m = {.error = 0};

        snprintf(m.id, sizeof(m.id), "%s", layer_id);
        return host_send_json(HOSTMSG_LAYER_DELETE, hostmsg_layer_encode(&m));
}

int host_start(const struct hostmsg_start *req, const struct host_process_ops *ops, void *ctx)
{
        char why[256];
        int rc = hostmsg_start_check(req, why, sizeof(why));

        /* The kernel-host would refuse it: said here, at once, rather than
         * as a failure that comes back. Callers check their requests first
         * with the same rules; this is the last line. */
        if (rc < 0) {
                klog_warn(req->id, "start request not sent: %s", why);
                return rc;
        }
        rc = listener_add(req->id, NULL, ops, ctx);

        if (rc == 0)
                rc = host_send_json(HOSTMSG_START, hostmsg_start_encode(req));
        if (rc < 0 && rc != -EEXIST)
                listener_remove(listener_find(req->id));
        return rc;
}

int host_connect(const struct hostmsg_connect *req, host_connected_fn done, void *ctx)
{
        /* The kernel-host's decoder takes no other port: never sent. */
        int rc =
            req->port >= 1 && req->port <= 65535 ? listener_add(req->id, NULL, NULL, ctx) : -EINVAL;

        if (rc == 0) {
                listener_find(req->id)->connected = done;
                rc = host_send_json(HOSTMSG_CONNECT, hostmsg_connect_encode(req));
                if (rc < 0)
                        listener_remove(listener_find(req->id));
        }
        return rc;
}

void host_set_volumes_dir(const char *dir)
{
        snprintf(spawn_args.volumes_dir, sizeof(spawn_args.volumes_dir), "%s", dir ? dir : "");
}

int host_volume_open(const struct hostmsg_volume *req, host_connected_fn done, void *ctx)
{
        int rc = listener_add(req->id, NULL, NULL, ctx);

        if (rc == 0) {
                listener_find(req->id)->connected = done;
                rc = host_send_json(HOSTMSG_VOLUME_OPEN, hostmsg_volume_encode(req));
                if (rc < 0)
                        listener_remove(listener_find(req->id));
        }
        return rc;
}

int host_volume_delete(const char *volume_id)
{
        struct hostmsg_volume m = {.size_mb = 0};

        snprintf(m.volume_id, sizeof(m.volume_id), "%s", volume_id);
        snprintf(m.id, sizeof(m.id), "%s", volume_id);
        return host_send_json(HOSTMSG_VOLUME_DELETE, hostmsg_volume_encode(&m));
}

void host_unlisten(const char *id, void *ctx)
{
        struct listener *l = listener_find(id);

        if (l && l->ctx == ctx)
                listener_remove(l);
}

void host_connect_cancel(const char *id)
{
        struct listener *l = listener_find(id);

        if (l && l->connected)
                listener_remove(l);
}

int host_sandbox_restore(const char *sandbox_id, const char *name, bool copy,
                         const struct host_sandbox_ops *ops, void *ctx)
{
        struct hostmsg_volume m = {.size_mb = 0, .copy = copy};
        int rc = listener_add(sandbox_id, ops, NULL, ctx);

        snprintf(m.id, sizeof(m.id), "%s", sandbox_id);
        snprintf(m.volume_id, sizeof(m.volume_id), "%s", name);
        if (rc == 0) {
                rc = host_send_json(HOSTMSG_RESTORE, hostmsg_volume_encode(&m));
                if (rc < 0)
                        listener_remove(listener_find(sandbox_id));
        }
        return rc;
}

int host_checkpoint_delete(const char *name)
{
        struct hostmsg_volume m = {.size_mb = 0};

        snprintf(m.id, sizeof(m.id), "%s", name);
        snprintf(m.volume_id, sizeof(m.volume_id), "%s", name);
        return host_send_json(HOSTMSG_CHECKPOINT_DELETE, hostmsg_volume_encode(&m));
}

int host_signal(const char *id, int signal)
{
        return send_signal(HOSTMSG_SIGNAL, id, signal);
}

int host_stop(const char *id)
{
        return send_signal(HOSTMSG_STOP, id, 0);
}

void host_close(int timeout_ms)
{
        loop_unwatch(&host_watch);
        if (host_fd >= 0) {
                /* The loop's watch holds a duplicate of the descriptor;
                 * shutdown() ends the connection for both at once. */
                shutdown(host_fd, SHUT_RDWR);
                close(host_fd);
                host_fd = -1;
        }
        if (host_pid > 0)
                reap(timeout_ms);
}
