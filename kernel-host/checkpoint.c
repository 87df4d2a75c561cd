#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "kernel-host/cgroup.h"
#include "kernel-host/overlay.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/spawn_internal.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

#define RECORD      "box.json"
#define ARCHIVE     "files.tar"
#define RECORD_MAX  (1 << 20)
#define MAX_MOUNTS  256
#define MAX_PROCS   64
#define MAX_ARGS    (2 * MAX_MOUNTS + 64)
/* In criu restore: the new report pipe's write end, handed to init. */
#define REPORT_FD   10
/* The merged /usr of a rebuilt top, beside its layers. */
#define USR_MERGED  "usr-merged"
#define LOG_TAIL    200

static char criu[PATH_MAX];
static char images[PATH_MAX];
static int images_fd = -1;
static char off_why[HOSTMSG_ERROR_SIZE] = "not set up";

struct job {
        struct job *next;
        pid_t pid; /* the worker (a dump) or criu itself (a restore) */
        bool restore;
        bool kill_after; /* a pause: the stopped sandbox is killed once saved */
        char sandbox_id[JP_UUID_SIZE];
        char name[JP_UUID_SIZE];
        int msg_fd; /* what failed, from the worker */
        /* a restore's */
        struct box *box;
        int report_rd, top_sock;
        struct sandbox_ids ids;
        struct hostmsg_limits limits;
        struct kernel_cgroup cgroup;
        size_t nprocs;
        struct {
                char id[JP_UUID_SIZE];
                pid_t nspid;
                bool kernel;
                struct kernel_cgroup cgroup;
        } procs[MAX_PROCS];
};

static struct job *jobs;

/* ---- set up ------------------------------------------------------------------ */

static bool find_program(const char *name, char *out, size_t size)
{
        const char *path = getenv("PATH");
        char list[4096];

        if (strchr(name, '/')) {
                snprintf(out, size, "%s", name);
                return access(out, X_OK) == 0;
        }
        snprintf(list, sizeof(list), "%s:/usr/local/sbin:/usr/sbin:/sbin", path ? path : "");
        for (char *dir = list, *next; dir; dir = next) {
                next = strchr(dir, ':');
                if (next)
                        *next++ = '\0';
                if (!*dir)
                        continue;
                if ((size_t)snprintf(out, size, "%s/%s", dir, name) < size && access(out, X_OK) == 0)
                        return true;
        }
        return false;
}

/* What `criu --version` prints first ("Version: 4.2"), as major * 100 +
 * minor; -1 when it does not run. */
static int criu_version(void)
{
        char text[256] = "";
        int pipefd[2], status, major = 0, minor = 0;
        ssize_t n, got = 0;
        pid_t pid;

        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -1;
        pid = fork();
        if (pid == 0) {
                int null_fd = open("/dev/null", O_RDWR);

                dup2(pipefd[1], 1);
                if (null_fd >= 0) {
                        dup2(null_fd, 0);
                        dup2(null_fd, 2);
                }
                execl(criu, criu, "--version", (char *)NULL);
                _exit(127);
        }
        close(pipefd[1]);
        while (pid > 0 && (n = read(pipefd[0], text + got, sizeof(text) - 1 - (size_t)got)) > 0)
                got += n;
        text[got] = '\0';
        close(pipefd[0]);
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
                return -1;
        if (sscanf(text, "Version: %d.%d", &major, &minor) < 1)
                return -1;
        return major * 100 + minor;
}

void checkpoint_init(const char *criu_name, const char *dir)
{
        int version;

        if (geteuid() != 0) {
                snprintf(off_why, sizeof(off_why),
                         "memory checkpoints need a kernel-host running as root");
                return;
        }
        if (!dir || !dir[0]) {
                snprintf(off_why, sizeof(off_why),
                         "memory checkpoints need a state directory (--state-dir)");
                return;
        }
        if (!overlay_available()) {
                snprintf(off_why, sizeof(off_why), "memory checkpoints need overlayfs");
                return;
        }
        if (!find_program(criu_name && criu_name[0] ? criu_name : "criu", criu, sizeof(criu))) {
                snprintf(off_why, sizeof(off_why),
                         "memory checkpoints need CRIU 4.1 or newer, and %s was not found "
                         "(--criu; see docs/pause.md)",
                         criu_name && criu_name[0] ? criu_name : "criu");
                return;
        }
        version = criu_version();
        if (version < 401) {
                snprintf(off_why, sizeof(off_why),
                         "memory checkpoints need CRIU 4.1 or newer; %s %s (see docs/pause.md)",
                         criu, version < 0 ? "does not run" : "is older");
                return;
        }
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                snprintf(off_why, sizeof(off_why), "cannot make %s: %s", dir, strerror(errno));
                return;
        }
        images_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (images_fd < 0 || fchmod(images_fd, 0700) < 0) {
                snprintf(off_why, sizeof(off_why), "cannot open %s: %s", dir, strerror(errno));
                if (images_fd >= 0)
                        close(images_fd);
                images_fd = -1;
                return;
        }
        snprintf(images, sizeof(images), "%s", dir);
        off_why[0] = '\0';
        log_info("memory checkpoints on: %s (CRIU %d.%d), in %s", criu, version / 100,
                 version % 100, images);
}

bool checkpoint_available(char *why, size_t size)
{
        if (why && size)
                snprintf(why, size, "%s", off_why);
        return images_fd >= 0;
}

/* ---- the mounts from outside --------------------------------------------------- */

struct mount_line {
        int id;
        unsigned major, minor;
        char root[PATH_MAX];
        char point[PATH_MAX];
        char fstype[64];
};

/* One line of a mountinfo; false for one we cannot read whole or that
 * names a path with an escape (a space, a newline). */
static bool mount_parse(char *line, struct mount_line *m)
{
        char *sep = strstr(line, " - ");
        int parent;

        if (!sep || strchr(line, '\\'))
                return false;
        if (sscanf(line, "%d %d %u:%u %4095s %4095s", &m->id, &parent, &m->major, &m->minor,
                   m->root, m->point) != 6)
                return false;
        return sscanf(sep + 3, "%63s", m->fstype) == 1;
}

/* Where the host has the file or directory that is root on device
 * major:minor: the host mount of that device whose root is the longest
 * prefix of it, and the rest below its mount point. */
static int host_path(unsigned major, unsigned minor, const char *root, char *out, size_t size)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[3 * PATH_MAX];
        size_t best = 0;
        bool found = false;

        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                struct mount_line m;
                size_t n;

                if (!mount_parse(line, &m) || m.major != major || m.minor != minor)
                        continue;
                n = strcmp(m.root, "/") == 0 ? 0 : strlen(m.root);
                if (n && (strncmp(root, m.root, n) != 0 || (root[n] != '/' && root[n])))
                        continue;
                if (!found || n > best) {
                        snprintf(out, size, "%s%s", strcmp(m.point, "/") == 0 ? "" : m.point,
                                 root + n);
                        if (!out[0])
                                snprintf(out, size, "/");
                        best = n;
                        found = true;
                }
        }
        fclose(f);
        return found ? 0 : -ENOENT;
}

/* The sandbox's mounts CRIU must be told come from outside, as
 * [{"point", "key", "kind", "path"}]: "top" (a bind of the top's path),
 * "usr" (the /usr overlay) or "host" (a host path). Its own tmpfs, proc,
 * devpts and mqueue CRIU saves itself. NULL with err set when one is of
 * a kind we cannot restore. */
static json_t *outside_mounts(pid_t init, int top_fd, char *err, size_t errlen)
{
        char path[64], line[3 * PATH_MAX], host[PATH_MAX];
        json_t *list = json_array();
        struct stat top;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)init);
        f = fopen(path, "re");
        if (!f || !list || fstat(top_fd, &top) < 0) {
                snprintf(err, errlen, "cannot read the sandbox's mounts: %s", strerror(errno));
                goto fail;
        }
        while (fgets(line, sizeof(line), f)) {
                struct mount_line m;
                const char *kind;
                char key[32];

                if (!mount_parse(line, &m)) {
                        snprintf(err, errlen, "a mount whose path CRIU cannot be given");
                        goto fail;
                }
                if (strcmp(m.point, "/") == 0)
                        continue;
                if (m.major == major(top.st_dev) && m.minor == minor(top.st_dev)) {
                        kind = "top";
                        snprintf(host, sizeof(host), "%s", m.root);
                } else if (strcmp(m.fstype, "overlay") == 0) {
                        if (strcmp(m.point, "/usr") != 0) {
                                snprintf(err, errlen, "an overlay at %.200s", m.point);
                                goto fail;
                        }
                        kind = "usr";
                        host[0] = '\0';
                } else if ((strcmp(m.fstype, "tmpfs") == 0 && strcmp(m.root, "/") == 0) ||
                           strcmp(m.fstype, "proc") == 0 || strcmp(m.fstype, "devpts") == 0 ||
                           strcmp(m.fstype, "mqueue") == 0) {
                        continue;
                } else {
                        kind = "host";
                        if (host_path(m.major, m.minor, m.root, host, sizeof(host)) < 0) {
                                snprintf(err, errlen, "no host path for the mount at %.200s",
                                         m.point);
                                goto fail;
                        }
                }
                if (json_array_size(list) >= MAX_MOUNTS) {
                        snprintf(err, errlen, "more than %d mounts", MAX_MOUNTS);
                        goto fail;
                }
                snprintf(key, sizeof(key), "m%d", m.id);
                json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s}", "point", m.point,
                                                      "key", key, "kind", kind, "path", host));
        }
        fclose(f);
        return list;
fail:
        if (f)
                fclose(f);
        json_decref(list);
        return NULL;
}

/* ---- workers ------------------------------------------------------------------ */

/* Runs argv (execv, or execvp when it has no '/') in dir_fd (-1: here) with
 * stdio on /dev/null and waits: 0, or -1. In a worker only. */
static int run(char *const argv[], int dir_fd)
{
        int status;
        pid_t pid = fork();

        if (pid == 0) {
                int null_fd = open("/dev/null", O_RDWR);

                if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0 ||
                    dup2(null_fd, 2) < 0 || (dir_fd >= 0 && fchdir(dir_fd) < 0))
                        _exit(127);
                execvp(argv[0], argv);
                _exit(127);
        }
        if (pid < 0)
                return -1;
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -1;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static __attribute__((noreturn)) void worker_fail(int msg_fd, const char *what)
{
        ssize_t n = write(msg_fd, what, strlen(what));

        (void)n;
        _exit(1);
}

/* Makes every file of dir durable, then dir. CRIU's images become
 * readable by the ids of the sandbox being restored, which open them
 * through CRIU's descriptor of the directory: the directory above is ours
 * alone (0700), and no sandbox sees any of it. */
static int sync_dir(int dir_fd)
{
        int fd = dup(dir_fd), rc = 0;
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;

        if (!d)
                return -1;
        while ((e = readdir(d))) {
                int f;

                if (e->d_type != DT_REG)
                        continue;
                f = openat(dir_fd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (f < 0 || fsync(f) < 0)
                        rc = -1;
                else if (strcmp(e->d_name, ARCHIVE) != 0 && strcmp(e->d_name, RECORD) != 0 &&
                         fchmod(f, 0644) < 0)
                        rc = -1;
                if (f >= 0)
                        close(f);
        }
        closedir(d);
        return rc < 0 || fchmod(dir_fd, 0711) < 0 || fsync(dir_fd) < 0 ? -1 : 0;
}

/* The dump's worker: criu dump, the top's archive, everything durable,
 * the directory renamed into place. */
static __attribute__((noreturn)) void dump_worker(char **criu_argv, int top_fd, int dir_fd,
                                                  const char *name, int msg_fd)
{
        char tmp[JP_UUID_SIZE + 8], archive[PATH_MAX + 64];
        char *tar_argv[] = {"tar",
                            "-c",
                            "-f",
                            archive,
                            "--numeric-owner",
                            "--sparse",
                            "--xattrs",
                            "--xattrs-include=user.*",
                            "--one-file-system",
                            "--exclude=./work",
                            "--exclude=./usr-work",
                            ".",
                            NULL};

        snprintf(tmp, sizeof(tmp), "%s.new", name);
        snprintf(archive, sizeof(archive), "%s/%s/" ARCHIVE, images, tmp);
        if (run(criu_argv, dir_fd) < 0)
                worker_fail(msg_fd, "criu dump");
        /* The processes are stopped (or frozen copies were taken): nothing
         * writes the top while tar reads it, through our descriptor. */
        if (run(tar_argv, top_fd) < 0)
                worker_fail(msg_fd, "archive of the sandbox's files");
        if (sync_dir(dir_fd) < 0)
                worker_fail(msg_fd, "sync");
        if (renameat(images_fd, tmp, images_fd, name) < 0 || fsync(images_fd) < 0)
                worker_fail(msg_fd, "rename");
        _exit(0);
}

/* ---- jobs --------------------------------------------------------------------- */

static struct job *job_find_sandbox(const char *id)
{
        for (struct job *j = jobs; j; j = j->next) {
                if (strcmp(j->sandbox_id, id) == 0)
                        return j;
        }
        return NULL;
}

static void job_free(struct job *j)
{
        for (struct job **link = &jobs; *link; link = &(*link)->next) {
                if (*link == j) {
                        *link = j->next;
                        break;
                }
        }
        if (j->msg_fd >= 0)
                close(j->msg_fd);
        if (j->report_rd >= 0)
                close(j->report_rd);
        if (j->top_sock >= 0)
                close(j->top_sock);
        free(j);
}

static struct job *job_new(const char *sandbox_id, const char *name)
{
        struct job *j = calloc(1, sizeof(*j));

        if (!j)
                return NULL;
        j->msg_fd = j->report_rd = j->top_sock = -1;
        snprintf(j->sandbox_id, sizeof(j->sandbox_id), "%s", sandbox_id);
        snprintf(j->name, sizeof(j->name), "%s", name);
        j->next = jobs;
        jobs = j;
        return j;
}

/* The first line of a CRIU log that says "Error", for the gateway. */
static void log_errors(int dir_fd, const char *file, char *out, size_t size)
{
        char text[65536];
        int fd = openat(dir_fd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        off_t end;
        ssize_t n;
        char *last = NULL;

        out[0] = '\0';
        if (fd < 0)
                return;
        end = lseek(fd, 0, SEEK_END);
        n = pread(fd, text, sizeof(text) - 1, end > (off_t)sizeof(text) - 1
                                                  ? end - (off_t)sizeof(text) + 1
                                                  : 0);
        close(fd);
        if (n <= 0)
                return;
        text[n] = '\0';
        /* The first error is the cause; later ones follow from it. One
         * CRIU logs on every restore here, and carries on from. */
        for (last = strstr(text, "Error ("); last && strstr(last, "\n") &&
                                             strstr(last, "RLIMIT_NOFILE") &&
                                             strstr(last, "RLIMIT_NOFILE") < strstr(last, "\n");
             last = strstr(last + 1, "Error ("))
                ;
        if (last) {
                last[strcspn(last, "\n")] = '\0';
                snprintf(out, size, "%.*s", LOG_TAIL, last);
        }
}

static void answer(checkpoint_report_fn report, const char *id, const char *step, int error,
                   const char *message)
{
        struct hostmsg_failed m = {.error = error};

        snprintf(m.id, sizeof(m.id), "%s", id);
        snprintf(m.step, sizeof(m.step), "%s", step ? step : "");
        snprintf(m.message, sizeof(m.message), "%s", message ? message : "");
        report(HOSTMSG_CHECKPOINTED, hostmsg_failed_encode(&m));
}

/* Writes text as name in dir_fd, durably. */
static int state_write_at(int dir_fd, const char *name, const char *text)
{
        size_t len = strlen(text);
        int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        int rc = 0;

        if (fd < 0)
                return -errno;
        if (write(fd, text, len) != (ssize_t)len || fsync(fd) < 0)
                rc = -EIO;
        close(fd);
        return rc;
}

/* box.json: what the restore needs besides CRIU's images. */
static json_t *box_record(const struct box *b, json_t *mounts, const char *report_pipe)
{
        const struct sandbox *sb = &b->sandbox;
        json_t *procs = json_array();

        for (struct proc *p = NULL; (p = spawn_proc_next(p));) {
                if (p->box == b && procs)
                        json_array_append_new(procs,
                                              json_pack("{s:s, s:i, s:b}", "id", p->id, "nspid",
                                                        (int)p->sp.nspid, "kernel", p->kernel));
        }
        return json_pack("{s:i, s:{s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I}, s:s, s:o, s:O}",
                         "version", 1, "ids", "setup_uid", (json_int_t)sb->ids.setup_uid,
                         "user_uid", (json_int_t)sb->ids.user_uid, "setup_gid",
                         (json_int_t)sb->ids.setup_gid, "user_gid", (json_int_t)sb->ids.user_gid,
                         "limits", "memory_mb", (json_int_t)sb->limits.memory_mb, "cpu_millis",
                         (json_int_t)sb->limits.cpu_millis, "pids", (json_int_t)sb->limits.pids,
                         "disk_mb", (json_int_t)sb->limits.disk_mb, "report_pipe", report_pipe,
                         "procs", procs ? procs : json_array(), "mounts", mounts);
}

static int start_dump(const struct hostmsg_volume *req, char *step, size_t stepsize, char *err,
                      size_t errlen)
{
        struct box *b = spawn_box_find(req->id);
        char tmp[JP_UUID_SIZE + 8], link_path[64], pipe_name[64], init[16], dir[PATH_MAX + 64];
        char *argv[MAX_ARGS], *owned[MAX_ARGS];
        size_t argc = 0, nowned = 0;
        json_t *mounts = NULL, *record = NULL, *m;
        int dir_fd = -1, msg[2] = {-1, -1}, rc = -EINVAL;
        char *text = NULL;
        struct job *j;
        ssize_t n;
        size_t i;
        pid_t pid;

        snprintf(step, stepsize, "checkpoint");
        if (!b || !b->sandboxed || !b->init_alive || b->gone_reported) {
                snprintf(err, errlen, "no such running sandbox");
                return -ESRCH;
        }
        if (!b->checkpointable || b->sandbox.top_fd < 0) {
                snprintf(err, errlen,
                         "this sandbox cannot be checkpointed: only one on the host's /usr, "
                         "without template layers, a disk home, volumes, egress or zygote "
                         "kernels");
                return -EOPNOTSUPP;
        }
        if (job_find_sandbox(b->id)) {
                snprintf(err, errlen, "a checkpoint of this sandbox is already being made");
                return -EBUSY;
        }
        /* The report pipe's name, which the restore hands a new pipe for. */
        snprintf(link_path, sizeof(link_path), "/proc/%d/fd/%d", (int)b->sandbox.init_pid, 3);
        n = readlink(link_path, pipe_name, sizeof(pipe_name) - 1);
        if (n <= 0 || strncmp(pipe_name, "pipe:[", 6) != 0) {
                snprintf(err, errlen, "cannot read init's report pipe");
                return -EIO;
        }
        pipe_name[n] = '\0';
        mounts = outside_mounts(b->sandbox.init_pid, b->sandbox.top_fd, err, errlen);
        if (!mounts)
                return -EOPNOTSUPP;
        snprintf(tmp, sizeof(tmp), "%s.new", req->volume_id);
        dir_fd = openat(images_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd >= 0) {
                tree_remove_at(dir_fd);
                close(dir_fd);
                unlinkat(images_fd, tmp, AT_REMOVEDIR);
        }
        if (mkdirat(images_fd, tmp, 0700) < 0 ||
            (dir_fd = openat(images_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
                0) {
                rc = -errno;
                snprintf(err, errlen, "cannot make the checkpoint's directory: %s",
                         strerror(errno));
                goto out;
        }
        record = box_record(b, mounts, pipe_name);
        text = record ? json_dumps(record, JSON_COMPACT) : NULL;
        if (!text || state_write_at(dir_fd, RECORD, text) < 0) {
                rc = -EIO;
                snprintf(err, errlen, "cannot write the checkpoint's record");
                goto out;
        }
        snprintf(init, sizeof(init), "%d", (int)b->sandbox.init_pid);
        snprintf(dir, sizeof(dir), "%s/%s", images, tmp);
#define ARG(s) (argv[argc++] = (char *)(s))
        ARG(criu);
        ARG("dump");
        ARG("-t");
        ARG(init);
        ARG("-D");
        ARG(dir);
        ARG("-o");
        ARG("dump.log");
        ARG("-v2");
        ARG(req->size_mb ? "--leave-stopped" : "--leave-running");
        ARG("--network-lock");
        ARG("nftables");
        ARG("--tcp-established");
        ARG("--file-locks");
        ARG("--external");
        ARG("mnt[]");
        json_array_foreach(mounts, i, m) {
                char *e = NULL;

                if (asprintf(&e, "mnt[%s]:%s", json_string_value(json_object_get(m, "point")),
                             json_string_value(json_object_get(m, "key"))) < 0)
                        goto nomem;
                owned[nowned++] = e;
                ARG("--external");
                ARG(e);
        }
        argv[argc] = NULL;
#undef ARG
        if (pipe2(msg, O_CLOEXEC) < 0 || fcntl(msg[0], F_SETFL, O_NONBLOCK) < 0)
                goto nomem;
        j = job_new(b->id, req->volume_id);
        if (!j)
                goto nomem;
        j->kill_after = req->size_mb != 0;
        pid = fork();
        if (pid == 0) {
                close(msg[0]);
                dump_worker(argv, b->sandbox.top_fd, dir_fd, req->volume_id, msg[1]);
        }
        if (pid < 0) {
                rc = -errno;
                job_free(j);
                snprintf(err, errlen, "fork: %s", strerror(errno));
                goto out;
        }
        j->pid = pid;
        j->msg_fd = msg[0];
        msg[0] = -1;
        klog_info(b->id, "checkpoint %.8s: dump started", req->volume_id);
        rc = 0;
        goto out;
nomem:
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
out:
        for (i = 0; i < nowned; i++)
                free(owned[i]);
        for (int k = 0; k < 2; k++) {
                if (msg[k] >= 0)
                        close(msg[k]);
        }
        if (dir_fd >= 0)
                close(dir_fd);
        if (rc < 0)
                unlinkat(images_fd, tmp, AT_REMOVEDIR);
        free(text);
        json_decref(record);
        json_decref(mounts);
        return rc;
}

static void dump_reaped(struct job *j, int status, checkpoint_report_fn report)
{
        char what[128] = "", why[LOG_TAIL + 1] = "", message[HOSTMSG_ERROR_SIZE];
        char tmp[JP_UUID_SIZE + 8];
        struct box *b = spawn_box_find(j->sandbox_id);
        ssize_t n;
        int dir_fd;

        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                klog_info(j->sandbox_id, "checkpoint %.8s made", j->name);
                if (b && j->kill_after) {
                        /* Its ids come back with the restore. */
                        b->hold_slot = true;
                        sandbox_kill(&b->sandbox);
                }
                answer(report, j->sandbox_id, NULL, 0, NULL);
                return;
        }
        n = read(j->msg_fd, what, sizeof(what) - 1);
        what[n > 0 ? n : 0] = '\0';
        snprintf(tmp, sizeof(tmp), "%s.new", j->name);
        dir_fd = openat(images_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd >= 0) {
                if (strcmp(what, "criu dump") == 0)
                        log_errors(dir_fd, "dump.log", why, sizeof(why));
                tree_remove_at(dir_fd);
                close(dir_fd);
                unlinkat(images_fd, tmp, AT_REMOVEDIR);
        }
        snprintf(message, sizeof(message), "%s failed%s%s", what[0] ? what : "the dump's worker",
                 why[0] ? ": " : "", why);
        klog_warn(j->sandbox_id, "checkpoint %.8s: %s", j->name, message);
        /* CRIU let the processes run on; a worker killed later leaves
         * them stopped, which would hang the sandbox. */
        if (b && b->init_alive)
                kill(-b->sandbox.init_pid, SIGCONT);
        answer(report, j->sandbox_id, what[0] ? what : "worker", EIO, message);
}

/* ---- restore ------------------------------------------------------------------- */

static int read_record(int dir_fd, json_t **out)
{
        char *text = malloc(RECORD_MAX + 1);
        int fd = openat(dir_fd, RECORD, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n = -1, got = 0;

        *out = NULL;
        while (text && fd >= 0 && got < RECORD_MAX &&
               (n = read(fd, text + got, (size_t)(RECORD_MAX - got))) > 0)
                got += n;
        if (fd >= 0)
                close(fd);
        if (text && n == 0) {
                text[got] = '\0';
                *out = json_loads(text, 0, NULL);
        }
        free(text);
        return *out ? 0 : -EBADMSG;
}

/* A user namespace with ids's maps, held by a child that waits: the
 * idmapping of the host's /usr for the rebuilt top goes through it. The
 * caller kills and reaps *holder. */
static int ids_holder(const struct sandbox_ids *ids, pid_t *holder)
{
        int sync[2], rc;
        char byte;
        pid_t pid;

        *holder = -1;
        if (pipe2(sync, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid == 0) {
                close(sync[0]);
                if (unshare(CLONE_NEWUSER) < 0)
                        _exit(1);
                if (write(sync[1], "u", 1) != 1)
                        _exit(1);
                for (;;)
                        pause();
        }
        close(sync[1]);
        rc = pid < 0 ? -errno : read(sync[0], &byte, 1) == 1 ? 0 : -EIO;
        close(sync[0]);
        if (pid > 0)
                *holder = pid;
        if (rc == 0)
                rc = sandbox_write_id_maps(pid, ids);
        return rc;
}

static void holder_end(pid_t holder)
{
        int status;

        if (holder > 0) {
                kill(holder, SIGKILL);
                waitpid(holder, &status, 0);
        }
}

static int send_fd(int sock, int fd)
{
        char byte = 't', space[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = space,
                             .msg_controllen = sizeof(space)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);

        memset(space, 0, sizeof(space));
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(fd));
        return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
        char byte, space[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = space,
                             .msg_controllen = sizeof(space)};
        struct cmsghdr *c;
        int fd;

        if (recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != 1)
                return -1;
        c = CMSG_FIRSTHDR(&msg);
        if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
                return -1;
        memcpy(&fd, CMSG_DATA(c), sizeof(fd));
        return fd;
}

/* The restore's worker, in a mount namespace of its own: the top again on
 * a new tmpfs, /usr and the overlays over it, the top sent to the
 * kernel-host, then criu restore in its place. */
static __attribute__((noreturn)) void restore_worker(const char *top, const char *options,
                                                     const char *archive, int usr_fd,
                                                     int top_sock, int report_wr,
                                                     char **criu_argv)
{
        char *tar_argv[] = {"tar",  "-x",  "-f",
                            (char *)archive,  "-C",  (char *)top,
                            "--numeric-owner", "--same-permissions", "--sparse",
                            "--xattrs", "--xattrs-include=user.*", NULL};
        int fd;

        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                _exit(120);
        if (mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0)
                _exit(121);
        if (run(tar_argv, -1) < 0)
                _exit(122);
        if (chdir(top) < 0)
                _exit(123);
        if ((mkdir("work", 0700) < 0 && errno != EEXIST) ||
            (mkdir("usr-work", 0700) < 0 && errno != EEXIST) ||
            (mkdir(USR_MERGED, 0755) < 0 && errno != EEXIST))
                _exit(123);
        if (syscall(SYS_move_mount, usr_fd, "", AT_FDCWD, "usr-lower", MOVE_MOUNT_F_EMPTY_PATH) <
            0)
                _exit(124);
        /* Layers named relative to the top, as the sandbox made them: its
         * mountinfo names no host directory. */
        if (mount("overlay", "root", "overlay", MS_NOSUID | MS_NODEV,
                  "lowerdir=base,upperdir=upper,workdir=work,userxattr") < 0 ||
            mount("overlay", USR_MERGED, "overlay", MS_NOSUID | MS_NODEV,
                  "lowerdir=usr-lower,upperdir=usr-upper,workdir=usr-work,userxattr") < 0)
                _exit(125);
        fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || send_fd(top_sock, fd) < 0)
                _exit(126);
        if (dup2(report_wr, REPORT_FD) < 0)
                _exit(127);
        fd = open("/dev/null", O_RDWR);
        if (fd < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                _exit(127);
        execv(criu_argv[0], criu_argv);
        _exit(127);
}

static bool json_uint(json_t *o, const char *key, unsigned long long max, unsigned long long *out)
{
        json_t *v = json_object_get(o, key);

        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (unsigned long long)json_integer_value(v) > max)
                return false;
        *out = (unsigned long long)json_integer_value(v);
        return true;
}

static int record_take(json_t *rec, struct job *j, char *err, size_t errlen)
{
        json_t *ids = json_object_get(rec, "ids"), *lim = json_object_get(rec, "limits");
        json_t *procs = json_object_get(rec, "procs"), *p;
        unsigned long long v[8];
        size_t i;

        if (!json_uint(ids, "setup_uid", UINT32_MAX, &v[0]) ||
            !json_uint(ids, "user_uid", UINT32_MAX, &v[1]) ||
            !json_uint(ids, "setup_gid", UINT32_MAX, &v[2]) ||
            !json_uint(ids, "user_gid", UINT32_MAX, &v[3]) ||
            !json_uint(lim, "memory_mb", 1ull << 40, &v[4]) ||
            !json_uint(lim, "cpu_millis", UINT32_MAX, &v[5]) ||
            !json_uint(lim, "pids", UINT32_MAX, &v[6]) ||
            !json_uint(lim, "disk_mb", 1ull << 40, &v[7]) || !json_is_array(procs) ||
            json_array_size(procs) > MAX_PROCS || v[0] == 0 || v[1] == 0) {
                snprintf(err, errlen, "the checkpoint's record is malformed");
                return -EBADMSG;
        }
        j->ids = (struct sandbox_ids){.setup_uid = (uid_t)v[0],
                                      .user_uid = (uid_t)v[1],
                                      .setup_gid = (gid_t)v[2],
                                      .user_gid = (gid_t)v[3],
                                      .privileged = true};
        j->limits = (struct hostmsg_limits){.memory_mb = v[4],
                                            .cpu_millis = (uint32_t)v[5],
                                            .pids = (uint32_t)v[6],
                                            .disk_mb = v[7]};
        json_array_foreach(procs, i, p) {
                const char *id = json_string_value(json_object_get(p, "id"));
                unsigned long long nspid;

                if (!id || !jp_uuid_valid(id, strlen(id)) || !json_uint(p, "nspid", INT32_MAX, &nspid)) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                snprintf(j->procs[i].id, sizeof(j->procs[i].id), "%s", id);
                j->procs[i].nspid = (pid_t)nspid;
                j->procs[i].kernel = json_is_true(json_object_get(p, "kernel"));
        }
        j->nprocs = json_array_size(procs);
        return 0;
}

static void restore_cleanup(struct job *j)
{
        for (size_t i = 0; i < j->nprocs; i++)
                cgroup_destroy(&j->procs[i].cgroup);
        cgroup_destroy(&j->cgroup);
        if (j->box)
                spawn_box_discard(j->box);
        j->box = NULL;
}

static int start_restore(const struct hostmsg_volume *req, char *step, size_t stepsize, char *err,
                         size_t errlen)
{
        char dir[PATH_MAX + 64], top[PATH_MAX + 16], options[128], pidfile[PATH_MAX + 16];
        char root[PATH_MAX + 32], archive[PATH_MAX + 64], inherit[96], cg_err[HOSTMSG_ERROR_SIZE];
        char *argv[MAX_ARGS], *owned[MAX_ARGS];
        size_t argc = 0, nowned = 0, i;
        json_t *rec = NULL, *mounts, *m;
        const char *pipe_name;
        int dir_fd = -1, usr_fd = -1, report[2] = {-1, -1}, sv[2] = {-1, -1}, rc;
        bool idmapped = false;
        pid_t holder = -1, pid;
        struct job *j;

        snprintf(step, stepsize, "restore");
        dir_fd = openat(images_fd, req->volume_id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0) {
                snprintf(err, errlen, "no such checkpoint");
                return -ENOENT;
        }
        j = job_new(req->id, req->volume_id);
        if (!j) {
                close(dir_fd);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        j->restore = true;
        rc = read_record(dir_fd, &rec);
        if (rc < 0) {
                snprintf(err, errlen, "the checkpoint's record cannot be read");
                goto fail;
        }
        rc = record_take(rec, j, err, errlen);
        if (rc < 0)
                goto fail;
        {
                struct hostmsg_failed fail = {0};

                rc = spawn_box_new(req->id, &j->box, &fail);
                if (rc < 0) {
                        snprintf(err, errlen, "%s", fail.message);
                        goto fail;
                }
        }
        rc = spawn_slot_claim(j->box, j->ids.setup_uid);
        if (rc < 0) {
                snprintf(err, errlen, "its host ids are a running sandbox's");
                goto fail;
        }
        /* Its groups are ours, with their limits, before CRIU puts the
         * processes back in them (soft: it makes only what is missing). */
        rc = cgroup_create(req->id, &j->limits, &j->cgroup, cg_err, sizeof(cg_err));
        for (i = 0; rc == 0 && i < j->nprocs; i++) {
                char name[JP_UUID_SIZE + 8];

                snprintf(name, sizeof(name), "p-%s", j->procs[i].id);
                rc = cgroup_create_child(&j->cgroup, name, &j->procs[i].cgroup, cg_err,
                                         sizeof(cg_err));
        }
        if (rc < 0) {
                snprintf(err, errlen, "cgroup: %s", cg_err);
                goto fail;
        }
        rc = ids_holder(&j->ids, &holder);
        if (rc == 0)
                rc = overlay_lower_open("/usr", holder, &usr_fd, &idmapped);
        holder_end(holder);
        if (rc < 0) {
                snprintf(err, errlen, "the host's /usr, idmapped: %s", strerror(-rc));
                goto fail;
        }
        if (pipe2(report, O_CLOEXEC) < 0 ||
            socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                rc = -errno;
                snprintf(err, errlen, "pipe: %s", strerror(errno));
                goto fail;
        }
        snprintf(dir, sizeof(dir), "%s/%s", images, req->volume_id);
        snprintf(archive, sizeof(archive), "%s/" ARCHIVE, dir);
        snprintf(top, sizeof(top), "%s/" ROOT_DIR, j->box->run_dir);
        snprintf(root, sizeof(root), "%s/root", top);
        snprintf(pidfile, sizeof(pidfile), "%s/init.pid", j->box->run_dir);
        snprintf(options, sizeof(options), "mode=0755,size=%llum,uid=%u,gid=%u",
                 (unsigned long long)j->limits.disk_mb, (unsigned)j->ids.setup_uid,
                 (unsigned)j->ids.setup_gid);
        pipe_name = json_string_value(json_object_get(rec, "report_pipe")) ?: "";
        snprintf(inherit, sizeof(inherit), "fd[%d]:%s", REPORT_FD, pipe_name);
        mounts = json_object_get(rec, "mounts");
        if (!json_is_array(mounts) || json_array_size(mounts) > MAX_MOUNTS ||
            strncmp(pipe_name, "pipe:[", 6) != 0 || strlen(pipe_name) > 40) {
                rc = -EBADMSG;
                snprintf(err, errlen, "the checkpoint's record is malformed");
                goto fail;
        }
#define ARG(s) (argv[argc++] = (char *)(s))
        ARG(criu);
        ARG("restore");
        ARG("-D");
        ARG(dir);
        ARG("-W");
        ARG(j->box->run_dir);
        ARG("-o");
        ARG("restore.log");
        ARG("-v2");
        ARG("--root");
        ARG(root);
        ARG("--restore-sibling");
        ARG("-d");
        ARG("--pidfile");
        ARG(pidfile);
        ARG("--inherit-fd");
        ARG(inherit);
        ARG("--tcp-established");
        ARG("--file-locks");
        ARG("--manage-cgroups=soft");
        ARG("--external");
        ARG("mnt[]");
        for (unsigned h = 0;; h++) {
                char path[PATH_MAX + 64], *e;

                if (cgroup_criu_root(&j->cgroup, h, path, sizeof(path)) < 0)
                        break;
                e = strdup(path);
                if (!e)
                        goto nomem;
                owned[nowned++] = e;
                ARG("--cgroup-root");
                ARG(e);
        }
        json_array_foreach(mounts, i, m) {
                const char *kind = json_string_value(json_object_get(m, "kind")) ?: "";
                const char *key = json_string_value(json_object_get(m, "key")) ?: "";
                const char *path = json_string_value(json_object_get(m, "path")) ?: "";
                char *e = NULL;
                int n;

                if (strcmp(kind, "top") == 0 && path[0] == '/' && !strstr(path, ".."))
                        n = asprintf(&e, "mnt[%s]:%s%s", key, top, path);
                else if (strcmp(kind, "usr") == 0)
                        n = asprintf(&e, "mnt[%s]:%s/" USR_MERGED, key, top);
                else if (strcmp(kind, "host") == 0 && path[0] == '/')
                        n = asprintf(&e, "mnt[%s]:%s", key, path);
                else
                        n = -2;
                if (n == -2 || !key[0]) {
                        rc = -EBADMSG;
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        goto fail;
                }
                if (n < 0)
                        goto nomem;
                owned[nowned++] = e;
                ARG("--external");
                ARG(e);
        }
        argv[argc] = NULL;
#undef ARG
        pid = fork();
        if (pid == 0) {
                close(sv[0]);
                close(report[0]);
                restore_worker(top, options, archive, usr_fd, sv[1], report[1], argv);
        }
        if (pid < 0) {
                rc = -errno;
                snprintf(err, errlen, "fork: %s", strerror(errno));
                goto fail;
        }
        j->pid = pid;
        j->report_rd = report[0];
        j->top_sock = sv[0];
        report[0] = sv[0] = -1;
        klog_info(req->id, "restore of checkpoint %.8s started", req->volume_id);
        rc = 0;
        goto out;
nomem:
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
fail:
        restore_cleanup(j);
        job_free(j);
out:
        for (i = 0; i < nowned; i++)
                free(owned[i]);
        for (int k = 0; k < 2; k++) {
                if (report[k] >= 0)
                        close(report[k]);
                if (sv[k] >= 0)
                        close(sv[k]);
        }
        if (usr_fd >= 0)
                close(usr_fd);
        if (dir_fd >= 0)
                close(dir_fd);
        json_decref(rec);
        return rc;
}

/* The host pid of the process that is nspid in init's pid namespace:
 * every process the kernel-host started is init's child. */
static pid_t host_pid_of(pid_t init, pid_t nspid)
{
        char path[64], list[16384], status[4096];
        pid_t found = -1;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)init, (int)init);
        if (read_small_file(path, list, sizeof(list)) < 0)
                return -1;
        for (char *s = list, *end; *s && found < 0; s = end) {
                long pid = strtol(s, &end, 10);
                char *ns;

                if (end == s)
                        break;
                snprintf(path, sizeof(path), "/proc/%ld/status", pid);
                if (read_small_file(path, status, sizeof(status)) < 0)
                        continue;
                ns = strstr(status, "\nNSpid:");
                if (!ns)
                        continue;
                ns[strcspn(ns + 1, "\n") + 1] = '\0';
                ns = strrchr(ns, '\t');
                if (ns && strtol(ns + 1, NULL, 10) == nspid)
                        found = (pid_t)pid;
        }
        return found;
}

static void restore_reaped(struct job *j, int status, int link, checkpoint_report_fn report)
{
        struct hostmsg_sandbox_ready ready = {0};
        struct hostmsg_failed fail = {.error = EIO};
        char text[32], why[LOG_TAIL + 1] = "", path[64];
        struct box *b = j->box;
        int top_fd = -1, root_fd = -1, rc, dir_fd;
        pid_t init = -1;
        json_t *msg;

        snprintf(fail.id, sizeof(fail.id), "%s", j->sandbox_id);
        snprintf(fail.step, sizeof(fail.step), "restore");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                dir_fd = open(b->run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dir_fd >= 0) {
                        log_errors(dir_fd, "restore.log", why, sizeof(why));
                        if (access("/tmp/mp/debug", F_OK) == 0 &&
                            linkat(dir_fd, "restore.log", AT_FDCWD, "/tmp/mp/restore.log", 0) < 0)
                                log_warn("DEBUG link failed");
                        close(dir_fd);
                }
                snprintf(fail.message, sizeof(fail.message), "criu restore failed (%s %d)%s%s",
                         WIFEXITED(status) ? "status" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                         why[0] ? ": " : "", why);
                goto fail;
        }
        snprintf(path, sizeof(path), "%s/init.pid", b->run_dir);
        if (read_small_file(path, text, sizeof(text)) > 0)
                init = (pid_t)strtol(text, NULL, 10);
        top_fd = recv_fd(j->top_sock);
        if (init <= 0 || top_fd < 0) {
                snprintf(fail.message, sizeof(fail.message), "the restored sandbox is not there");
                goto fail;
        }
        rc = sandbox_adopt(init, j->report_rd, top_fd, &j->ids, &j->limits, &j->cgroup,
                           &b->sandbox);
        if (rc < 0) {
                snprintf(fail.message, sizeof(fail.message), "the restored sandbox: %s",
                         strerror(-rc));
                kill(init, SIGKILL);
                goto fail;
        }
        j->report_rd = -1;
        top_fd = -1;
        b->init_alive = true;
        b->checkpointable = true;
        memset(&j->cgroup, 0, sizeof(j->cgroup)); /* the sandbox's now */
        for (size_t i = 0; i < j->nprocs; i++) {
                pid_t pid = host_pid_of(init, j->procs[i].nspid);
                struct proc *p;

                if (pid < 0) {
                        /* It had ended by the dump: its group goes. */
                        cgroup_destroy(&j->procs[i].cgroup);
                        continue;
                }
                p = calloc(1, sizeof(*p));
                if (!p) {
                        cgroup_destroy(&j->procs[i].cgroup);
                        continue;
                }
                snprintf(p->id, sizeof(p->id), "%s", j->procs[i].id);
                p->box = b;
                p->pid = pid;
                p->sp.pid = pid;
                p->sp.nspid = j->procs[i].nspid;
                p->cgroup = j->procs[i].cgroup;
                p->kernel = j->procs[i].kernel;
                b->procs++;
                spawn_proc_add(p);
        }
        j->nprocs = 0;
        spawn_box_add(b);
        j->box = NULL;
        snprintf(ready.sandbox_id, sizeof(ready.sandbox_id), "%s", b->id);
        ready.init_pid = init;
        ready.user_uid = j->ids.user_uid;
        ready.user_gid = j->ids.user_gid;
        ready.has_root = true;
        ready.root_uid = j->ids.setup_uid;
        ready.root_gid = j->ids.setup_gid;
        snprintf(ready.root, sizeof(ready.root), "/proc/%d/root", (int)init);
        root_fd = fcntl(b->sandbox.root_fd, F_DUPFD_CLOEXEC, 3);
        msg = hostmsg_sandbox_ready_encode(&ready);
        if (root_fd < 0 || !msg || hostmsg_send(link, HOSTMSG_SANDBOX_READY, msg, &root_fd, 1) < 0)
                log_warn("cannot report to the gateway");
        json_decref(msg);
        if (root_fd >= 0)
                close(root_fd);
        klog_info(b->id, "restored from checkpoint %.8s (init pid %d)", j->name, (int)init);
        return;
fail:
        if (top_fd >= 0)
                close(top_fd);
        klog_warn(j->sandbox_id, "restore of checkpoint %.8s: %s", j->name, fail.message);
        restore_cleanup(j);
        report(HOSTMSG_SANDBOX_FAILED, hostmsg_failed_encode(&fail));
}

/* ---- from the gateway ------------------------------------------------------------ */

static void delete_checkpoint(const char *name)
{
        int dir_fd = openat(images_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        json_t *rec = NULL;
        unsigned long long uid;

        if (dir_fd < 0)
                return;
        for (struct job *j = jobs; j; j = j->next) {
                if (j->restore && strcmp(j->name, name) == 0) {
                        /* CRIU still reads it: the gateway asks again. */
                        close(dir_fd);
                        return;
                }
        }
        if (read_record(dir_fd, &rec) == 0 &&
            json_uint(json_object_get(rec, "ids"), "setup_uid", UINT32_MAX, &uid))
                spawn_slot_unhold((unsigned)uid);
        json_decref(rec);
        tree_remove_at(dir_fd);
        close(dir_fd);
        if (unlinkat(images_fd, name, AT_REMOVEDIR) < 0)
                log_warn("cannot remove checkpoint %.8s: %s", name, strerror(errno));
}

void checkpoint_handle(enum hostmsg_type type, json_t *body, int link,
                       checkpoint_report_fn report)
{
        struct hostmsg_volume req;
        char step[64], err[HOSTMSG_ERROR_SIZE] = "";
        int rc;

        (void)link;
        if (hostmsg_volume_decode(body, &req) < 0) {
                char id[JP_UUID_SIZE];

                log_error("malformed checkpoint request dropped");
                if (type != HOSTMSG_CHECKPOINT_DELETE && hostmsg_request_id(body, "id", id) == 0) {
                        if (type == HOSTMSG_CHECKPOINT)
                                answer(report, id, "request", EINVAL, "malformed request");
                        else {
                                struct hostmsg_failed f = {.error = EINVAL};

                                snprintf(f.id, sizeof(f.id), "%s", id);
                                snprintf(f.message, sizeof(f.message), "malformed request");
                                report(HOSTMSG_SANDBOX_FAILED, hostmsg_failed_encode(&f));
                        }
                }
                return;
        }
        if (images_fd < 0) {
                rc = -EOPNOTSUPP;
                snprintf(step, sizeof(step), "checkpoints");
                snprintf(err, sizeof(err), "%s", off_why);
        } else if (type == HOSTMSG_CHECKPOINT_DELETE) {
                delete_checkpoint(req.volume_id);
                return;
        } else if (type == HOSTMSG_CHECKPOINT) {
                rc = start_dump(&req, step, sizeof(step), err, sizeof(err));
        } else {
                rc = start_restore(&req, step, sizeof(step), err, sizeof(err));
        }
        if (rc == 0 || type == HOSTMSG_CHECKPOINT_DELETE)
                return;
        klog_warn(req.id, "%s: %s", step, err);
        if (type == HOSTMSG_CHECKPOINT) {
                answer(report, req.id, step, -rc, err);
        } else {
                struct hostmsg_failed f = {.error = -rc};

                snprintf(f.id, sizeof(f.id), "%s", req.id);
                snprintf(f.step, sizeof(f.step), "%s", step);
                snprintf(f.message, sizeof(f.message), "%s", err);
                report(HOSTMSG_SANDBOX_FAILED, hostmsg_failed_encode(&f));
        }
}

bool checkpoint_reaped(pid_t pid, int status, int link, checkpoint_report_fn report)
{
        for (struct job *j = jobs; j; j = j->next) {
                if (j->pid != pid)
                        continue;
                if (j->restore)
                        restore_reaped(j, status, link, report);
                else
                        dump_reaped(j, status, report);
                job_free(j);
                return true;
        }
        return false;
}
