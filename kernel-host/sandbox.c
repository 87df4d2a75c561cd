#include "autoconf.h"

#include "kernel-host/sandbox.h"
#include "kernel-host/loopback.h"
#include "kernel-host/homecache.h"
#include "kernel-host/confine.h"
#include "kernel-host/init_report.h"
#include "kernel-host/overlay.h"
#include "kernel-host/seccomp.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static struct sock_fprog seccomp_program;
static int exits_ep = -1; /* every sandbox's report pipe (init_report.h) */
static int cap_last = CAP_LAST_CAP;
static char *title_area;
static size_t title_len;
static bool usr_warned; /* said once: the host's /usr cannot be idmapped */

int sandbox_init(void)
{
        FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
        int rc;

        /* Each init reports on a pipe of its own (a pipe, not a socket: a
         * socket belongs to a network namespace, and a checkpoint of the
         * sandbox could not take one from ours); one epoll set holds them
         * all, each event naming its sandbox. */
        exits_ep = epoll_create1(EPOLL_CLOEXEC);
        if (exits_ep < 0) {
                rc = -errno;
                log_error("epoll: %s", strerror(-rc));
                return rc;
        }
        if (f) {
                if (fscanf(f, "%d", &cap_last) != 1)
                        cap_last = CAP_LAST_CAP;
                fclose(f);
        }
        rc = seccomp_policy_build(&seccomp_program);
        if (rc < 0)
                log_error("cannot build the seccomp filter: %s", strerror(-rc));
        /* Asked (and said) once, at start. */
        overlay_available();
        if (!rootfs_init_found())
                log_error("no " INIT_PROGRAM " beside the kernel-host: no sandbox can start");
        return rc;
}

int sandbox_exits_fd(void)
{
        return exits_ep;
}

int sandbox_exit_next(pid_t *init_pid, pid_t *pid, int *status)
{
        struct epoll_event ev;

        /* Level-triggered, one at a time: a pipe read empty is not ready
         * again, so the next wait yields the next sandbox. */
        while (epoll_wait(exits_ep, &ev, 1, 0) == 1) {
                int fd = (int)(ev.data.u64 & 0xffffffffu);
                struct init_exit rec;
                ssize_t n;

                do {
                        n = read(fd, &rec, sizeof(rec));
                } while (n < 0 && errno == EINTR);
                /* Records are smaller than PIPE_BUF: whole or none. */
                if (n == (ssize_t)sizeof(rec)) {
                        *init_pid = (pid_t)(ev.data.u64 >> 32);
                        *pid = rec.pid;
                        *status = rec.status;
                        return 0;
                }
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        continue;
                /* Its init is gone: nothing more will come (the pipe is
                 * closed with the sandbox). */
                epoll_ctl(exits_ep, EPOLL_CTL_DEL, fd, NULL);
        }
        return -EAGAIN;
}

void sandbox_set_title_area(char *start, size_t len)
{
        title_area = start;
        title_len = len;
}

void sandbox_confine_view(const struct sandbox *sb, struct confine_sandbox *view)
{
        *view = (struct confine_sandbox){.ns_fds = sb->ns_fds,
                                         .run_fd = sb->run_fd,
                                         .privileged = sb->ids.privileged,
                                         .disk_mb = sb->limits.disk_mb,
                                         .pids = sb->limits.pids,
                                         .cap_last = cap_last,
                                         .filter = &seccomp_program};
}

/* ---- in children: async-signal-safe calls only --------------------------- */

struct create_args {
        const struct rootfs *rootfs;
        const char *root_dir;
        const struct sandbox_ids *ids;
};

int sandbox_recv_fd(int sock)
{
        char byte, space[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = space,
                             .msg_controllen = sizeof(space)};
        struct cmsghdr *c;
        ssize_t n;
        int fd;

        do {
                n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        } while (n < 0 && errno == EINTR);
        c = n == 1 ? CMSG_FIRSTHDR(&msg) : NULL;
        if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
                return -1;
        memcpy(&fd, CMSG_DATA(c), sizeof(fd));
        return fd;
}

int sandbox_send_fd(int sock, int fd)
{
        char byte = 'g', space[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = space,
                             .msg_controllen = sizeof(space)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        ssize_t n;

        memset(space, 0, sizeof(space));
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(fd));
        do {
                n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n == 1 ? 0 : -errno;
}

static __attribute__((noreturn)) void init_main(const struct create_args *args, int sync_fd)
{
        static char *const init_argv[] = {INIT_PROGRAM, NULL};
        static char *const init_envp[] = {NULL};
        struct confine_report ready;
        struct overlay_fds mounts;
        const char *step;
        int report, null_fd, top;

        /* The go-ahead brings the detached mounts along (overlay.h): a
         * template's tree or the host's /usr, a disk home, layers. */
        if (overlay_recv_go(sync_fd, &mounts) < 0)
                _exit(127);
        if (title_area && title_len > sizeof("glovebox-init")) {
                memset(title_area, 0, title_len);
                memcpy(title_area, "glovebox-init", sizeof("glovebox-init"));
        }
        /* Become the sandbox's root: our host id (0) has no mapping here, and
         * files cannot be created by an unmapped id. */
        if (args->ids->privileged && (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))
                confine_fail(sync_fd, "become sandbox root", errno);
        /* The sandbox dies with the kernel-host, however it dies (killed
         * with SIGKILL it cleans nothing up): init's death ends the pid
         * namespace. Set after the id change above, which clears it; a
         * kernel-host gone before this line shows as the end of sync_fd
         * below. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
                confine_fail(sync_fd, "parent death signal", errno);
        /* Now in the sandbox's cgroup: its cgroup namespace hides the rest. */
        if (unshare(CLONE_NEWCGROUP) < 0)
                confine_fail(sync_fd, "unshare cgroup namespace", errno);
        /* Nothing we mount may propagate back to the host. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                confine_fail(sync_fd, "make mounts private", errno);
        if (rootfs_apply(args->rootfs, &mounts, &step) < 0)
                confine_fail(sync_fd, step, errno);
        /* Attached now (or not needed): init keeps no descriptor. */
        confine_close_fds_except(sync_fd);
        /* The tmpfs top (its layers, /tmp and home), which pivot_root
         * leaves reachable nowhere: the kernel-host keeps it for
         * checkpoints (checkpoint.h). */
        top = open(args->root_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (top < 0)
                confine_fail(sync_fd, "open the sandbox's top", errno);
        if (sethostname("glovebox", 8) < 0)
                confine_fail(sync_fd, "sethostname", errno);
        if (loopback_up() < 0)
                confine_fail(sync_fd, "loopback up", errno);
        /* pivot_root(".", ".") stacks the old root under the new one; the
         * detach then drops the host's whole tree from this namespace. */
        if (chdir(rootfs_root(args->rootfs)) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
                confine_fail(sync_fd, "pivot_root", errno);
        if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
                confine_fail(sync_fd, "detach old root", errno);
        /* An overlay's root stays writable: its upper layer is the
         * sandbox's, on its size-limited tmpfs (rootfs.h). */
        if (!rootfs_writable_root(args->rootfs) &&
            mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                confine_fail(sync_fd, "read-only root", errno);
        /* Before anything of the sandbox runs, so its home is still the
         * one the plan made. Without the links only speed is lost. */
        (void)homecache_link(HOMECACHE_MOUNT, ROOTFS_HOME, ROOTFS_USER_UID);
        confine_report_init(&ready, CONFINE_STARTED);
        confine_report_send(sync_fd, &ready);
        if (sandbox_send_fd(sync_fd, top) < 0)
                _exit(127);
        close(top);
        /* The kernel-host now opens our namespaces and root, which an
         * undumpable process would refuse an unprivileged kernel-host,
         * and sends the socket init reports on. */
        report = sandbox_recv_fd(sync_fd);
        if (report < 0)
                _exit(127); /* the kernel-host is gone */
        /* init keeps no privilege: no capabilities, no descriptor but its
         * report socket, a session of its own (a checkpoint takes a
         * sandbox whose sessions all begin inside it). */
        if (confine_drop_capabilities() < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                confine_fail(sync_fd, "drop privileges", errno);
        if (setsid() < 0)
                confine_fail(sync_fd, "setsid", errno);
        /* Both sockets high first, so that neither lands on the other. */
        report = fcntl(report, F_DUPFD_CLOEXEC, 10);
        sync_fd = fcntl(sync_fd, F_DUPFD_CLOEXEC, 10);
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (report < 0 || sync_fd < 0 || null_fd < 0 || dup2(null_fd, 0) < 0 ||
            dup2(null_fd, 1) < 0 || dup2(null_fd, 2) < 0 || dup2(report, INIT_REPORT_FD) < 0 ||
            dup2(sync_fd, INIT_REPORT_FD + 1) < 0)
                _exit(127);
        /* The sync socket closes on exec: the kernel-host's sign that
         * init runs. The report socket stays open across it. */
        sync_fd = INIT_REPORT_FD + 1;
        if (fcntl(sync_fd, F_SETFD, FD_CLOEXEC) < 0 ||
            syscall(SYS_close_range, (unsigned int)sync_fd + 1, ~0u, 0u) < 0)
                confine_fail(sync_fd, "close descriptors", errno);
        execve(INIT_COMMAND, init_argv, init_envp);
        confine_fail(sync_fd, "exec init", errno);
}

/* ---- the parent ------------------------------------------------------------ */

void sandbox_fail_set(struct hostmsg_failed *fail, const char *step, int error)
{
        snprintf(fail->step, sizeof(fail->step), "%s", step);
        fail->error = error;
        snprintf(fail->message, sizeof(fail->message), "sandbox step \"%s\" failed: %s", step,
                 strerror(error));
}

static int write_proc(pid_t pid, const char *file, const char *text)
{
        char path[64];
        int fd, rc = 0;

        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (write(fd, text, strlen(text)) < 0)
                rc = -errno;
        close(fd);
        return rc;
}

/* As root each sandbox gets its own unprivileged host ids: its root (for
 * setup) and "user". Unprivileged, our own id is the only one we may map. */
int sandbox_write_id_maps(pid_t pid, const struct sandbox_ids *ids)
{
        char map[128];
        int rc;

        if (ids->privileged) {
                snprintf(map, sizeof(map), "0 %u 1\n%d %u 1\n", (unsigned)ids->setup_uid,
                         ROOTFS_USER_UID, (unsigned)ids->user_uid);
                rc = write_proc(pid, "uid_map", map);
                snprintf(map, sizeof(map), "0 %u 1\n%d %u 1\n", (unsigned)ids->setup_gid,
                         ROOTFS_USER_UID, (unsigned)ids->user_gid);
                return rc < 0 ? rc : write_proc(pid, "gid_map", map);
        }
        snprintf(map, sizeof(map), "%d %u 1\n", ROOTFS_USER_UID, (unsigned)ids->user_uid);
        rc = write_proc(pid, "uid_map", map);
        if (rc == 0)
                rc = write_proc(pid, "setgroups", "deny");
        snprintf(map, sizeof(map), "%d %u 1\n", ROOTFS_USER_UID, (unsigned)ids->user_gid);
        return rc < 0 ? rc : write_proc(pid, "gid_map", map);
}

static const char *const ns_names[SANDBOX_NAMESPACES] = {"user", "mnt", "pid",   "net",
                                                         "ipc",  "uts", "cgroup"};

/* sb with no descriptor yet. */
static void handles_init(struct sandbox *sb)
{
        for (int i = 0; i < SANDBOX_NAMESPACES; i++)
                sb->ns_fds[i] = -1;
        sb->root_fd = -1;
        sb->run_fd = -1;
        sb->report_fd = -1;
        sb->top_fd = -1;
}

static void close_handles(struct sandbox *sb)
{
        for (int i = 0; i < SANDBOX_NAMESPACES; i++) {
                if (sb->ns_fds[i] >= 0)
                        close(sb->ns_fds[i]);
                sb->ns_fds[i] = -1;
        }
        if (sb->root_fd >= 0)
                close(sb->root_fd);
        sb->root_fd = -1;
        if (sb->run_fd >= 0)
                close(sb->run_fd);
        sb->run_fd = -1;
        if (sb->report_fd >= 0)
                close(sb->report_fd); /* and out of the epoll set */
        sb->report_fd = -1;
        if (sb->top_fd >= 0)
                close(sb->top_fd);
        sb->top_fd = -1;
}

/* Opens the sandbox's namespaces (to start processes in it) and its root
 * (for the gateway's file access), while init still lets us. */
static int open_handles(pid_t pid, struct sandbox *sb)
{
        const struct open_how run_how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
                                                    RESOLVE_NO_MAGICLINKS};
        char path[64];

        for (int i = 0; i < SANDBOX_NAMESPACES; i++) {
                snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns_names[i]);
                sb->ns_fds[i] = open(path, O_RDONLY | O_CLOEXEC);
                if (sb->ns_fds[i] < 0)
                        return -errno;
        }
        snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
        sb->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (sb->root_fd < 0)
                return -errno;
        /* Resolved once, now, while init is the only process inside, and
         * never through a symlink: what we write there later goes by this
         * descriptor, whatever the sandbox's processes do to names. */
        sb->run_fd =
            (int)syscall(SYS_openat2, sb->root_fd, ROOTFS_RUN_DIR + 1, &run_how, sizeof(run_how));
        return sb->run_fd < 0 ? -errno : 0;
}

/* Clones the sandbox's init with its namespaces; 0 in the child, its pid
 * or -errno in the caller. On cgroup v2 it starts in the sandbox's group
 * (clone3's CLONE_INTO_CGROUP, *in_group true) instead of being moved
 * there (cgroup_attach): a move waits for an RCU grace period, and the
 * kernel-host with it, on every sandbox made. (It still moves once, into
 * its leaf below the group, once its cgroup namespace is rooted at the
 * group: cgroup_hand_down.) The group's descriptor reaches the host's
 * cgroup tree: the child closes it before anything else. */
static pid_t clone_init(const struct kernel_cgroup *cg, bool *in_group)
{
        const uint64_t ns =
            CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
        const char *dirs[CGROUP_CONTROLLERS];
        unsigned ndirs = cgroup_dir_list(cg, dirs);
        int group_fd = -1;
        pid_t pid;

        if (confine_can_start_in_group())
                group_fd = confine_open_start_group(dirs, ndirs);
        *in_group = group_fd >= 0;
        if (group_fd < 0) {
                /* fork-like: the child runs on a copy of our stack. */
                pid = (pid_t)syscall(SYS_clone, ns | SIGCHLD, NULL, NULL, NULL, NULL);
                return pid < 0 ? -errno : pid;
        }
        {
                struct confine_clone_args args = {.flags = ns | CLONE_INTO_CGROUP,
                                                  .exit_signal = SIGCHLD,
                                                  .cgroup = (uint64_t)group_fd};

                pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        }
        if (pid < 0)
                pid = -errno;
        close(group_fd);
        return pid;
}

int sandbox_create(const char *root_dir, const char *cgroup_name,
                   const struct hostmsg_limits *limits, char *const *ro_paths,
                   const char *template_root, const char *resolv_conf,
                   const struct overlay_fds *given, const struct sandbox_ids *ids,
                   struct sandbox *sb, struct hostmsg_failed *fail)
{
        const bool tpl = template_root && template_root[0];
        const bool overlay = overlay_available();
        /* The lowest layer: a template's tree, or the host's /usr. */
        const char *lower = tpl ? template_root : "/usr";
        const struct rootfs_params params = {
            .root = root_dir,
            .disk_mb = limits->disk_mb,
            .ro_paths = ro_paths,
            .template_root = template_root,
            .lower_by_fd = ids->privileged && (tpl || overlay),
            .resolv_conf = resolv_conf,
            .home_by_fd = given->home >= 0,
            .overlay = overlay,
            .nlayers = given->nlayers,
            .build_by_fd = given->build >= 0,
            .volume_paths = given->volume_paths,
            .nvolumes = given->nvolumes,
        };
        struct overlay_fds mounts = *given;
        struct create_args args = {NULL, root_dir, ids};
        struct rootfs *rootfs = NULL;
        struct confine_report report;
        char err[HOSTMSG_ERROR_SIZE];
        struct epoll_event ev = {.events = EPOLLIN};
        int report_pipe[2] = {-1, -1};
        int sv[2] = {-1, -1};
        pid_t pid = -1;
        bool in_group;
        int status;
        int rc;

        mounts.lower = -1; /* ours: opened below */
        memset(sb, 0, sizeof(*sb));
        handles_init(sb);
        sb->ids = *ids;
        sb->limits = *limits;
        rc = rootfs_plan(&params, &rootfs);
        if (rc < 0) {
                sandbox_fail_set(fail, rootfs_init_found() ? "plan" : "find " INIT_PROGRAM, -rc);
                return rc;
        }
        args.rootfs = rootfs;
        rc = cgroup_create(cgroup_name, limits, &sb->cgroup, err, sizeof(err));
        if (rc < 0) {
                sandbox_fail_set(fail, "cgroup", -rc);
                snprintf(fail->message, sizeof(fail->message), "cgroup: %s", err);
                goto out;
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                rc = -errno;
                sandbox_fail_set(fail, "socketpair", errno);
                goto fail;
        }
        /* The cgroup namespace comes later, once the child is in its
         * cgroup. */
        pid = clone_init(&sb->cgroup, &in_group);
        if (pid < 0) {
                rc = pid;
                pid = -1;
                sandbox_fail_set(fail, in_group ? "start in cgroup" : "clone", -rc);
                goto fail;
        }
        if (pid == 0) {
                close(sv[0]);
                init_main(&args, sv[1]);
        }
        close(sv[1]);
        sv[1] = -1;
        rc = sandbox_write_id_maps(pid, ids);
        if (rc < 0) {
                sandbox_fail_set(fail, "uid/gid map", -rc);
                goto kill;
        }
        rc = in_group ? 0 : cgroup_attach(&sb->cgroup, pid);
        if (rc < 0) {
                sandbox_fail_set(fail, "cgroup attach", -rc);
                goto kill;
        }
        if (params.lower_by_fd) {
                bool idmapped;

                rc = overlay_lower_open(lower, pid, &mounts.lower, &idmapped);
                if (rc < 0) {
                        sandbox_fail_set(fail, tpl ? "template tree" : "host /usr", -rc);
                        goto kill;
                }
                if (!idmapped && tpl)
                        log_warn("template %s: its filesystem has no idmapped mounts; its "
                                 "sandboxes can write only their home and /tmp",
                                 template_root);
                if (!idmapped && !tpl && !usr_warned) {
                        usr_warned = true;
                        log_warn("the host's /usr is on a filesystem without idmapped mounts: "
                                 "a sandbox's root cannot write its /usr (/usr/local)");
                }
        }
        /* A built template's layers, and a build's new one, are owned as
         * the sandbox that built them saw them: idmapped through this one. */
        for (size_t i = 0; rc == 0 && i < mounts.nlayers; i++)
                rc = overlay_idmap(mounts.layers[i], pid, true);
        if (rc == 0 && mounts.build >= 0)
                rc = overlay_idmap(mounts.build, pid, false);
        if (rc < 0) {
                sandbox_fail_set(fail, "template layers", -rc);
                goto kill;
        }
        /* A volume's files are owned as every sandbox sees them. */
        for (size_t i = 0; rc == 0 && i < mounts.nvolumes; i++)
                rc = overlay_idmap(mounts.volumes[i], pid, false);
        if (rc < 0) {
                sandbox_fail_set(fail, "volumes", -rc);
                goto kill;
        }
        if ((mounts.nlayers > 0 || mounts.build >= 0) && !overlay) {
                rc = -ENODEV;
                sandbox_fail_set(fail, "template layers need overlayfs", -rc);
                goto kill;
        }
        rc = overlay_send_go(sv[0], &mounts);
        if (rc < 0) {
                sandbox_fail_set(fail, "start child", -rc);
                goto kill;
        }
        rc = confine_report_wait(sv[0], &report, SANDBOX_SETUP_TIMEOUT_MS);
        if (rc < 0) {
                sandbox_fail_set(fail, rc == -ETIMEDOUT ? "setup timeout" : "sandbox child died",
                                 -rc);
                goto kill;
        }
        if (report.kind != CONFINE_STARTED) {
                rc = -(report.error ? report.error : EIO);
                sandbox_fail_set(fail, report.step, -rc);
                goto kill;
        }
        sb->top_fd = sandbox_recv_fd(sv[0]);
        if (sb->top_fd < 0) {
                rc = -EIO;
                sandbox_fail_set(fail, "sandbox's top", EIO);
                goto kill;
        }
        rc = open_handles(pid, sb);
        if (rc < 0) {
                sandbox_fail_set(fail, "open namespaces", -rc);
                goto kill;
        }
        /* Its cgroup namespace is rooted at the sandbox's group now. */
        rc = cgroup_hand_down(&sb->cgroup, pid);
        if (rc < 0) {
                sandbox_fail_set(fail, "cgroup hand down", -rc);
                goto kill;
        }
        if (pipe2(report_pipe, O_CLOEXEC) < 0 || fcntl(report_pipe[0], F_SETFL, O_NONBLOCK) < 0) {
                rc = -errno;
                sandbox_fail_set(fail, "report pipe", errno);
                goto kill;
        }
        ev.data.u64 = ((uint64_t)(uint32_t)pid << 32) | (uint32_t)report_pipe[0];
        if (epoll_ctl(exits_ep, EPOLL_CTL_ADD, report_pipe[0], &ev) < 0) {
                rc = -errno;
                sandbox_fail_set(fail, "report pipe", errno);
                goto kill;
        }
        sb->report_fd = report_pipe[0];
        report_pipe[0] = -1;
        rc = sandbox_send_fd(sv[0], report_pipe[1]);
        if (rc < 0) {
                sandbox_fail_set(fail, "start init", -rc);
                goto kill;
        }
        /* Its end of sv closes as init executes; a failure comes first. */
        rc = confine_report_wait(sv[0], &report, SANDBOX_SETUP_TIMEOUT_MS);
        if (rc == 0) {
                rc = -(report.error ? report.error : EIO);
                sandbox_fail_set(fail, report.step, -rc);
                goto kill;
        }
        if (rc != -EPIPE) {
                sandbox_fail_set(fail, "exec init", -rc);
                goto kill;
        }
        sb->init_pid = pid;
        rc = 0;
        goto out;
kill:
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close_handles(sb);
fail:
        cgroup_destroy(&sb->cgroup);
out:
        if (mounts.lower >= 0)
                close(mounts.lower);
        if (sv[0] >= 0)
                close(sv[0]);
        if (sv[1] >= 0)
                close(sv[1]);
        for (int i = 0; i < 2; i++) {
                if (report_pipe[i] >= 0)
                        close(report_pipe[i]);
        }
        rootfs_free(&rootfs);
        return rc;
}

int sandbox_adopt(pid_t init_pid, int report_fd, int top_fd, const struct sandbox_ids *ids,
                  const struct hostmsg_limits *limits, const struct kernel_cgroup *cgroup,
                  struct sandbox *sb)
{
        struct epoll_event ev = {.events = EPOLLIN};
        int rc;

        memset(sb, 0, sizeof(*sb));
        handles_init(sb);
        sb->ids = *ids;
        sb->limits = *limits;
        sb->cgroup = *cgroup;
        rc = open_handles(init_pid, sb);
        if (rc == 0 && fcntl(report_fd, F_SETFL, O_NONBLOCK) < 0)
                rc = -errno;
        ev.data.u64 = ((uint64_t)(uint32_t)init_pid << 32) | (uint32_t)report_fd;
        if (rc == 0 && epoll_ctl(exits_ep, EPOLL_CTL_ADD, report_fd, &ev) < 0)
                rc = -errno;
        if (rc < 0) {
                close_handles(sb);
                return rc;
        }
        sb->report_fd = report_fd;
        sb->top_fd = top_fd;
        sb->init_pid = init_pid;
        return 0;
}

int sandbox_write_resolv(int root_fd, const char *text)
{
        /* Non-blocking: a FIFO put in its place fails the open. */
        const struct open_how how = {
            .flags = O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        size_t len = strlen(text), done = 0;
        struct stat st;
        int fd = (int)syscall(SYS_openat2, root_fd, "etc/resolv.conf", &how, sizeof(how));
        int rc = 0;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                rc = -errno;
        else if (!S_ISREG(st.st_mode))
                rc = -EINVAL;
        else if (ftruncate(fd, 0) < 0)
                rc = -errno;
        while (rc == 0 && done < len) {
                ssize_t n = write(fd, text + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        rc = n < 0 ? -errno : -EIO;
                else
                        done += (size_t)n;
        }
        close(fd);
        return rc;
}

int sandbox_pty_of(int *master, const struct sandbox_ids *ids, const struct winsize *size,
                   int *peer)
{
        int unlock = 0, rc = 0;

        *peer = -1;
        if (ioctl(*master, TIOCSPTLCK, &unlock) < 0 ||
            (size && ioctl(*master, TIOCSWINSZ, size) < 0)) {
                rc = -errno;
                goto out;
        }
        /* The peer is opened from the master, not by a path in the
         * sandbox's /dev/pts. */
        *peer = ioctl(*master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (*peer < 0) {
                rc = -errno;
                goto out;
        }
        /* Made by us, it is ours; the shell's user must own it (mesg,
         * tty, ssh-like tools check that). */
        if (ids && ids->privileged && fchown(*peer, ids->user_uid, ids->user_gid) < 0)
                rc = -errno;
out:
        if (rc < 0) {
                close(*master);
                if (*peer >= 0)
                        close(*peer);
                *master = *peer = -1;
        }
        return rc;
}

int sandbox_open_pty(const struct sandbox *sb, unsigned rows, unsigned cols, int *master, int *peer)
{
        /* Inside the sandbox, resolved beneath its root without following
         * any link: its /dev/ptmx is a link, and nothing the sandbox can
         * write may steer where we open. */
        const struct open_how how = {
            .flags = O_RDWR | O_NOCTTY | O_CLOEXEC,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        struct winsize size = {.ws_row = (unsigned short)(rows ? rows : 24),
                               .ws_col = (unsigned short)(cols ? cols : 80)};
        struct stat st;
        int rc = 0;

        *peer = -1;
        if (sb)
                *master = (int)syscall(SYS_openat2, sb->root_fd, "dev/pts/ptmx", &how, sizeof(how));
        else
                *master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (*master < 0)
                return -errno;
        /* A multiplexer is character device 5:2, in any devpts instance. */
        if (fstat(*master, &st) < 0)
                rc = -errno;
        else if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 5 || minor(st.st_rdev) != 2)
                rc = -ENOTTY;
        if (rc < 0) {
                close(*master);
                *master = -1;
                return rc;
        }
        return sandbox_pty_of(master, sb ? &sb->ids : NULL, &size, peer);
}

void sandbox_kill(const struct sandbox *sb)
{
        /* init's death ends the pid namespace: the kernel sends SIGKILL to
         * every process left in it. */
        if (sb->init_pid > 0)
                kill(sb->init_pid, SIGKILL);
}

bool sandbox_dying(const struct sandbox *sb)
{
        char path[64], text[1024];
        unsigned long flags = 0;
        const char *p;
        char state = 0;
        ssize_t n;
        int fd;

        if (sb->init_pid <= 0)
                return true;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)sb->init_pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return true;
        n = read(fd, text, sizeof(text) - 1);
        close(fd);
        if (n <= 0)
                return true;
        text[n] = '\0';
        /* "pid (comm) state ppid pgrp session tty tpgid flags ...": the
         * name may hold anything, so fields count from its last ')'. */
        p = strrchr(text, ')');
        if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
                return false;
        /* PF_EXITING is set as init starts to exit, before its pid
         * namespace kills the rest: a process that died of that is seen
         * with init already dying, even before init is a zombie. */
        return state == 'Z' || state == 'X' || (flags & 0x4) != 0;
}

uint64_t sandbox_oom_kills(const struct sandbox *sb)
{
        return cgroup_oom_kills(&sb->cgroup);
}

void sandbox_destroy(struct sandbox *sb)
{
        close_handles(sb);
        cgroup_destroy(&sb->cgroup);
        sb->init_pid = 0;
}
