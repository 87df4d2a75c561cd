#include "autoconf.h"

#include "kernel-host/sandbox.h"
#include "protocol/log.h"

#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT                      (1 << 0)
#define SECBIT_NOROOT_LOCKED               (1 << 1)
#define SECBIT_NO_SETUID_FIXUP             (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED      (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED            (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE        (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

#define SETUP_TIMEOUT_MS 30000
#define ROOT_TMPFS       "mode=0755,size=4m,nr_inodes=4096"

/* ---- what the child does, planned by the parent ------------------------- */

enum op_kind {
        OP_DIR,         /* mkdir target */
        OP_FILE,        /* create target with data as its content */
        OP_SYMLINK,     /* target -> source */
        OP_TMPFS,       /* tmpfs on target, options in data */
        OP_BIND,        /* bind source on target; read-only unless OP_WRITABLE */
        OP_PROC,        /* a new proc on target */
        OP_DEVPTS,      /* a private devpts on target */
};

#define OP_WRITABLE   1u /* bind stays writable */
#define OP_KEEP_FLAGS 2u /* bind keeps its source's flags (device nodes) */

struct mount_op {
        enum op_kind kind;
        unsigned options;
        unsigned long flags; /* mount flags (tmpfs, proc) or remount flags (bind) */
        char *target;
        char *source;
        char *data;
        char step[64]; /* named in errors: "bind /usr" */
};

/* What init reports to the kernel-host over the sync socket. */
enum report_kind { REPORT_STARTED = 1, REPORT_FAILED = 2, REPORT_EXIT = 3 };

struct report {
        int kind;
        int error;  /* errno, for REPORT_FAILED */
        int status; /* the kernel's wait status, for REPORT_EXIT */
        char step[64];
};

struct plan {
        const struct sandbox_request *req;
        char root[PATH_MAX];
        struct mount_op *ops;
        size_t nops, cap;
        int cap_last;
        struct rlimit rl_fsize, rl_nproc;
        bool set_nproc;
};

static char *dup_or_null(const char *s)
{
        return s ? strdup(s) : NULL;
}

static int add_op(struct plan *p, enum op_kind kind, const char *target, const char *source,
                  const char *data, unsigned long flags, unsigned options, const char *step)
{
        struct mount_op *op;

        if (p->nops == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 64;
                struct mount_op *grown = realloc(p->ops, cap * sizeof(*grown));

                if (!grown)
                        return -ENOMEM;
                p->ops = grown;
                p->cap = cap;
        }
        op = &p->ops[p->nops];
        memset(op, 0, sizeof(*op));
        op->kind = kind;
        op->flags = flags;
        op->options = options;
        op->target = malloc(strlen(p->root) + strlen(target) + 1);
        op->source = dup_or_null(source);
        op->data = dup_or_null(data);
        if (!op->target || (source && !op->source) || (data && !op->data)) {
                free(op->target);
                free(op->source);
                free(op->data);
                return -ENOMEM;
        }
        memcpy(op->target, p->root, strlen(p->root));
        memcpy(op->target + strlen(p->root), target, strlen(target) + 1);
        snprintf(op->step, sizeof(op->step), "%s", step);
        p->nops++;
        return 0;
}

static void plan_free(struct plan *p)
{
        for (size_t i = 0; i < p->nops; i++) {
                free(p->ops[i].target);
                free(p->ops[i].source);
                free(p->ops[i].data);
        }
        free(p->ops);
        p->ops = NULL;
        p->nops = 0;
}

/* Flags a read-only remount must keep: inside a user namespace the kernel
 * refuses to clear nosuid, nodev, noexec or atime flags that the source
 * mount has ("locked" flags), as bubblewrap also learned. */
static unsigned long locked_flags(const char *source)
{
        struct statvfs st;
        unsigned long flags = 0;

        if (statvfs(source, &st) < 0)
                return 0;
        if (st.f_flag & ST_NOSUID)
                flags |= MS_NOSUID;
        if (st.f_flag & ST_NODEV)
                flags |= MS_NODEV;
        if (st.f_flag & ST_NOEXEC)
                flags |= MS_NOEXEC;
        if (st.f_flag & ST_NOATIME)
                flags |= MS_NOATIME;
        if (st.f_flag & ST_NODIRATIME)
                flags |= MS_NODIRATIME;
        if (st.f_flag & ST_RELATIME)
                flags |= MS_RELATIME;
        return flags;
}

/* Adds a read-only bind of host path at the same path inside, creating
 * the mount point (a directory or an empty file) first. Symlinks are
 * recreated as symlinks. Missing paths are skipped. */
static int add_host_path(struct plan *p, const char *path)
{
        char step[64], link[PATH_MAX];
        struct stat st;
        ssize_t n;
        int rc;

        if (lstat(path, &st) < 0)
                return 0;
        snprintf(step, sizeof(step), "bind %s", path);
        if (S_ISLNK(st.st_mode)) {
                n = readlink(path, link, sizeof(link) - 1);
                if (n < 0)
                        return 0;
                link[n] = '\0';
                return add_op(p, OP_SYMLINK, path, link, NULL, 0, 0, step);
        }
        rc = add_op(p, S_ISDIR(st.st_mode) ? OP_DIR : OP_FILE, path, NULL, "", 0, 0, step);
        if (rc == 0)
                rc = add_op(p, OP_BIND, path, path, NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(path), 0, step);
        return rc;
}

/* Creates every missing directory of path (relative to the new root). */
static int add_parents(struct plan *p, const char *path)
{
        char partial[PATH_MAX];
        int rc = 0;

        for (const char *s = strchr(path + 1, '/'); rc == 0 && s; s = strchr(s + 1, '/')) {
                snprintf(partial, sizeof(partial), "%.*s", (int)(s - path), path);
                rc = add_op(p, OP_DIR, partial, NULL, NULL, 0, 0, "mkdir");
        }
        return rc;
}

static const char passwd_file[] = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                  "user:x:1000:1000:user:/home/user:/bin/bash\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char group_file[] = "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n";
static const char hosts_file[] = "127.0.0.1\tlocalhost glovebox\n::1\tlocalhost ip6-localhost\n";
static const char nsswitch_file[] = "passwd: files\ngroup: files\nhosts: files\n";

/* Of the host's /etc only what kernels need; never shadow, ssh keys,
 * machine-id or other secrets. */
static const char *const etc_entries[] = {
        "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "fonts",
        "matplotlibrc", "ssl", "ca-certificates.conf", "alternatives", "mime.types",
        "bash.bashrc", "inputrc", "profile", "jupyter", "ipython", "gai.conf", "protocols",
        "services", "terminfo", "magic", "magic.mime",
};

static int plan_etc(struct plan *p)
{
        char path[PATH_MAX];
        struct dirent *de;
        DIR *d;
        int rc = add_op(p, OP_DIR, "/etc", NULL, NULL, 0, 0, "mkdir /etc");

        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/passwd", NULL, passwd_file, 0, 0, "write /etc/passwd");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/group", NULL, group_file, 0, 0, "write /etc/group");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/hosts", NULL, hosts_file, 0, 0, "write /etc/hosts");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/hostname", NULL, "glovebox\n", 0, 0,
                            "write /etc/hostname");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/nsswitch.conf", NULL, nsswitch_file, 0, 0,
                            "write /etc/nsswitch.conf");
        if (rc == 0)
                rc = add_op(p, OP_FILE, "/etc/resolv.conf", NULL, "", 0, 0,
                            "write /etc/resolv.conf");
        for (size_t i = 0; rc == 0 && i < sizeof(etc_entries) / sizeof(etc_entries[0]); i++) {
                snprintf(path, sizeof(path), "/etc/%s", etc_entries[i]);
                rc = add_host_path(p, path);
        }
        /* Debian's Python reads /etc/python3 and /etc/python3.X. */
        d = opendir("/etc");
        while (rc == 0 && d && (de = readdir(d)) != NULL) {
                if (strncmp(de->d_name, "python3", 7) != 0)
                        continue;
                snprintf(path, sizeof(path), "/etc/%s", de->d_name);
                rc = add_host_path(p, path);
        }
        if (d)
                closedir(d);
        return rc;
}

static int plan_dev(struct plan *p)
{
        static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
        static const char *const links[][2] = {{"/dev/ptmx", "pts/ptmx"},
                                               {"/dev/fd", "/proc/self/fd"},
                                               {"/dev/stdin", "/proc/self/fd/0"},
                                               {"/dev/stdout", "/proc/self/fd/1"},
                                               {"/dev/stderr", "/proc/self/fd/2"}};
        char path[64];
        int rc = add_op(p, OP_DIR, "/dev", NULL, NULL, 0, 0, "mkdir /dev");

        /* Not nodev: the bound device nodes below must work. */
        if (rc == 0)
                rc = add_op(p, OP_TMPFS, "/dev", NULL, "mode=0755,size=1m", MS_NOSUID | MS_NOEXEC,
                            0, "tmpfs /dev");
        for (size_t i = 0; rc == 0 && i < sizeof(nodes) / sizeof(nodes[0]); i++) {
                snprintf(path, sizeof(path), "/dev/%s", nodes[i]);
                rc = add_op(p, OP_FILE, path, NULL, "", 0, 0, "bind device");
                if (rc == 0)
                        rc = add_op(p, OP_BIND, path, path, NULL, 0, OP_WRITABLE | OP_KEEP_FLAGS,
                                    "bind device");
        }
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/dev/pts", NULL, NULL, 0, 0, "mkdir /dev/pts");
        if (rc == 0)
                rc = add_op(p, OP_DEVPTS, "/dev/pts", NULL, "newinstance,ptmxmode=0666,mode=0620",
                            MS_NOSUID | MS_NOEXEC, 0, "devpts /dev/pts");
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/dev/shm", NULL, NULL, 0, 0, "mkdir /dev/shm");
        if (rc == 0)
                rc = add_op(p, OP_TMPFS, "/dev/shm", NULL, "mode=1777,size=64m",
                            MS_NOSUID | MS_NODEV, 0, "tmpfs /dev/shm");
        for (size_t i = 0; rc == 0 && i < sizeof(links) / sizeof(links[0]); i++)
                rc = add_op(p, OP_SYMLINK, links[i][0], links[i][1], NULL, 0, 0, "symlink /dev");
        return rc;
}

static int plan_build(struct plan *p, const struct sandbox_request *req)
{
        static const char *const top_level[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64",
                                                "/libx32"};
        const struct hostmsg_start *start = req->start;
        unsigned long long disk = start->limits.disk_mb;
        char options[128], path[PATH_MAX];
        FILE *f;
        int rc;

        memset(p, 0, sizeof(*p));
        p->req = req;
        snprintf(p->root, sizeof(p->root), "%s/root", req->run_dir);
        p->cap_last = CAP_LAST_CAP;
        f = fopen("/proc/sys/kernel/cap_last_cap", "re");
        if (f) {
                if (fscanf(f, "%d", &p->cap_last) != 1)
                        p->cap_last = CAP_LAST_CAP;
                fclose(f);
        }
        /* A backstop for files on mounts without their own size limit;
         * a little over the disk limit so that a full disk says ENOSPC. */
        p->rl_fsize.rlim_cur = p->rl_fsize.rlim_max = ((rlim_t)disk + 1) * 1024 * 1024;
        /* Per host uid: exact when each sandbox has its own uid. */
        p->set_nproc = req->ids.privileged;
        p->rl_nproc.rlim_cur = p->rl_nproc.rlim_max = start->limits.pids;

        rc = add_op(p, OP_DIR, "/usr", NULL, NULL, 0, 0, "mkdir /usr");
        if (rc == 0)
                rc = add_op(p, OP_BIND, "/usr", "/usr", NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags("/usr"), 0,
                            "bind /usr");
        /* The merged /bin, /lib... links, or read-only binds where not merged. */
        for (size_t i = 0; rc == 0 && i < sizeof(top_level) / sizeof(top_level[0]); i++)
                rc = add_host_path(p, top_level[i]);
        if (rc == 0)
                rc = plan_etc(p);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/proc", NULL, NULL, 0, 0, "mkdir /proc");
        if (rc == 0)
                rc = add_op(p, OP_PROC, "/proc", NULL, NULL, MS_NOSUID | MS_NODEV | MS_NOEXEC, 0,
                            "mount /proc");
        /* Kernel tunables stay read-only even where the namespace owns them. */
        if (rc == 0)
                rc = add_op(p, OP_BIND, "/proc/sys", NULL, NULL,
                            MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, 0, "read-only /proc/sys");
        if (rc == 0)
                rc = plan_dev(p);
        snprintf(options, sizeof(options), "mode=1777,size=%llum", disk);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/tmp", NULL, NULL, 0, 0, "mkdir /tmp");
        if (rc == 0)
                rc = add_op(p, OP_TMPFS, "/tmp", NULL, options, MS_NOSUID | MS_NODEV, 0,
                            "tmpfs /tmp");
        snprintf(options, sizeof(options), "mode=0700,uid=%d,gid=%d,size=%llum", SANDBOX_USER_UID,
                 SANDBOX_USER_UID, disk);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/home", NULL, NULL, 0, 0, "mkdir /home");
        if (rc == 0)
                rc = add_op(p, OP_DIR, SANDBOX_HOME, NULL, NULL, 0, 0, "mkdir " SANDBOX_HOME);
        if (rc == 0)
                rc = add_op(p, OP_TMPFS, SANDBOX_HOME, NULL, options, MS_NOSUID | MS_NODEV, 0,
                            "tmpfs " SANDBOX_HOME);
        if (rc == 0)
                rc = add_op(p, OP_DIR, "/run", NULL, NULL, 0, 0, "mkdir /run");
        if (rc == 0)
                rc = add_op(p, OP_DIR, SANDBOX_RUN_DIR, NULL, NULL, 0, 0, "mkdir " SANDBOX_RUN_DIR);
        /* Only this kernel's sockets and connection file. */
        snprintf(path, sizeof(path), "%s", req->ipc_dir);
        if (rc == 0)
                rc = add_op(p, OP_BIND, SANDBOX_RUN_DIR, path, NULL,
                            MS_NOSUID | MS_NODEV | MS_NOEXEC | locked_flags(path), OP_WRITABLE,
                            "bind " SANDBOX_RUN_DIR);
        /* The kernelspec's directory, unless /usr already holds it; last,
         * so that no tmpfs above (such as /tmp) hides it. */
        if (rc == 0 && strncmp(start->kernelspec_dir, "/usr/", 5) != 0) {
                rc = add_parents(p, start->kernelspec_dir);
                if (rc == 0)
                        rc = add_host_path(p, start->kernelspec_dir);
        }
        if (rc < 0)
                plan_free(p);
        return rc;
}

static char *title_area;
static size_t title_len;

void sandbox_set_title_area(char *start, size_t len)
{
        title_area = start;
        title_len = len;
}

/* ---- the child: async-signal-safe calls only from here on --------------- */

static void report_send(int fd, const struct report *r)
{
        ssize_t n;

        /* write(), not send(): fd is a socket for init, a pipe for the kernel. */
        do {
                n = write(fd, r, sizeof(*r));
        } while (n < 0 && errno == EINTR);
}

static size_t safe_strlen(const char *s)
{
        size_t n = 0;

        while (s[n])
                n++;
        return n;
}

static __attribute__((noreturn)) void child_fail(int fd, const char *step, int error)
{
        struct report r;
        size_t len = safe_strlen(step);

        memset(&r, 0, sizeof(r));
        r.kind = REPORT_FAILED;
        r.error = error;
        if (len > sizeof(r.step) - 1)
                len = sizeof(r.step) - 1;
        memcpy(r.step, step, len);
        report_send(fd, &r);
        _exit(127);
}

static int write_all(int fd, const char *data, size_t len)
{
        while (len > 0) {
                ssize_t n = write(fd, data, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -1;
                data += n;
                len -= (size_t)n;
        }
        return 0;
}

static int run_op(const struct mount_op *op)
{
        int fd;

        switch (op->kind) {
        case OP_DIR:
                return mkdir(op->target, 0755) < 0 && errno != EEXIST ? -1 : 0;
        case OP_FILE:
                fd = open(op->target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (fd < 0)
                        return -1;
                if (op->data && write_all(fd, op->data, safe_strlen(op->data)) < 0) {
                        close(fd);
                        return -1;
                }
                return close(fd);
        case OP_SYMLINK:
                return symlink(op->source, op->target);
        case OP_TMPFS:
                return mount("tmpfs", op->target, "tmpfs", op->flags, op->data);
        case OP_PROC:
                return mount("proc", op->target, "proc", op->flags, NULL);
        case OP_DEVPTS:
                return mount("devpts", op->target, "devpts", op->flags, op->data);
        case OP_BIND:
                /* A bind of the target onto itself when no source is given. */
                if (mount(op->source ? op->source : op->target, op->target, NULL,
                          MS_BIND | MS_REC | MS_SILENT, NULL) < 0)
                        return -1;
                if (op->options & OP_KEEP_FLAGS)
                        return 0;
                return mount(NULL, op->target, NULL,
                             MS_BIND | MS_REMOUNT | MS_SILENT | op->flags |
                                     ((op->options & OP_WRITABLE) ? 0 : MS_RDONLY),
                             NULL);
        }
        errno = EINVAL;
        return -1;
}

/* Brings up lo, the only interface of the new network namespace. */
static int loopback_up(void)
{
        struct ifreq ifr;
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        int rc;

        if (fd < 0)
                return -1;
        memset(&ifr, 0, sizeof(ifr));
        memcpy(ifr.ifr_name, "lo", 3);
        rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
        if (rc == 0) {
                ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
                rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
        }
        close(fd);
        return rc;
}

static void close_fds_except(int keep1, int keep2)
{
        for (int fd = 3; fd < 4096; fd++) {
                if (fd != keep1 && fd != keep2)
                        close(fd);
        }
}

static int drop_capabilities(void)
{
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];

        memset(data, 0, sizeof(data));
        return (int)syscall(SYS_capset, &hdr, data);
}

/* The kernel process: drop everything, then execve. */
static __attribute__((noreturn)) void kernel_exec(const struct plan *p, int exec_fd)
{
        const struct sandbox_request *req = p->req;
        const struct rlimit core = {0, 0}, nofile = {4096, 4096};
        sigset_t none;
        int null_fd;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* Its own process group: init forwards interrupts to it. */
        if (setsid() < 0)
                child_fail(exec_fd, "setsid", errno);
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 ||
            (req->quiet && (dup2(null_fd, 1) < 0 || dup2(null_fd, 2) < 0)))
                child_fail(exec_fd, "stdio", errno);
        close_fds_except(exec_fd, -1);
        if (chdir(SANDBOX_HOME) < 0)
                child_fail(exec_fd, "chdir " SANDBOX_HOME, errno);
        if (setrlimit(RLIMIT_CORE, &core) < 0 || setrlimit(RLIMIT_NOFILE, &nofile) < 0 ||
            setrlimit(RLIMIT_FSIZE, &p->rl_fsize) < 0 ||
            (p->set_nproc && setrlimit(RLIMIT_NPROC, &p->rl_nproc) < 0))
                child_fail(exec_fd, "setrlimit", errno);
        /* Empty the bounding set (needs CAP_SETPCAP, so before setuid) and
         * lock the securebits: no path back to any capability, not even
         * through a root-owned or file-capability binary. */
        for (int cap = 0; cap <= p->cap_last; cap++) {
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                        child_fail(exec_fd, "drop bounding set", errno);
        }
        if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                             SECBIT_NO_SETUID_FIXUP_LOCKED |
                                             SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                             SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                  0, 0, 0) < 0)
                child_fail(exec_fd, "securebits", errno);
        if (req->ids.privileged && setgroups(0, NULL) < 0)
                child_fail(exec_fd, "setgroups", errno);
        if (setresgid(SANDBOX_USER_UID, SANDBOX_USER_UID, SANDBOX_USER_UID) < 0)
                child_fail(exec_fd, "setresgid", errno);
        if (setresuid(SANDBOX_USER_UID, SANDBOX_USER_UID, SANDBOX_USER_UID) < 0)
                child_fail(exec_fd, "setresuid", errno);
        /* With NO_SETUID_FIXUP the switch kept capabilities: clear them. */
        if (drop_capabilities() < 0)
                child_fail(exec_fd, "capset", errno);
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                child_fail(exec_fd, "clear ambient capabilities", errno);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                child_fail(exec_fd, "no_new_privs", errno);
        /* Last, so the calls above were not subject to it. */
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, req->seccomp) < 0)
                child_fail(exec_fd, "seccomp", errno);
        execve(req->argv[0], req->argv, req->envp);
        child_fail(exec_fd, "exec", errno);
}

static void noop_handler(int sig)
{
        (void)sig;
}

/* pid 1 of the sandbox once the kernel runs: reap, forward, report. */
static __attribute__((noreturn)) void init_loop(int report_fd, pid_t kernel)
{
        static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
        struct sigaction sa;
        sigset_t set;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = noop_handler;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        /* pid 1 ignores signals it has no handler for; install one so
         * that forwarded signals arrive, and take them synchronously. */
        for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
                sigaction(forwarded[i], &sa, NULL);
                sigaddset(&set, forwarded[i]);
        }
        sigaction(SIGCHLD, &sa, NULL);
        sigprocmask(SIG_BLOCK, &set, NULL);
        for (;;) {
                siginfo_t info;
                int sig = sigwaitinfo(&set, &info);
                int status;
                pid_t pid;

                if (sig < 0)
                        continue;
                if (sig != SIGCHLD) {
                        kill(-kernel, sig);
                        continue;
                }
                while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                        if (pid == kernel) {
                                struct report r;

                                memset(&r, 0, sizeof(r));
                                r.kind = REPORT_EXIT;
                                r.status = status;
                                report_send(report_fd, &r);
                                /* Our exit takes every other process of the
                                 * namespace with it. */
                                _exit(0);
                        }
                }
        }
}

static __attribute__((noreturn)) void child_main(const struct plan *p, int sync_fd)
{
        struct report started;
        int exec_pipe[2];
        char go;
        ssize_t n;
        pid_t kernel;

        do {
                n = read(sync_fd, &go, 1);
        } while (n < 0 && errno == EINTR);
        if (n != 1)
                _exit(127);
        if (title_area && title_len > sizeof("glovebox-init")) {
                memset(title_area, 0, title_len);
                memcpy(title_area, "glovebox-init", sizeof("glovebox-init"));
        }
        /* Become the sandbox's root: our host id (0) has no mapping here, and
         * files cannot be created by an unmapped id. */
        if (p->req->ids.privileged && (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))
                child_fail(sync_fd, "become sandbox root", errno);
        /* Now in the kernel's cgroup: its cgroup namespace hides the rest. */
        if (unshare(CLONE_NEWCGROUP) < 0)
                child_fail(sync_fd, "unshare cgroup namespace", errno);
        /* Nothing we mount may propagate back to the host. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                child_fail(sync_fd, "make mounts private", errno);
        if (mount("tmpfs", p->root, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_TMPFS) < 0)
                child_fail(sync_fd, "tmpfs root", errno);
        for (size_t i = 0; i < p->nops; i++) {
                if (run_op(&p->ops[i]) < 0)
                        child_fail(sync_fd, p->ops[i].step, errno);
        }
        if (sethostname("glovebox", 8) < 0)
                child_fail(sync_fd, "sethostname", errno);
        if (loopback_up() < 0)
                child_fail(sync_fd, "loopback up", errno);
        /* pivot_root(".", ".") stacks the old root under the new one; the
         * detach then drops the host's whole tree from this namespace. */
        if (chdir(p->root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
                child_fail(sync_fd, "pivot_root", errno);
        if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
                child_fail(sync_fd, "detach old root", errno);
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                child_fail(sync_fd, "read-only root", errno);
        if (pipe2(exec_pipe, O_CLOEXEC) < 0)
                child_fail(sync_fd, "pipe", errno);
        kernel = fork();
        if (kernel < 0)
                child_fail(sync_fd, "fork kernel", errno);
        if (kernel == 0) {
                close(exec_pipe[0]);
                close(sync_fd);
                kernel_exec(p, exec_pipe[1]);
        }
        close(exec_pipe[1]);
        /* The pipe closes on a successful execve; a failure arrives first. */
        memset(&started, 0, sizeof(started));
        do {
                n = read(exec_pipe[0], &started, sizeof(started));
        } while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof(started)) {
                report_send(sync_fd, &started);
                _exit(127);
        }
        close(exec_pipe[0]);
        memset(&started, 0, sizeof(started));
        started.kind = REPORT_STARTED;
        report_send(sync_fd, &started);
        /* init keeps no privilege either. It becomes "user" like the kernel,
         * which is what lets it forward signals to it; undumpable, so the
         * kernel cannot read its memory. */
        if (setresgid(SANDBOX_USER_UID, SANDBOX_USER_UID, SANDBOX_USER_UID) < 0 ||
            setresuid(SANDBOX_USER_UID, SANDBOX_USER_UID, SANDBOX_USER_UID) < 0)
                _exit(127);
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        drop_capabilities();
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        close_fds_except(sync_fd, -1);
        init_loop(sync_fd, kernel);
}

/* ---- the parent ---------------------------------------------------------- */

static void fail_set(struct hostmsg_failed *fail, const char *step, int error)
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
static int write_id_maps(pid_t pid, const struct sandbox_ids *ids)
{
        char map[128];
        int rc;

        if (ids->privileged) {
                snprintf(map, sizeof(map), "0 %u 1\n%d %u 1\n", (unsigned)ids->setup_uid,
                         SANDBOX_USER_UID, (unsigned)ids->user_uid);
                rc = write_proc(pid, "uid_map", map);
                snprintf(map, sizeof(map), "0 %u 1\n%d %u 1\n", (unsigned)ids->setup_gid,
                         SANDBOX_USER_UID, (unsigned)ids->user_gid);
                return rc < 0 ? rc : write_proc(pid, "gid_map", map);
        }
        snprintf(map, sizeof(map), "%d %u 1\n", SANDBOX_USER_UID, (unsigned)ids->user_uid);
        rc = write_proc(pid, "uid_map", map);
        if (rc == 0)
                rc = write_proc(pid, "setgroups", "deny");
        snprintf(map, sizeof(map), "%d %u 1\n", SANDBOX_USER_UID, (unsigned)ids->user_gid);
        return rc < 0 ? rc : write_proc(pid, "gid_map", map);
}

static int wait_report(int fd, struct report *r, int timeout_ms)
{
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;
        int rc;

        do {
                rc = poll(&pfd, 1, timeout_ms);
        } while (rc < 0 && errno == EINTR);
        if (rc == 0)
                return -ETIMEDOUT;
        if (rc < 0)
                return -errno;
        n = recv(fd, r, sizeof(*r), 0);
        if (n != (ssize_t)sizeof(*r))
                return -EPIPE;
        r->step[sizeof(r->step) - 1] = '\0';
        return 0;
}

int sandbox_start(const struct sandbox_request *req, struct sandbox *sb,
                  struct hostmsg_failed *fail)
{
        struct plan plan;
        struct report report;
        char err[HOSTMSG_ERROR_SIZE];
        int sv[2] = {-1, -1};
        pid_t pid = -1;
        int status;
        int rc;

        memset(sb, 0, sizeof(*sb));
        sb->report_fd = -1;
        rc = plan_build(&plan, req);
        if (rc < 0) {
                fail_set(fail, "plan", -rc);
                return rc;
        }
        rc = cgroup_create(req->start->kernel_id, &req->start->limits, &sb->cgroup, err,
                           sizeof(err));
        if (rc < 0) {
                fail_set(fail, "cgroup", -rc);
                snprintf(fail->message, sizeof(fail->message), "cgroup: %s", err);
                goto out;
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                rc = -errno;
                fail_set(fail, "socketpair", errno);
                goto out;
        }
        /* fork-like clone: the child runs on a copy of our stack. The cgroup
         * namespace comes later, once the child is in its cgroup. */
        pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET |
                                                CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD,
                             NULL, NULL, NULL, NULL);
        if (pid < 0) {
                rc = -errno;
                fail_set(fail, "clone", errno);
                goto out;
        }
        if (pid == 0) {
                close(sv[0]);
                child_main(&plan, sv[1]);
        }
        close(sv[1]);
        sv[1] = -1;
        rc = write_id_maps(pid, &req->ids);
        if (rc < 0) {
                fail_set(fail, "uid/gid map", -rc);
                goto kill;
        }
        rc = cgroup_attach(&sb->cgroup, pid);
        if (rc < 0) {
                fail_set(fail, "cgroup attach", -rc);
                goto kill;
        }
        if (write(sv[0], "g", 1) != 1) {
                rc = -errno;
                fail_set(fail, "start child", errno);
                goto kill;
        }
        rc = wait_report(sv[0], &report, SETUP_TIMEOUT_MS);
        if (rc < 0) {
                fail_set(fail, rc == -ETIMEDOUT ? "setup timeout" : "sandbox child died", -rc);
                goto kill;
        }
        if (report.kind != REPORT_STARTED) {
                rc = -(report.error ? report.error : EIO);
                fail_set(fail, report.step, -rc);
                goto kill;
        }
        sb->init_pid = pid;
        sb->report_fd = sv[0];
        sv[0] = -1;
        rc = 0;
        goto out;
kill:
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cgroup_destroy(&sb->cgroup);
out:
        if (rc < 0 && pid < 0)
                cgroup_destroy(&sb->cgroup);
        if (sv[0] >= 0)
                close(sv[0]);
        if (sv[1] >= 0)
                close(sv[1]);
        plan_free(&plan);
        return rc;
}

int sandbox_signal(const struct sandbox *sb, int sig)
{
        return kill(sb->init_pid, sig) < 0 ? -errno : 0;
}

void sandbox_kill(const struct sandbox *sb)
{
        /* init's death ends the pid namespace: the kernel sends SIGKILL to
         * every process left in it. */
        kill(sb->init_pid, SIGKILL);
}

int sandbox_finish(struct sandbox *sb, int init_status, bool *oom)
{
        struct report r;
        int status = init_status;

        if (sb->report_fd >= 0) {
                if (recv(sb->report_fd, &r, sizeof(r), MSG_DONTWAIT) == (ssize_t)sizeof(r) &&
                    r.kind == REPORT_EXIT)
                        status = r.status;
                close(sb->report_fd);
                sb->report_fd = -1;
        }
        *oom = cgroup_oom_killed(&sb->cgroup);
        cgroup_destroy(&sb->cgroup);
        return status;
}
