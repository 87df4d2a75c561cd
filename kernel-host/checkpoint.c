#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "kernel-host/cgroup.h"
#include "kernel-host/overlay.h"
#include "kernel-host/rootfs.h"
#include "kernel-host/sandbox.h"
#include "kernel-host/spawn_internal.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
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

#include "kernel-host/checkpoint_internal.h"

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

char checkpoint_criu[PATH_MAX];
char checkpoint_dir[PATH_MAX];
int checkpoint_dir_fd = -1;
static char off_why[HOSTMSG_ERROR_SIZE] = "not set up";
#define DUMP_ATTEMPTS 3
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
                if ((size_t)snprintf(out, size, "%s/%s", dir, name) < size &&
                    access(out, X_OK) == 0)
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
                execl(checkpoint_criu, checkpoint_criu, "--version", (char *)NULL);
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

/* A dump a dead kernel-host left half made (NAME.new) is nobody's. */
static void remove_unfinished(void)
{
        int fd = dup(checkpoint_dir_fd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((e = readdir(d))) {
                size_t n = strlen(e->d_name);
                int sub;

                if (n < 5 || strcmp(e->d_name + n - 4, ".new") != 0)
                        continue;
                sub = openat(checkpoint_dir_fd, e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                        tree_remove_at(sub);
                        close(sub);
                }
                if (unlinkat(checkpoint_dir_fd, e->d_name, AT_REMOVEDIR) == 0)
                        log_info("removed the unfinished checkpoint %s", e->d_name);
        }
        closedir(d);
}

void checkpoint_init(const char *criu_name, const char *dir, int compress_after)
{
        char zstd[PATH_MAX];
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
        if (!find_program(criu_name && criu_name[0] ? criu_name : "criu", checkpoint_criu,
                          sizeof(checkpoint_criu))) {
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
                         checkpoint_criu, version < 0 ? "does not run" : "is older");
                return;
        }
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                snprintf(off_why, sizeof(off_why), "cannot make %s: %s", dir, strerror(errno));
                return;
        }
        checkpoint_dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (checkpoint_dir_fd < 0 || fchmod(checkpoint_dir_fd, 0700) < 0) {
                snprintf(off_why, sizeof(off_why), "cannot open %s: %s", dir, strerror(errno));
                if (checkpoint_dir_fd >= 0)
                        close(checkpoint_dir_fd);
                checkpoint_dir_fd = -1;
                return;
        }
        if (checkpoint_key_init(checkpoint_dir_fd) < 0) {
                snprintf(off_why, sizeof(off_why), "cannot read or make %s/.manifest-key", dir);
                close(checkpoint_dir_fd);
                checkpoint_dir_fd = -1;
                return;
        }
        snprintf(checkpoint_dir, sizeof(checkpoint_dir), "%s", dir);
        remove_unfinished();
        off_why[0] = '\0';
        log_info("memory checkpoints on: %s (CRIU %d.%d), in %s", checkpoint_criu, version / 100,
                 version % 100, checkpoint_dir);
        if (compress_after >= 0 && !find_program("zstd", zstd, sizeof(zstd))) {
                log_warn("checkpoints stay uncompressed: no zstd program (Debian's zstd)");
                compress_after = -1;
        }
        checkpoint_compact_init(compress_after);
        checkpoint_kdat_init();
        checkpoint_netns_init();
}

bool checkpoint_available(char *why, size_t size)
{
        if (why && size)
                snprintf(why, size, "%s", off_why);
        return checkpoint_dir_fd >= 0;
}

/* ---- workers ------------------------------------------------------------------ */

/* Runs argv (execv, or execvp when it has no '/') in dir_fd (-1: here) with
 * stdio on /dev/null and waits: its exit status (0 or more), or -1 when it
 * could not run or was killed. */
static int run_status(char *const argv[], int dir_fd)
{
        int status;
        pid_t pid = fork();

        if (pid == 0) {
                int null_fd = open("/dev/null", O_RDWR);

                if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0 ||
                    dup2(null_fd, 2) < 0 || (dir_fd >= 0 && fchdir(dir_fd) < 0))
                        _exit(127);
                if (strcmp(argv[0], checkpoint_criu) == 0)
                        checkpoint_kdat_exec(argv, checkpoint_kdat_clone(argv), false);
                execvp(argv[0], argv);
                _exit(127);
        }
        if (pid < 0)
                return -1;
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -1;
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int checkpoint_run(char *const argv[], int dir_fd)
{
        return run_status(argv, dir_fd) == 0 ? 0 : -1;
}

static __attribute__((noreturn)) void worker_fail(int msg_fd, const char *what)
{
        ssize_t n = write(msg_fd, what, strlen(what));

        (void)n;
        _exit(1);
}

/* The dump's worker: criu dump, the top's archive, everything durable,
 * the directory renamed into place. */
static __attribute__((noreturn)) void dump_worker(char **criu_argv, int top_fd, int home_fd,
                                                  int netns_fd, int dir_fd, const char *name,
                                                  int msg_fd, uint64_t room, bool running)
{
        int rc;
        char tmp[JP_UUID_SIZE + 8], archive[PATH_MAX + 64], home_archive[PATH_MAX + 64];
        char *home_argv[] = {"tar",
                             "-c",
                             "-f",
                             home_archive,
                             "--numeric-owner",
                             "--sparse",
                             "--xattrs",
                             "--xattrs-include=user.*",
                             "--one-file-system",
                             ".",
                             NULL};
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
        snprintf(archive, sizeof(archive), "%s/%s/" ARCHIVE, checkpoint_dir, tmp);
        snprintf(home_archive, sizeof(home_archive), "%s/%s/" HOME_ARCHIVE, checkpoint_dir, tmp);
        /* A failed dump leaves the processes running as they were; one
         * that failed on what passes (a connection of ours the kernel has
         * not seen close yet) is tried again. */
        checkpoint_await_unix_peers(netns_fd);
        for (int attempt = 0; checkpoint_run(criu_argv, dir_fd) < 0; attempt++) {
                if (attempt == DUMP_ATTEMPTS - 1)
                        worker_fail(msg_fd, "criu dump");
                usleep(100 * 1000 << attempt);
        }
        /* Sealed with the rest: no compressed page file expands past it. */
        if (checkpoint_pages_record(dir_fd) < 0)
                worker_fail(msg_fd, "record of the pages");
        /* The gateway bounded it by its estimate; what was written is
         * counted too, before anything more is. */
        if (room && tree_file_bytes_at(dir_fd) > room)
                worker_fail(msg_fd, "room");
        /* The processes are stopped (or frozen copies were taken): nothing
         * writes the top while tar reads it, through our descriptor. */
        /* A sandbox left running (a fork's) may change a file as tar
         * reads it: tar says so with status 1, and the copy has the file
         * as it was read. */
        rc = run_status(tar_argv, top_fd);
        if (rc != 0 && !(rc == 1 && running))
                worker_fail(msg_fd, "archive of the sandbox's files");
        /* A disk home: its own filesystem, read through the descriptor
         * opened in the sandbox's root without following a link. */
        if (home_fd >= 0) {
                rc = run_status(home_argv, home_fd);
                if (rc != 0 && !(rc == 1 && running))
                        worker_fail(msg_fd, "archive of the sandbox's home");
        }
        if (room && tree_file_bytes_at(dir_fd) > room)
                worker_fail(msg_fd, "room");
        if (checkpoint_seal(dir_fd) < 0)
                worker_fail(msg_fd, "seal");
        if (renameat(checkpoint_dir_fd, tmp, checkpoint_dir_fd, name) < 0 ||
            fsync(checkpoint_dir_fd) < 0)
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

void checkpoint_job_free(struct job *j)
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
        for (size_t i = 0; i < MAX_PROCS; i++) {
                for (int k = 0; k < 3; k++) {
                        if (j->procs[i].inside[k] >= 0)
                                close(j->procs[i].inside[k]);
                        if (j->procs[i].outside[k] >= 0)
                                close(j->procs[i].outside[k]);
                }
        }
        json_decref(j->flags);
        hostmsg_network_clear(&j->network);
        jp_strv_free(j->volumes);
        json_decref(j->layers);
        for (size_t i = 0; i < j->nforeign; i++)
                close(j->foreign[i].fd);
        for (size_t i = 0; i < j->nlayers; i++) {
                if (j->layer_fds[i] >= 0)
                        close(j->layer_fds[i]);
        }
        if (j->home_fd >= 0)
                close(j->home_fd);
        for (size_t i = 0; i < j->nvolumes; i++) {
                if (j->volume_fds[i] >= 0)
                        close(j->volume_fds[i]);
        }
        free(j);
}

struct job *checkpoint_job_new(const char *sandbox_id, const char *name)
{
        struct job *j = calloc(1, sizeof(*j));

        if (!j)
                return NULL;
        j->msg_fd = j->report_rd = j->top_sock = j->home_fd = -1;
        j->net_slot = -1;
        for (size_t i = 0; i < MAX_PROCS; i++) {
                for (int k = 0; k < 3; k++)
                        j->procs[i].inside[k] = j->procs[i].outside[k] = -1;
        }
        snprintf(j->sandbox_id, sizeof(j->sandbox_id), "%s", sandbox_id);
        snprintf(j->name, sizeof(j->name), "%s", name);
        j->next = jobs;
        jobs = j;
        return j;
}

/* The first line of a CRIU log that says "Error", for the gateway. */
static const char *const benign_errors[] = {"RLIMIT_NOFILE", "iptables", "ip6tables"};

void checkpoint_log_error(int dir_fd, const char *file, char *out, size_t size)
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
        n = pread(fd, text, sizeof(text) - 1,
                  end > (off_t)sizeof(text) - 1 ? end - (off_t)sizeof(text) + 1 : 0);
        close(fd);
        if (n <= 0)
                return;
        text[n] = '\0';
        /* The first error is the cause; later ones follow from it. Some
         * CRIU logs on every restore here, and carries on from: the file
         * limit, and its probe of iptables (a host may have nftables only). */
        for (last = strstr(text, "Error ("); last; last = strstr(last + 1, "Error (")) {
                size_t len = strcspn(last, "\n");
                bool benign = false;

                for (size_t i = 0; i < sizeof(benign_errors) / sizeof(benign_errors[0]); i++) {
                        const char *hit = strstr(last, benign_errors[i]);

                        benign = benign || (hit && hit < last + len);
                }
                if (!benign)
                        break;
        }
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

/* A checkpoint made: what it took on disk is said now, as dumped, since
 * its pages may be compressed by the time the gateway could look. */
static void answer_made(checkpoint_report_fn report, const char *id, const char *name)
{
        struct hostmsg_failed m = {0};
        int fd = openat(checkpoint_dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd >= 0) {
                m.bytes = tree_file_bytes_at(fd);
                close(fd);
        }
        if (m.bytes == UINT64_MAX)
                m.bytes = 0;
        snprintf(m.id, sizeof(m.id), "%s", id);
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

/* box.json: what the restore needs besides CRIU's checkpoint_dir. */
/* {mount point: its per-mount options} of every mount of the sandbox:
 * CRIU does not give every restored bind its flags back (binds below
 * another, the masks over /proc's files), so the restore applies them
 * again (checkpoint_restore.c). NULL when unreadable. */
static json_t *box_record(const struct box *b, json_t *mounts, const char *report_pipe)
{
        const struct sandbox *sb = &b->sandbox;
        json_t *procs = json_array();

        for (struct proc *p = NULL; (p = spawn_proc_next(p));) {
                json_t *rec;

                if (p->box != b || !procs)
                        continue;
                rec = json_pack("{s:s, s:i, s:b}", "id", p->id, "nspid", (int)p->sp.nspid, "kernel",
                                p->kernel);
                /* A kernel forked ahead keeps its group's name where groups
                 * cannot be renamed (cgroup v2): the restore makes it so. */
                if (rec && strcmp(cgroup_name(&p->cgroup), ZYGOTE_AHEAD_GROUP) == 0)
                        json_object_set_new(rec, "group", json_string(ZYGOTE_AHEAD_GROUP));
                if (rec)
                        checkpoint_streams_record(p, rec);
                json_array_append_new(procs, rec);
        }
        json_t *flags = checkpoint_mount_flags(sb->init_pid);

        if (!flags) {
                json_decref(procs);
                return NULL;
        }
        return json_pack(
            "{s:i, s:{s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I}, s:s, s:o, s:O, s:o}", "version",
            1, "ids", "setup_uid", (json_int_t)sb->ids.setup_uid, "user_uid",
            (json_int_t)sb->ids.user_uid, "setup_gid", (json_int_t)sb->ids.setup_gid, "user_gid",
            (json_int_t)sb->ids.user_gid, "limits", "memory_mb", (json_int_t)sb->limits.memory_mb,
            "cpu_millis", (json_int_t)sb->limits.cpu_millis, "pids", (json_int_t)sb->limits.pids,
            "disk_mb", (json_int_t)sb->limits.disk_mb, "report_pipe", report_pipe, "procs",
            procs ? procs : json_array(), "mounts", mounts, "flags", flags);
}

static int start_dump(const struct hostmsg_volume *req, char *step, size_t stepsize, char *err,
                      size_t errlen)
{
        struct box *b = spawn_box_find(req->id);
        char tmp[JP_UUID_SIZE + 8], link_path[64], pipe_name[64], init[16], dir[PATH_MAX + 64];
        char *argv[MAX_ARGS], *owned[MAX_ARGS];
        size_t argc = 0, nowned = 0;
        json_t *mounts = NULL, *record = NULL, *foreign = NULL, *m;
        const char *key;
        int dir_fd = -1, home_fd = -1, msg[2] = {-1, -1}, rc = -EINVAL;
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
                         "this sandbox cannot be checkpointed: only one on an overlay, as root, "
                         "and not a template build's");
                return -EOPNOTSUPP;
        }
        if (job_find_sandbox(b->id)) {
                snprintf(err, errlen, "a checkpoint of this sandbox is already being made");
                return -EBUSY;
        }
        /* A kernel's process forked ahead that nothing used is not kept
         * (its link is the kernel-host's). */
        spawn_drop_ahead(b, true);
        /* The report pipe's name, which the restore hands a new pipe for. */
        snprintf(link_path, sizeof(link_path), "/proc/%d/fd/%d", (int)b->sandbox.init_pid, 3);
        n = readlink(link_path, pipe_name, sizeof(pipe_name) - 1);
        if (n <= 0 || strncmp(pipe_name, "pipe:[", 6) != 0) {
                snprintf(err, errlen, "cannot read init's report pipe");
                return -EIO;
        }
        pipe_name[n] = '\0';
        mounts = checkpoint_outside_mounts(b->sandbox.init_pid, b->sandbox.top_fd, b->volumes,
                                           b->disk_home, err, errlen);
        if (!mounts)
                return -EOPNOTSUPP;
        snprintf(tmp, sizeof(tmp), "%s.new", req->volume_id);
        dir_fd = openat(checkpoint_dir_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd >= 0) {
                tree_remove_at(dir_fd);
                close(dir_fd);
                unlinkat(checkpoint_dir_fd, tmp, AT_REMOVEDIR);
        }
        if (mkdirat(checkpoint_dir_fd, tmp, 0700) < 0 ||
            (dir_fd = openat(checkpoint_dir_fd, tmp,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                rc = -errno;
                snprintf(err, errlen, "cannot make the checkpoint's directory: %s",
                         strerror(errno));
                goto out;
        }
        if (b->disk_home) {
                const struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                                             .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
                                                        RESOLVE_NO_MAGICLINKS};

                home_fd = (int)syscall(SYS_openat2, b->sandbox.root_fd, ROOTFS_HOME + 1, &how,
                                       sizeof(how));
                if (home_fd < 0) {
                        rc = -errno;
                        snprintf(err, errlen, "cannot open the sandbox's home: %s",
                                 strerror(errno));
                        goto out;
                }
        }
        foreign = checkpoint_foreign_files(b->sandbox.init_pid, err, errlen);
        if (!foreign) {
                rc = -EOPNOTSUPP;
                goto out;
        }
        record = box_record(b, mounts, pipe_name);
        if (record && json_object_size(foreign))
                json_object_set(record, "foreign", foreign);
        if (record && b->templated)
                json_object_set_new(record, "template", json_string(b->template_root));
        if (record && b->layers) {
                json_object_set_new(record, "layers", jp_strv_to_json(b->layers));
                json_object_set_new(record, "overlays", checkpoint_overlays(b->sandbox.init_pid));
        }
        if (record && b->network) {
                json_object_set(record, "network", b->network);
                json_object_set_new(record, "net_slot", json_integer(b->net.slot));
        } else if (record && checkpoint_action[0]) {
                json_object_set_new(record, "empty_net", json_true());
        }
        text = record ? json_dumps(record, JSON_COMPACT) : NULL;
        if (!text || state_write_at(dir_fd, RECORD, text) < 0) {
                rc = -EIO;
                snprintf(err, errlen, "cannot write the checkpoint's record");
                goto out;
        }
        snprintf(init, sizeof(init), "%d", (int)b->sandbox.init_pid);
        snprintf(dir, sizeof(dir), "%s/%s", checkpoint_dir, tmp);
#define ARG(s) (argv[argc++] = (char *)(s))
        ARG(checkpoint_criu);
        ARG("dump");
        ARG("-t");
        ARG(init);
        ARG("-D");
        ARG(dir);
        ARG("-o");
        ARG("dump.log");
        ARG("-v2");
        ARG(req->size_mb ? "--leave-stopped" : "--leave-running");
        ARG("--tcp-established");
        ARG("--file-locks");
        ARG("--network-lock");
        /* A namespace that holds lo alone: nothing from outside can reach
         * its sockets, so no packet needs to be held back while they are
         * read (nor while they come back, which the restore takes from
         * here): a lock there cost 2 ms of the dump and 14 of the restore,
         * which sets it up again in the new namespace to take it away. */
        if (json_is_true(json_object_get(record, "empty_net"))) {
                ARG("skip");
                ARG("--empty-ns");
                ARG("net");
        } else {
                ARG("nftables");
        }
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
        json_object_foreach(foreign, key, m) {
                ARG("--external");
                ARG(key);
        }
        rc = checkpoint_streams_dump_args(b, argv, &argc, owned, &nowned, err, errlen);
        if (rc < 0) {
                tree_remove_at(dir_fd);
                goto out;
        }
        argv[argc] = NULL;
#undef ARG
        if (pipe2(msg, O_CLOEXEC) < 0 || fcntl(msg[0], F_SETFL, O_NONBLOCK) < 0)
                goto nomem;
        j = checkpoint_job_new(b->id, req->volume_id);
        if (!j)
                goto nomem;
        j->kill_after = req->size_mb != 0;
        j->room_mb = req->room_mb;
        j->net_slot = b->net.slot;
        /* Its connections out close; the network comes back after. */
        rc = net_detach(&b->net, b->sandbox.ns_fds[SANDBOX_NS_NET]);
        if (rc < 0) {
                checkpoint_job_free(j);
                tree_remove_at(dir_fd);
                snprintf(err, errlen, "cannot close the sandbox's connections out: %s",
                         strerror(-rc));
                goto out;
        }
        pid = fork();
        if (pid == 0) {
                close(msg[0]);
                dump_worker(argv, b->sandbox.top_fd, home_fd, b->sandbox.ns_fds[SANDBOX_NS_NET],
                            dir_fd, req->volume_id, msg[1], req->room_mb << 20, req->size_mb == 0);
        }
        if (pid < 0) {
                rc = -errno;
                spawn_box_network_back(b, j->net_slot);
                checkpoint_job_free(j);
                snprintf(err, errlen, "fork: %s", strerror(-rc));
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
        if (home_fd >= 0)
                close(home_fd);
        if (rc < 0)
                unlinkat(checkpoint_dir_fd, tmp, AT_REMOVEDIR);
        free(text);
        json_decref(record);
        json_decref(mounts);
        json_decref(foreign);
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
                        spawn_box_hold_slot(b);
                        sandbox_kill(&b->sandbox);
                } else if (b) {
                        spawn_box_network_back(b, j->net_slot);
                }
                answer_made(report, j->sandbox_id, j->name);
                checkpoint_compact_queue(j->name);
                return;
        }
        n = read(j->msg_fd, what, sizeof(what) - 1);
        what[n > 0 ? n : 0] = '\0';
        snprintf(tmp, sizeof(tmp), "%s.new", j->name);
        dir_fd = openat(checkpoint_dir_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd >= 0) {
                if (strcmp(what, "criu dump") == 0)
                        checkpoint_log_error(dir_fd, "dump.log", why, sizeof(why));
                tree_remove_at(dir_fd);
                close(dir_fd);
                unlinkat(checkpoint_dir_fd, tmp, AT_REMOVEDIR);
        }
        if (strcmp(what, "room") == 0)
                snprintf(message, sizeof(message),
                         "the checkpoint took more than the %llu MiB it was given (its key's "
                         "--pause-quota-mb, or its sandbox's memory and disk limits)",
                         (unsigned long long)j->room_mb);
        else
                snprintf(message, sizeof(message), "%s failed%s%s",
                         what[0] ? what : "the dump's worker", why[0] ? ": " : "", why);
        klog_warn(j->sandbox_id, "checkpoint %.8s: %s", j->name, message);
        /* CRIU let the processes run on; a worker killed later leaves
         * them stopped, which would hang the sandbox. */
        if (b && b->init_alive) {
                kill(-b->sandbox.init_pid, SIGCONT);
                spawn_box_network_back(b, j->net_slot);
        }
        answer(report, j->sandbox_id, what[0] ? what : "worker",
               strcmp(what, "room") == 0 ? EFBIG : EIO, message);
}

/* ---- from the gateway ------------------------------------------------------------ */

static void delete_checkpoint(const char *name)
{
        int dir_fd =
            openat(checkpoint_dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        json_t *rec = NULL;
        unsigned long long uid;

        if (dir_fd < 0)
                return;
        if (checkpoint_restoring(name)) {
                /* CRIU still reads it: the gateway asks again. */
                close(dir_fd);
                return;
        }
        checkpoint_compact_cancel(name);
        if (checkpoint_read_record(dir_fd, &rec) == 0 &&
            checkpoint_json_uint(json_object_get(rec, "ids"), "setup_uid", UINT32_MAX, &uid))
                spawn_slot_unhold((unsigned)uid);
        json_decref(rec);
        tree_remove_at(dir_fd);
        close(dir_fd);
        if (unlinkat(checkpoint_dir_fd, name, AT_REMOVEDIR) < 0)
                log_warn("cannot remove checkpoint %.8s: %s", name, strerror(errno));
}

void checkpoint_handle(enum hostmsg_type type, json_t *body, int link, checkpoint_report_fn report)
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
        if (checkpoint_dir_fd < 0) {
                rc = -EOPNOTSUPP;
                snprintf(step, sizeof(step), "checkpoints");
                snprintf(err, sizeof(err), "%s", off_why);
        } else if (type == HOSTMSG_CHECKPOINT_DELETE) {
                delete_checkpoint(req.volume_id);
                return;
        } else if (type == HOSTMSG_CHECKPOINT) {
                rc = start_dump(&req, step, sizeof(step), err, sizeof(err));
        } else {
                rc = checkpoint_restore_start(&req, step, sizeof(step), err, sizeof(err));
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

bool checkpoint_restoring(const char *name)
{
        for (struct job *j = jobs; j; j = j->next) {
                if (j->restore && strcmp(j->name, name) == 0)
                        return true;
        }
        return false;
}

bool checkpoint_reaped(pid_t pid, int status, int link, checkpoint_report_fn report)
{
        if (checkpoint_compact_reaped(pid, status))
                return true;
        for (struct job *j = jobs; j; j = j->next) {
                char name[JP_UUID_SIZE];
                bool restore = j->restore;

                if (j->pid != pid)
                        continue;
                if (restore)
                        checkpoint_restore_reaped(j, status, link, report);
                else
                        dump_reaped(j, status, report);
                snprintf(name, sizeof(name), "%s", j->name);
                checkpoint_job_free(j);
                /* A snapshot, a fork's source: compacted again once no
                 * restore reads it (the queue skips one still read). */
                if (restore)
                        checkpoint_compact_queue(name);
                return true;
        }
        return false;
}
