#include "autoconf.h"

#include "kernel-host/tcp_bridge.h"
#include "kernel-host/spawn.h"
#include "kernel-host/homedisk.h"
#include "kernel-host/layers.h"
#include "kernel-host/net.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/zygote.h"
#include "protocol/connfile.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define IPC_DIR  "ipc"  /* without a sandbox: sockets and connection files */
#define ROOT_DIR "root" /* the sandbox's root mount point */

/* As root, sandbox n runs as host ids ID_BASE + id_offset + 2n (its root)
 * and + 2n + 1 ("user"): ids no other account uses, different for every
 * sandbox and, through id_offset, for every running gateway. */
#define ID_BASE   1000000u
#define MAX_SLOTS 32768

struct box {
        struct box *next;
        char id[JP_UUID_SIZE];
        char run_dir[PATH_MAX];
        char ipc_dir[PATH_MAX + 8]; /* without a sandbox: where the sockets are */
        int plain_ipc_fd;           /* ipc_dir opened (O_PATH), without a sandbox */
        bool sandboxed;
        bool templated; /* its root is a template's tree, not the host's /usr */
        char build_layer[JP_UUID_SIZE]; /* a build's: sealed when the box goes (layers.h) */
        struct sandbox sandbox;
        struct net_egress net; /* slot -1: no network */
        int slot;
        uint64_t oom_seen;  /* out-of-memory kills already reported */
        bool init_alive;
        bool gone_reported; /* SANDBOX_GONE sent: nothing more starts in it */
        int procs;          /* processes not yet reaped */
};

struct proc {
        struct proc *next;
        char id[JP_UUID_SIZE];
        struct box *box;
        pid_t reap;   /* what we wait for: the watcher, or the process itself */
        pid_t pid;    /* the process, leader of its group */
        struct sandbox_process sp;
        struct kernel_cgroup cgroup; /* its own, within the sandbox's */
        bool kernel;                 /* its files (connection, sockets) go when it ends */
};

static const char *runtime;
static unsigned id_offset;
static unsigned char slots[MAX_SLOTS];
static unsigned next_box;
static struct box *boxes;
static struct proc *procs;

int spawn_init(const char *runtime_dir)
{
        runtime = runtime_dir;
        id_offset = ((unsigned)getpid() % 16384u) * 2u * MAX_SLOTS;
        /* Without it, only TCP-only kernels fail, and say why. */
        if (tcp_bridge_init() < 0)
                log_info("no glovebox-kernel-bridge beside the kernel-host: TCP-only kernels "
                         "cannot run");
        return sandbox_init();
}

static int slot_take(void)
{
        for (int i = 0; i < MAX_SLOTS; i++) {
                if (!slots[i]) {
                        slots[i] = 1;
                        return i;
                }
        }
        return -1;
}

static void slot_release(int slot)
{
        if (slot >= 0 && slot < MAX_SLOTS)
                slots[slot] = 0;
}

static void fail_set(struct hostmsg_failed *fail, const char *id, const char *step, int error,
                     const char *detail)
{
        snprintf(fail->id, sizeof(fail->id), "%s", id);
        snprintf(fail->step, sizeof(fail->step), "%s", step);
        fail->error = error;
        snprintf(fail->message, sizeof(fail->message), "%s failed: %s%s%s", step, strerror(error),
                 detail ? ": " : "", detail ? detail : "");
}

static void free_strv(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

/* Replaces "{connection_file}" and "{resource_dir}" as jupyter_client does. */
static char *expand_arg(const char *arg, const char *connection_file, const char *resource_dir)
{
        static const struct {
                const char *name;
                size_t len;
        } vars[] = {{"{connection_file}", 17}, {"{resource_dir}", 14}};
        /* Room for the argument and two paths it names: a kernelspec needs
         * no more, and an argument that grows past that is refused. */
        size_t size = strlen(arg) + 2 * PATH_MAX + 1;
        char *out = malloc(size);
        size_t o = 0;

        for (const char *p = arg; out && *p;) {
                const char *value = NULL;
                size_t skip = 0;

                for (size_t v = 0; v < 2; v++) {
                        if (strncmp(p, vars[v].name, vars[v].len) == 0) {
                                value = v == 0 ? connection_file : resource_dir;
                                skip = vars[v].len;
                        }
                }
                if (!value) {
                        value = p;
                        skip = 1;
                }
                size_t vlen = value == p ? 1 : strlen(value);

                if (o + vlen >= size) {
                        free(out);
                        return NULL;
                }
                memcpy(out + o, value, vlen);
                o += vlen;
                p += skip;
        }
        if (out)
                out[o] = '\0';
        return out;
}

/* A bare program name is looked up in the kernel's PATH here, before fork,
 * because the child may only make async-signal-safe calls. */
static char *resolve_program(const char *name)
{
        static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
        char path[PATH_MAX];

        if (strchr(name, '/'))
                return strdup(name);
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                if ((size_t)snprintf(path, sizeof(path), "%s/%s", dirs[i], name) < sizeof(path) &&
                    access(path, X_OK) == 0)
                        return strdup(path);
        }
        return strdup(name);
}

static char **build_argv(const struct hostmsg_start *req, const char *connection_file)
{
        size_t n = 0;
        char **argv;

        while (req->argv[n])
                n++;
        argv = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; argv && i < n; i++) {
                /* Only a kernelspec's argv names its files; a command's
                 * arguments are the client's, passed on as they are. */
                argv[i] = i == 0 ? resolve_program(req->argv[0])
                          : req->kernel
                              ? expand_arg(req->argv[i], connection_file, req->kernelspec_dir)
                              : strdup(req->argv[i]);
                if (!argv[i]) {
                        free_strv(argv);
                        return NULL;
                }
        }
        return argv;
}

static int env_has(char **envp, size_t n, const char *entry)
{
        size_t name_len = strcspn(entry, "=");

        for (size_t i = 0; i < n; i++) {
                if (strncmp(envp[i], entry, name_len + 1) == 0)
                        return (int)i;
        }
        return -1;
}

/* The kernel's whole environment: a fixed base, then the request's entries
 * (kernelspec env and the client's, validated by the gateway), which may
 * override the base except HOME. Nothing of our own environment leaks. */
static char **build_env(const struct hostmsg_start *req, const char *home)
{
        char home_entry[PATH_MAX + 8];
        const char *base[] = {
                "PATH=" ROOTFS_TOOLS_DIR ":/usr/local/bin:/usr/bin:/bin",
                home_entry,
                "LANG=C.UTF-8",
                "TERM=xterm-256color",
                "MPLBACKEND=module://matplotlib_inline.backend_inline",
        };
        size_t nbase = sizeof(base) / sizeof(base[0]);
        size_t nreq = 0, n = 0;
        char **envp;

        snprintf(home_entry, sizeof(home_entry), "HOME=%s", home);
        while (req->env[nreq])
                nreq++;
        envp = calloc(nbase + nreq + 1, sizeof(char *));
        if (!envp)
                return NULL;
        for (size_t i = 0; i < nbase; i++) {
                envp[n] = strdup(base[i]);
                if (!envp[n++])
                        goto fail;
        }
        for (size_t i = 0; i < nreq; i++) {
                int at = env_has(envp, n, req->env[i]);
                char *copy;

                if (strncmp(req->env[i], "HOME=", 5) == 0)
                        continue;
                copy = strdup(req->env[i]);
                if (!copy)
                        goto fail;
                if (at >= 0) {
                        free(envp[at]);
                        envp[at] = copy;
                } else {
                        envp[n++] = copy;
                }
        }
        return envp;
fail:
        free_strv(envp);
        return NULL;
}

static void remove_run_dir(const char *dir)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd >= 0) {
                tree_remove_at(fd);
                close(fd);
        }
        if (rmdir(dir) < 0 && errno != ENOENT)
                log_warn("cannot remove %s: %s", dir, strerror(errno));
}

static struct box *box_find(const char *id)
{
        for (struct box *b = boxes; b; b = b->next) {
                if (strcmp(b->id, id) == 0)
                        return b;
        }
        return NULL;
}

static struct proc *proc_find(const char *id)
{
        for (struct proc *p = procs; p; p = p->next) {
                if (strcmp(p->id, id) == 0)
                        return p;
        }
        return NULL;
}

/* Without a sandbox, "/" of the box is run_dir/root and home its
 * home/user, so paths read the same in both modes. */
static void box_home(const struct box *b, char *out, size_t size)
{
        if (b->sandboxed)
                snprintf(out, size, ROOTFS_HOME);
        else
                snprintf(out, size, "%s/" ROOT_DIR ROOTFS_HOME, b->run_dir);
}

/* The directory of the box's sockets and connection files: the sandbox's
 * /run/kernel, or ipc_dir without a sandbox. */
static int box_ipc_fd(const struct box *b)
{
        return b->sandboxed ? b->sandbox.run_fd : b->plain_ipc_fd;
}

static void close_mounts(struct overlay_fds *mounts)
{
        if (mounts->home >= 0)
                close(mounts->home);
        if (mounts->build >= 0)
                close(mounts->build);
        for (size_t i = 0; i < mounts->nlayers; i++)
                close(mounts->layers[i]);
        overlay_fds_init(mounts);
}

/* The detached mounts b's sandbox attaches, made here where we are root:
 * a disk home (homedisk.h), a built template's layers and a build's new
 * one (layers.h). The sandbox's setup only attaches them. */
static int open_mounts(struct box *b, const struct hostmsg_sandbox *req,
                       const struct sandbox_ids *ids, struct overlay_fds *mounts,
                       struct hostmsg_failed *fail)
{
        const char *step;
        int rc = 0;

        overlay_fds_init(mounts);
        if (homedisk_enabled() && ids->privileged) {
                rc = homedisk_create(req->limits.disk_mb, ids->user_uid, ids->user_gid,
                                     &mounts->home, &step);
                if (rc < 0) {
                        fail_set(fail, b->id, step, -rc, "the sandbox's disk-backed /home/user");
                        return rc;
                }
        }
        if (((req->layers && req->layers[0]) || req->build_layer[0]) &&
            (!ids->privileged || !layers_enabled())) {
                fail_set(fail, b->id, "template layers", ENODEV,
                         "built templates need a kernel-host running as root with a state "
                         "directory");
                return -ENODEV;
        }
        for (size_t i = 0; req->layers && req->layers[i] && i < OVERLAY_MAX_LAYERS; i++) {
                rc = layers_mount(req->layers[i], &mounts->layers[i]);
                if (rc < 0) {
                        fail_set(fail, b->id, "template layer", -rc, NULL);
                        return rc;
                }
                mounts->nlayers++;
        }
        if (req->build_layer[0]) {
                rc = layers_create(req->build_layer, req->build_layer_mb, &mounts->build, &step);
                if (rc < 0) {
                        fail_set(fail, b->id, step, -rc, "the build's layer");
                        return rc;
                }
                snprintf(b->build_layer, sizeof(b->build_layer), "%s", req->build_layer);
        }
        return 0;
}

int spawn_sandbox_create(const struct hostmsg_sandbox *req, struct hostmsg_sandbox_ready *ready,
                         int *root_fd, struct hostmsg_failed *fail)
{
        struct sandbox_ids ids = {.user_uid = getuid(), .user_gid = getgid()};
        char root[PATH_MAX + 16], path[PATH_MAX + 32];
        char resolv[64] = "";
        struct box *b;
        int rc;

        if (box_find(req->sandbox_id) || proc_find(req->sandbox_id)) {
                fail_set(fail, req->sandbox_id, "register", EEXIST, NULL);
                return -EEXIST;
        }
        b = calloc(1, sizeof(*b));
        if (!b) {
                fail_set(fail, req->sandbox_id, "register", ENOMEM, NULL);
                return -ENOMEM;
        }
        b->slot = -1;
        b->net.slot = -1;
        b->plain_ipc_fd = -1;
        b->sandboxed = req->sandbox;
        b->templated = req->template_root[0] != '\0';
        snprintf(b->id, sizeof(b->id), "%s", req->sandbox_id);
        /* Short names keep socket paths far below their 108-byte limit. */
        snprintf(b->run_dir, sizeof(b->run_dir), "%s/s%u", runtime, next_box++);
        snprintf(b->ipc_dir, sizeof(b->ipc_dir), "%s/" IPC_DIR, b->run_dir);
        snprintf(root, sizeof(root), "%s/" ROOT_DIR, b->run_dir);
        /* Searchable by all: the sandbox's setup runs as an unprivileged
         * host id and must reach its mount points; nothing is listable. A
         * sandbox keeps its sockets in a tmpfs of its own, so only a plain
         * box has a host directory for them. */
        if (mkdir(b->run_dir, 0711) < 0 || (!b->sandboxed && mkdir(b->ipc_dir, 0700) < 0) ||
            mkdir(root, 0755) < 0) {
                rc = -errno;
                fail_set(fail, b->id, "run-dir", errno, NULL);
                goto fail;
        }
        if (b->sandboxed && geteuid() == 0) {
                b->slot = slot_take();
                if (b->slot < 0) {
                        rc = -EAGAIN;
                        fail_set(fail, b->id, "host ids", EAGAIN, NULL);
                        goto fail;
                }
                ids.privileged = true;
                ids.setup_uid = ID_BASE + id_offset + 2u * (unsigned)b->slot;
                ids.user_uid = ids.setup_uid + 1;
                ids.setup_gid = ids.setup_uid;
                ids.user_gid = ids.user_uid;
        }
        if (!b->sandboxed) {
                /* Just made by us in our own directory: nobody else can have
                 * swapped it for a symlink. */
                b->plain_ipc_fd = open(b->ipc_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (b->plain_ipc_fd < 0) {
                        rc = -errno;
                        fail_set(fail, b->id, "run-dir", errno, NULL);
                        goto fail;
                }
        }
        if (req->network.enabled && (!b->sandboxed || geteuid() != 0)) {
                rc = -EPERM;
                fail_set(fail, b->id, "network", EPERM, NULL);
                snprintf(fail->message, sizeof(fail->message),
                         "egress needs a sandbox and a kernel-host running as root");
                goto fail;
        }
        if (req->network.enabled) {
                rc = net_prepare(&b->net, &req->network, resolv, sizeof(resolv), fail);
                snprintf(fail->id, sizeof(fail->id), "%s", b->id);
                if (rc < 0)
                        goto fail;
        }
        if (b->sandboxed) {
                struct overlay_fds mounts;

                rc = open_mounts(b, req, &ids, &mounts, fail);
                if (rc == 0)
                        rc = sandbox_create(root, b->id, &req->limits, req->ro_paths,
                                            req->template_root,
                                            req->network.enabled ? resolv : NULL, &mounts, &ids,
                                            &b->sandbox, fail);
                close_mounts(&mounts);
                snprintf(fail->id, sizeof(fail->id), "%s", b->id);
                if (rc < 0)
                        goto fail;
                b->init_alive = true;
                if (req->network.enabled) {
                        rc = net_attach(&b->net, &req->network, b->sandbox.init_pid,
                                        b->sandbox.ns_fds[SANDBOX_NS_NET], fail);
                        snprintf(fail->id, sizeof(fail->id), "%s", b->id);
                        if (rc < 0) {
                                int status;

                                sandbox_kill(&b->sandbox);
                                waitpid(b->sandbox.init_pid, &status, 0);
                                sandbox_destroy(&b->sandbox);
                                goto fail;
                        }
                }
                snprintf(ready->root, sizeof(ready->root), "/proc/%d/root",
                         (int)b->sandbox.init_pid);
                *root_fd = fcntl(b->sandbox.root_fd, F_DUPFD_CLOEXEC, 3);
        } else {
                snprintf(path, sizeof(path), "%s/home", root);
                if (mkdir(path, 0755) < 0 ||
                    (snprintf(path, sizeof(path), "%s" ROOTFS_HOME, root), mkdir(path, 0700) < 0)) {
                        rc = -errno;
                        fail_set(fail, b->id, "home-dir", errno, NULL);
                        goto fail;
                }
                snprintf(ready->root, sizeof(ready->root), "%s", root);
                *root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        }
        if (*root_fd < 0) {
                rc = -errno;
                fail_set(fail, b->id, "open root", errno, NULL);
                if (b->sandboxed) {
                        int status;

                        sandbox_kill(&b->sandbox);
                        waitpid(b->sandbox.init_pid, &status, 0);
                        sandbox_destroy(&b->sandbox);
                }
                goto fail;
        }
        snprintf(ready->sandbox_id, sizeof(ready->sandbox_id), "%s", b->id);
        ready->init_pid = b->sandboxed ? b->sandbox.init_pid : 0;
        ready->user_uid = ids.user_uid;
        ready->user_gid = ids.user_gid;
        /* Only a privileged kernel-host maps a root into the sandbox. */
        ready->has_root = b->sandboxed && ids.privileged;
        ready->root_uid = ready->has_root ? ids.setup_uid : 0;
        ready->root_gid = ready->has_root ? ids.setup_gid : 0;
        b->next = boxes;
        boxes = b;
        return 0;
fail:
        /* A build that never started leaves no layer. */
        if (b->build_layer[0])
                layers_delete(b->build_layer);
        net_release(&b->net);
        if (b->plain_ipc_fd >= 0)
                close(b->plain_ipc_fd);
        remove_run_dir(b->run_dir);
        slot_release(b->slot);
        free(b);
        return rc;
}

/* Tells the gateway that nothing can start in b any more. */
static void report_gone(struct box *b, void (*report)(enum hostmsg_type, json_t *))
{
        struct hostmsg_exit ex = {.exit_code = 0};

        b->gone_reported = true;
        snprintf(ex.id, sizeof(ex.id), "%s", b->id);
        snprintf(ex.reason, sizeof(ex.reason), "exited");
        if (report)
                report(HOSTMSG_SANDBOX_GONE, hostmsg_exit_encode(&ex));
}

/* Frees a box whose init and processes are all gone. */
static void box_free(struct box *b, void (*report)(enum hostmsg_type, json_t *))
{
        for (struct box **link = &boxes; *link; link = &(*link)->next) {
                if (*link == b) {
                        *link = b->next;
                        break;
                }
        }
        if (b->sandboxed)
                sandbox_destroy(&b->sandbox);
        net_release(&b->net);
        if (b->plain_ipc_fd >= 0)
                close(b->plain_ipc_fd);
        remove_run_dir(b->run_dir);
        slot_release(b->slot);
        log_info("sandbox %.8s removed", b->id);
        if (!b->gone_reported)
                report_gone(b, report);
        /* A build's layer is done: read-only from now on, or gone. */
        if (b->build_layer[0]) {
                struct hostmsg_layer sealed = {.error = -layers_seal(b->build_layer)};

                snprintf(sealed.id, sizeof(sealed.id), "%s", b->build_layer);
                if (report)
                        report(HOSTMSG_LAYER_SEALED, hostmsg_layer_encode(&sealed));
        }
        free(b);
}

int spawn_sandbox_destroy(const char *id)
{
        struct box *b = box_find(id);

        if (!b)
                return -ESRCH;
        if (b->sandboxed) {
                sandbox_kill(&b->sandbox);
        } else {
                for (struct proc *p = procs; p; p = p->next) {
                        if (p->box == b)
                                kill(-p->pid, SIGKILL);
                }
        }
        b->init_alive = b->init_alive && b->sandboxed;
        return 0;
}

/* The kernel's connection file, and its name in the box's ipc directory.
 * Its sockets are named after the kernel's id (its first 8 characters:
 * short, so paths stay far below the 108-byte limit), the same across
 * restarts, so that clients' sockets reconnect by themselves. In a sandbox
 * the prefix given to the gateway is relative to the sandbox's root (the
 * gateway reaches it through its descriptor of that root). */
static void prepare_connection(const struct box *b, const struct hostmsg_start *req,
                               struct jp_connection *conn, char *name, size_t name_size,
                               char *inside, size_t inside_size, char *prefix, size_t prefix_size)
{
        *conn = (struct jp_connection){.transport = "ipc", .signature_scheme = "hmac-sha256"};
        snprintf(name, name_size, "%.8s.json", req->id);
        if (b->sandboxed) {
                snprintf(conn->ip, sizeof(conn->ip), ROOTFS_RUN_DIR "/%.8s", req->id);
                snprintf(inside, inside_size, ROOTFS_RUN_DIR "/%s", name);
                snprintf(prefix, prefix_size, "%s", conn->ip + 1);
        } else {
                snprintf(conn->ip, sizeof(conn->ip), "%s/%.8s", b->ipc_dir, req->id);
                snprintf(inside, inside_size, "%s/%s", b->ipc_dir, name);
                snprintf(prefix, prefix_size, "%s", conn->ip);
        }
        snprintf(conn->key, sizeof(conn->key), "%s", req->key);
        for (int i = 0; i < JP_CHANNEL_COUNT; i++)
                conn->ports[i] = HOSTMSG_PORT(i);
}

/* Removes a kernel's connection file and the sockets it left (a killed
 * kernel cannot remove them itself), so they do not fill /run/kernel. */
static void remove_kernel_files(const struct box *b, const char *id)
{
        char name[32];

        snprintf(name, sizeof(name), "%.8s.json", id);
        unlinkat(box_ipc_fd(b), name, 0);
        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                snprintf(name, sizeof(name), "%.8s-%d", id, HOSTMSG_PORT(i));
                unlinkat(box_ipc_fd(b), name, 0);
                /* And as kernels that name them <ip>:<port> do. */
                snprintf(name, sizeof(name), "%.8s:%d", id, HOSTMSG_PORT(i));
                unlinkat(box_ipc_fd(b), name, 0);
        }
}

/* What a plain child reports through its sync pipe when a step fails. */
struct child_failure {
        char step[32];
        int error;
};

/* Runs in the child: only async-signal-safe calls until execve. */
static __attribute__((noreturn)) void plain_fail(int fd, const char *step, int error)
{
        struct child_failure f = {.error = error};
        size_t len = strlen(step);

        memcpy(f.step, step, len < sizeof(f.step) - 1 ? len : sizeof(f.step) - 1);
        (void)!write(fd, &f, sizeof(f));
        _exit(127);
}

static __attribute__((noreturn)) void child_exec(char **argv, char **envp, const char *cwd,
                                                 const int stdio[3], bool tty, int null_fd,
                                                 int sync_fd, pid_t parent)
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* It dies with us, as a sandbox does with its init; a parent gone
         * before this line shows as a new parent. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
                plain_fail(sync_fd, "parent death signal", errno);
        if (getppid() != parent)
                plain_fail(sync_fd, "parent death signal", ESRCH);
        /* Its own session and process group, so an interrupt reaches the
         * process and whatever it started, and nothing else. */
        if (setsid() < 0)
                plain_fail(sync_fd, "setsid", errno);
        for (int i = 0; i < 3; i++) {
                if (dup2(stdio[i] >= 0 ? stdio[i] : null_fd, i) < 0)
                        plain_fail(sync_fd, "stdio", errno);
        }
        if (tty && ioctl(0, TIOCSCTTY, 0) < 0)
                plain_fail(sync_fd, "controlling terminal", errno);
        /* Nothing else is inherited: not the gateway link, nor any other. */
        for (int fd = 3; fd < 4096; fd++) {
                if (fd != sync_fd)
                        close(fd);
        }
        if (chdir(cwd) < 0)
                plain_fail(sync_fd, "chdir", errno);
        execve(argv[0], argv, envp);
        plain_fail(sync_fd, "exec", errno);
}

/* Without a sandbox: a plain child in its own session. */
static int start_plain(struct proc *p, char **argv, char **envp, const char *cwd,
                       const int stdio[3], bool tty, struct hostmsg_failed *fail)
{
        struct child_failure child = {0};
        int sync[2] = {-1, -1};
        int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        ssize_t got;
        pid_t pid, parent;
        int rc;

        if (null_fd < 0 || pipe2(sync, O_CLOEXEC) < 0) {
                rc = -errno;
                fail_set(fail, p->id, "pipe", errno, NULL);
                goto out;
        }
        parent = getpid();
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                fail_set(fail, p->id, "fork", errno, NULL);
                goto out;
        }
        if (pid == 0)
                child_exec(argv, envp, cwd, stdio, tty, null_fd, sync[1], parent);
        close(sync[1]);
        sync[1] = -1;
        /* EOF means execve succeeded (the pipe closed on exec). */
        do {
                got = read(sync[0], &child, sizeof(child));
        } while (got < 0 && errno == EINTR);
        if (got == (ssize_t)sizeof(child)) {
                child.step[sizeof(child.step) - 1] = '\0';
                waitpid(pid, NULL, 0);
                rc = -child.error;
                fail_set(fail, p->id, child.step, child.error, argv[0]);
                goto out;
        }
        p->pid = pid;
        p->reap = pid;
        rc = 0;
out:
        if (null_fd >= 0)
                close(null_fd);
        if (sync[0] >= 0)
                close(sync[0]);
        if (sync[1] >= 0)
                close(sync[1]);
        return rc;
}

static void close_pair(int pair[2])
{
        for (int i = 0; i < 2; i++) {
                if (pair[i] >= 0)
                        close(pair[i]);
                pair[i] = -1;
        }
}

int spawn_start(const struct hostmsg_start *req, struct hostmsg_started *started, int fds[3],
                size_t *nfds, struct hostmsg_failed *fail)
{
        struct box *b = box_find(req->sandbox_id);
        char inside[PATH_MAX + 32], home[PATH_MAX + 32], conn_name[32];
        char bridge_prefix[sizeof(((struct jp_connection *)0)->ip)] = "";
        struct jp_connection bridge_conn;
        char **argv = NULL, **envp = NULL, *conn_text = NULL;
        int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
        int stdio[3] = {-1, -1, -1};
        int pty_master = -1, pty_peer = -1;
        struct proc *p = NULL;
        const char *cwd;
        int rc;

        *nfds = 0;
        memset(started, 0, sizeof(*started));
        if (!b || b->gone_reported ||
            (b->sandboxed && (!b->init_alive || sandbox_dying(&b->sandbox)))) {
                fail_set(fail, req->id, "find sandbox", ESRCH, NULL);
                return -ESRCH;
        }
        if (proc_find(req->id) || box_find(req->id)) {
                fail_set(fail, req->id, "register", EEXIST, NULL);
                return -EEXIST;
        }
        /* A sandbox's root exists only where its user namespace maps one
         * (sandbox.c, write_id_maps); never run "root" as anyone else. */
        if (req->as_root && (!b->sandboxed || !b->sandbox.ids.privileged)) {
                fail_set(fail, req->id, "user root", EPERM,
                         "user 'root' needs a sandbox made by a kernel-host running as root");
                return -EPERM;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                fail_set(fail, req->id, "register", ENOMEM, NULL);
                return -ENOMEM;
        }
        p->sp.status_fd = -1;
        snprintf(p->id, sizeof(p->id), "%s", req->id);
        p->box = b;
        p->kernel = req->kernel;
        box_home(b, home, sizeof(home));
        cwd = req->cwd[0] ? req->cwd : home;
        if (!b->sandboxed && req->cwd[0])
                cwd = home; /* without a sandbox, paths inside mean nothing */
        if (req->kernel) {
                struct jp_connection conn;

                prepare_connection(b, req, &conn, conn_name, sizeof(conn_name), inside,
                                   sizeof(inside), started->ipc_prefix,
                                   sizeof(started->ipc_prefix));
                if (req->tcp_bridge) {
                        snprintf(bridge_prefix, sizeof(bridge_prefix), "%s", conn.ip);
                        tcp_bridge_connection(&conn, req->id);
                        bridge_conn = conn;
                }
                /* In a sandbox its root writes the file (sandbox_exec);
                 * without one the directory and the kernel are ours. */
                if (b->sandboxed) {
                        conn_text = jp_connection_dump(&conn);
                        rc = conn_text ? 0 : -ENOMEM;
                } else {
                        rc = jp_connection_write_at(&conn, b->plain_ipc_fd, conn_name,
                                                    (uid_t)-1, (gid_t)-1);
                }
                if (rc < 0) {
                        fail_set(fail, req->id, "connection-file", -rc, NULL);
                        goto fail;
                }
                /* Its output goes to the gateway, which keeps the last
                 * lines: a kernel that fails to start says why there. */
                if (pipe2(pipes[2], O_CLOEXEC) < 0) {
                        rc = -errno;
                        fail_set(fail, req->id, "pipe", errno, NULL);
                        goto fail;
                }
                stdio[1] = stdio[2] = pipes[2][1];
        } else if (req->pty) {
                /* A terminal: the master goes to the gateway, the peer is
                 * all three of the process's stdio. */
                rc = sandbox_open_pty(b->sandboxed ? &b->sandbox : NULL, req->rows, req->cols,
                                      &pty_master, &pty_peer);
                if (rc < 0) {
                        fail_set(fail, req->id, "pseudo-terminal", -rc, NULL);
                        goto fail;
                }
                stdio[0] = stdio[1] = stdio[2] = pty_peer;
                inside[0] = '\0';
        } else {
                /* A command talks through pipes the gateway reads. */
                for (int i = 0; i < 3; i++) {
                        if (pipe2(pipes[i], O_CLOEXEC) < 0) {
                                rc = -errno;
                                fail_set(fail, req->id, "pipe", errno, NULL);
                                goto fail;
                        }
                }
                stdio[0] = pipes[0][0];
                stdio[1] = pipes[1][1];
                stdio[2] = pipes[2][1];
                inside[0] = '\0';
        }
        argv = build_argv(req, inside);
        if (argv && req->kernel && req->tcp_bridge) {
                argv = tcp_bridge_argv(argv, bridge_prefix, &bridge_conn);
                if (!argv) {
                        rc = -ENOENT;
                        fail_set(fail, req->id, "tcp-bridge", ENOENT,
                                 "glovebox-kernel-bridge is not installed beside the kernel-host");
                        goto fail;
                }
        }
        envp = build_env(req, home);
        if (!argv || !envp) {
                rc = -ENOMEM;
                fail_set(fail, req->id, "prepare", ENOMEM, NULL);
                goto fail;
        }
        if (b->sandboxed) {
                struct sandbox_exec ex = {.argv = argv,
                                          .envp = envp,
                                          .cwd = cwd,
                                          .stdio = {stdio[0], stdio[1], stdio[2]},
                                          .cgroup = &p->cgroup,
                                          .conn_name = req->kernel ? conn_name : NULL,
                                          .conn_text = conn_text,
                                          .tty = req->pty,
                                          .as_root = req->as_root};
                char name[JP_UUID_SIZE + 8], err[HOSTMSG_ERROR_SIZE];

                /* A group of its own: what it starts, even in a new session,
                 * can be killed with it. */
                snprintf(name, sizeof(name), "p-%s", req->id);
                rc = cgroup_create_child(&b->sandbox.cgroup, name, &p->cgroup, err, sizeof(err));
                if (rc < 0) {
                        fail_set(fail, req->id, "cgroup", -rc, err);
                        goto fail;
                }
                /* A zygote's modules are the host's: only a sandbox on
                 * the host's /usr sees the same files. */
                rc = -ENOENT;
                if (req->kernel && !req->tcp_bridge && !b->templated &&
                    zygote_fits(req->zygote, argv, envp)) {
                        rc = zygote_exec(req->zygote, &b->sandbox, &ex, &p->sp, fail);
                        if (rc == 0)
                                klog_debug(req->id, "forked from zygote %s", req->zygote);
                }
                if (rc == -ENOENT)
                        rc = sandbox_exec(&b->sandbox, &ex, &p->sp, fail);
                snprintf(fail->id, sizeof(fail->id), "%s", req->id);
                p->pid = p->sp.pid;
                p->reap = p->sp.watcher;
        } else {
                rc = start_plain(p, argv, envp, cwd, stdio, req->pty, fail);
        }
        if (rc < 0)
                goto fail;
        if (req->kernel) {
                fds[0] = pipes[2][0];
                pipes[2][0] = -1;
                *nfds = 1;
        } else if (req->pty) {
                fds[0] = pty_master;
                pty_master = -1;
                *nfds = 1;
        } else {
                fds[0] = pipes[0][1];
                fds[1] = pipes[1][0];
                fds[2] = pipes[2][0];
                pipes[0][1] = pipes[1][0] = pipes[2][0] = -1;
                *nfds = 3;
        }
        for (int i = 0; i < 3; i++)
                close_pair(pipes[i]);
        if (pty_peer >= 0)
                close(pty_peer);
        snprintf(started->id, sizeof(started->id), "%s", req->id);
        started->pid = p->pid;
        b->procs++;
        p->next = procs;
        procs = p;
        free_strv(argv);
        free_strv(envp);
        free(conn_text);
        return 0;
fail:
        for (int i = 0; i < 3; i++)
                close_pair(pipes[i]);
        if (pty_master >= 0)
                close(pty_master);
        if (pty_peer >= 0)
                close(pty_peer);
        if (req->kernel)
                remove_kernel_files(b, req->id);
        cgroup_destroy(&p->cgroup);
        free(p);
        free_strv(argv);
        free_strv(envp);
        free(conn_text);
        return rc;
}

int spawn_signal(const char *id, int sig)
{
        struct proc *p = proc_find(id);

        if (!p)
                return -ESRCH;
        return kill(-p->pid, sig) < 0 ? -errno : 0;
}

int spawn_stop(const char *id)
{
        struct proc *p = proc_find(id);

        if (!p)
                return -ESRCH;
        kill(-p->pid, SIGKILL);
        /* And what left the process group with setsid: all in its cgroup
         * but the watcher, which is to report the exit. */
        if (p->box->sandboxed)
                cgroup_kill(&p->cgroup, p->reap);
        return 0;
}

static void proc_exited(struct proc *p, int status, void (*report)(enum hostmsg_type, json_t *))
{
        struct box *b = p->box;
        struct hostmsg_exit ex = {.pid = p->pid};
        uint64_t ooms;
        bool oom = false;

        if (b->sandboxed) {
                status = sandbox_process_status(&p->sp, status);
                /* A SIGKILL while a kill counter moved: the memory limit did
                 * it. cgroup v1 counts a kill in the victim's own group, v2
                 * in the sandbox's (and in the process's, after
                 * cgroup_hand_down). */
                ooms = sandbox_oom_kills(&b->sandbox);
                oom = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
                      (ooms > b->oom_seen || cgroup_oom_kills(&p->cgroup) > 0);
                b->oom_seen = ooms;
                /* A kernel leaves nothing behind, not even what it started in
                 * a session of its own; a command's background processes live
                 * on (as E2B's do), and its group with them until the sandbox
                 * goes. */
                if (p->kernel)
                        cgroup_destroy(&p->cgroup);
                else
                        cgroup_remove_if_empty(&p->cgroup);
        } else {
                kill(-p->pid, SIGKILL); /* stragglers of its group */
        }
        snprintf(ex.id, sizeof(ex.id), "%s", p->id);
        if (WIFSIGNALED(status)) {
                ex.exit_code = -1;
                ex.signal = WTERMSIG(status);
        } else {
                ex.exit_code = WEXITSTATUS(status);
        }
        snprintf(ex.reason, sizeof(ex.reason), "%s",
                 oom                 ? "out-of-memory"
                 : b->gone_reported  ? "sandbox-died"
                 : WIFSIGNALED(status) ? "signaled"
                                       : "exited");
        log_debug("process %.8s ended: %s (code %d, signal %d)", p->id, ex.reason, ex.exit_code,
                  ex.signal);
        if (p->kernel)
                remove_kernel_files(b, p->id);
        for (struct proc **link = &procs; *link; link = &(*link)->next) {
                if (*link == p) {
                        *link = p->next;
                        break;
                }
        }
        free(p);
        b->procs--;
        if (report)
                report(HOSTMSG_EXITED, hostmsg_exit_encode(&ex));
}

int spawn_sandbox_netns(const char *id, int *userns_fd, int *netns_fd)
{
        struct box *b = box_find(id);

        if (!b || !b->init_alive || b->gone_reported)
                return -ESRCH;
        if (!b->sandboxed)
                return -EPERM;
        *userns_fd = b->sandbox.ns_fds[0];
        *netns_fd = b->sandbox.ns_fds[SANDBOX_NS_NET];
        return 0;
}

void spawn_reap(pid_t pid, int status, void (*report)(enum hostmsg_type, json_t *))
{
        for (struct proc *p = procs; p; p = p->next) {
                if (p->reap == pid) {
                        struct box *b = p->box;

                        /* It may have died because its sandbox's init did:
                         * then the gateway hears first that the sandbox is
                         * gone, and starts the next one in a new sandbox. */
                        if (b->sandboxed && !b->gone_reported &&
                            (!b->init_alive || sandbox_dying(&b->sandbox)))
                                report_gone(b, report);
                        proc_exited(p, status, report);
                        if (!b->init_alive && b->procs == 0)
                                box_free(b, report);
                        return;
                }
        }
        for (struct box *b = boxes; b; b = b->next) {
                if (b->sandboxed && b->sandbox.init_pid == pid) {
                        /* Its processes die with it; each is reported as its
                         * watcher is reaped, after the sandbox itself. */
                        b->init_alive = false;
                        if (b->procs == 0)
                                box_free(b, report);
                        else if (!b->gone_reported)
                                report_gone(b, report);
                        return;
                }
        }
        net_reaped(pid);
}

void spawn_stop_all(void (*report)(enum hostmsg_type, json_t *))
{
        for (struct box *b = boxes; b; b = b->next)
                spawn_sandbox_destroy(b->id);
        while (boxes) {
                int status;
                pid_t pid = waitpid(-1, &status, 0);

                if (pid < 0 && errno == EINTR)
                        continue;
                if (pid < 0)
                        break;
                spawn_reap(pid, status, report);
        }
        /* Boxes without a sandbox and without processes have nothing to reap. */
        while (boxes)
                box_free(boxes, report);
}
