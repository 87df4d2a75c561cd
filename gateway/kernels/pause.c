#include "autoconf.h"

#include "gateway/kernels/pause.h"
#include "gateway/core/config.h"
#include "gateway/core/loop.h"
#include "gateway/kernels/process.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define FEED_PIECE  (256 * 1024)
#define PIPE_WANTED (1024 * 1024) /* the most an unprivileged pipe may hold by default */
#define STDERR_KEPT 512
#define META_MAX    (256 * 1024)

/* paused/ and snapshots/ of the state directory, or -1 when pausing is
 * off. */
static int paused_fd = -1;
static int snapshots_fd = -1;

static int store_fd(enum pause_store store)
{
        return store == PAUSE_SNAPSHOTS ? snapshots_fd : paused_fd;
}

struct pause_job {
        pause_done_fn done;
        void *ctx;
        struct process *process;
        int file_fd; /* the archive: written (save) or read (restore) */
        int dir_fd;  /* paused/<id>/ */
        bool restore;
        bool file_eof;
        int write_error; /* save: a failed write of the archive (-EFBIG: past max_bytes) */
        uint64_t bytes;
        uint64_t max_bytes; /* save: what the archive may take (pause_archive_room) */
        char err[STDERR_KEPT + 1];
        size_t err_len;
        uint8_t *piece; /* restore: what read() gave and stdin has yet to take */
        size_t piece_len, piece_at;
        lws_sorted_usec_list_t retry;
};

static bool id_ok(const char *id)
{
        size_t n = strlen(id);

        if (n == 0 || n >= PAUSE_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = id[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_'))
                        return false;
        }
        return true;
}

/* STATE_DIR/.lock: held while this gateway runs (flock, released by the
 * kernel when it ends however it ends; close-on-exec, so a restart that
 * keeps kernels takes it again), naming its pid. */
#define STATE_LOCK ".lock"

static int state_lock_fd = -1;

int state_dir_lock(const char *state_dir)
{
        char pid[32] = "";
        ssize_t n;
        int fd;

        if (!state_dir || !state_dir[0])
                return 0;
        if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
                log_error("state directory %s: %s", state_dir, strerror(errno));
                return -errno;
        }
        fd = openat(AT_FDCWD, state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
                int dir = fd;

                fd = openat(dir, STATE_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
                close(dir);
        }
        if (fd < 0) {
                log_error("state directory %s: cannot open its lock: %s", state_dir,
                          strerror(errno));
                return -errno;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int err = errno;

                n = pread(fd, pid, sizeof(pid) - 1, 0);
                pid[n > 0 ? n : 0] = '\0';
                pid[strcspn(pid, "\n")] = '\0';
                log_error("state directory %s is in use by another glovebox (pid %s): two "
                          "gateways on one machine need a --state-dir each",
                          state_dir, pid[0] ? pid : "unknown");
                close(fd);
                return err == EWOULDBLOCK ? -EBUSY : -err;
        }
        snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, strlen(pid), 0) < 0)
                log_warn("state directory %s: cannot write its lock's pid", state_dir);
        state_lock_fd = fd;
        return 0;
}

int pause_init(const char *state_dir)
{
        int dir = -1;
        int rc = 0;

        if (!state_dir || !state_dir[0])
                return 0;
        /* The state directory is the gateway's own: nothing in a sandbox
         * can write there, so paths under it are safe to use as root. */
        if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
                rc = -errno;
                goto out;
        }
        dir = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0) {
                rc = -errno;
                goto out;
        }
        if (mkdirat(dir, "paused", 0700) < 0 && errno != EEXIST) {
                rc = -errno;
                goto out;
        }
        paused_fd = openat(dir, "paused", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (paused_fd < 0) {
                rc = -errno;
                goto out;
        }
        if (mkdirat(dir, "snapshots", 0700) < 0 && errno != EEXIST) {
                rc = -errno;
                goto out;
        }
        snapshots_fd = openat(dir, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (snapshots_fd < 0)
                rc = -errno;
out:
        if (rc < 0)
                log_error("state directory %s: %s", state_dir, strerror(-rc));
        if (dir >= 0)
                close(dir);
        return rc;
}

bool pause_enabled(void)
{
        return paused_fd >= 0;
}

/* paused/<id>/ (or snapshots/<id>/), made when make; -errno. */
static int open_id_dir(enum pause_store store, const char *id, bool make)
{
        int top = store_fd(store), fd;

        if (top < 0)
                return -ENOTSUP;
        if (!id_ok(id))
                return -EINVAL;
        if (make && mkdirat(top, id, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(top, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        return fd < 0 ? -errno : fd;
}

int state_write_file(int dir, const char *name, const char *text)
{
        char tmp[NAME_MAX + 1];
        size_t len = strlen(text);
        int fd, rc = 0;

        if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new", name) >= sizeof(tmp))
                return -ENAMETOOLONG;
        if (unlinkat(dir, tmp, 0) < 0 && errno != ENOENT)
                return -errno;
        fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        while (rc == 0 && len > 0) {
                ssize_t n = write(fd, text, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        rc = n < 0 ? -errno : -EIO;
                else {
                        text += n;
                        len -= (size_t)n;
                }
        }
        /* A record that survives the machine's crash as well as the
         * gateway's: on disk before it replaces the old one. */
        if (rc == 0 && fsync(fd) < 0)
                rc = -errno;
        close(fd);
        if (rc == 0 && renameat(dir, tmp, dir, name) < 0)
                rc = -errno;
        if (rc == 0 && fsync(dir) < 0)
                rc = -errno;
        if (rc < 0)
                unlinkat(dir, tmp, 0);
        return rc;
}

int pause_write_meta_in(enum pause_store store, const char *id, json_t *meta)
{
        int dir = open_id_dir(store, id, true);
        char *text;
        int rc;

        if (dir < 0)
                return dir;
        text = json_dumps(meta, JSON_COMPACT);
        rc = text ? state_write_file(dir, "meta.json", text) : -ENOMEM;
        free(text);
        close(dir);
        return rc;
}

int pause_load_all_in(enum pause_store store,
                      void (*found)(void *ctx, const char *id, json_t *meta), void *ctx)
{
        DIR *d;
        struct dirent *e;
        int count = 0;
        int dup;

        if (store_fd(store) < 0)
                return 0;
        dup = fcntl(store_fd(store), F_DUPFD_CLOEXEC, 3);
        if (dup < 0)
                return -errno;
        d = fdopendir(dup);
        if (!d) {
                close(dup);
                return -errno;
        }
        /* A duplicate shares the offset with paused_fd: from the start. */
        rewinddir(d);
        while ((e = readdir(d)) != NULL) {
                json_error_t jerr;
                json_t *meta;
                int dir, fd;

                if (!id_ok(e->d_name))
                        continue;
                dir = open_id_dir(store, e->d_name, false);
                if (dir < 0)
                        continue;
                fd = openat(dir, "meta.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                close(dir);
                if (fd < 0) {
                        log_warn("paused sandbox %s has no meta.json; left as it is", e->d_name);
                        continue;
                }
                meta = json_read_fd(fd, META_MAX, 0, &jerr);
                close(fd);
                if (!json_is_object(meta)) {
                        log_warn("paused sandbox %s: unreadable meta.json (%s); left as it is",
                                 e->d_name, jerr.text);
                        json_decref(meta);
                        continue;
                }
                found(ctx, e->d_name, meta);
                json_decref(meta);
                count++;
        }
        closedir(d);
        return count;
}

void pause_forget_in(enum pause_store store, const char *id)
{
        int dir = open_id_dir(store, id, false);

        if (dir < 0)
                return;
        unlinkat(dir, "home.tar", 0);
        unlinkat(dir, "home.tar.new", 0);
        unlinkat(dir, "meta.json", 0);
        unlinkat(dir, "meta.json.new", 0);
        close(dir);
        if (unlinkat(store_fd(store), id, AT_REMOVEDIR) < 0)
                log_warn("cannot remove the paused state of %s: %s", id, strerror(errno));
}

/* ---- the tar runs ---------------------------------------------------------- */

static void job_free(struct pause_job *j)
{
        loop_timer_stop(&j->retry);
        if (j->file_fd >= 0)
                close(j->file_fd);
        if (j->dir_fd >= 0)
                close(j->dir_fd);
        free(j->piece);
        free(j);
}

static void job_finish(struct pause_job *j, int status, const char *message)
{
        j->done(j->ctx, status, message, j->bytes);
        job_free(j);
}

static void on_output(void *ctx, int stream, const uint8_t *data, size_t len)
{
        struct pause_job *j = ctx;

        if (stream == 2) {
                size_t n = len < STDERR_KEPT - j->err_len ? len : STDERR_KEPT - j->err_len;

                memcpy(j->err + j->err_len, data, n);
                j->err_len += n;
                j->err[j->err_len] = '\0';
                return;
        }
        if (j->restore || j->write_error)
                return;
        /* Counted before it is written: the disk never holds more. */
        if (j->bytes + len > j->max_bytes) {
                j->write_error = -EFBIG;
                if (j->process)
                        process_signal(j->process, SIGKILL);
                return;
        }
        while (len) {
                ssize_t n = write(j->file_fd, data, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        j->write_error = -errno;
                        return;
                }
                data += n;
                len -= (size_t)n;
                j->bytes += (uint64_t)n;
        }
}

static void on_retry(lws_sorted_usec_list_t *sul);

/* Restore: moves the archive into tar's stdin as far as the pipe takes
 * it, and tries again shortly when it is full. */
static void feed(struct pause_job *j)
{
        int fd = process_stdin_fd(j->process);

        while (fd >= 0) {
                ssize_t n;

                if (j->piece_at == j->piece_len) {
                        if (j->file_eof)
                                break;
                        n = read(j->file_fd, j->piece, FEED_PIECE);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                j->file_eof = true;
                                break;
                        }
                        j->piece_len = (size_t)n;
                        j->piece_at = 0;
                }
                n = write(fd, j->piece + j->piece_at, j->piece_len - j->piece_at);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        loop_timer_start(&j->retry, on_retry, 1.0);
                        return;
                }
                if (n < 0) {
                        /* tar went away; its exit says why */
                        j->file_eof = true;
                        break;
                }
                j->piece_at += (size_t)n;
                j->bytes += (uint64_t)n;
        }
        if (j->file_eof)
                process_close_stdin(j->process);
}

static void on_retry(lws_sorted_usec_list_t *sul)
{
        struct pause_job *j = lws_container_of(sul, struct pause_job, retry);

        feed(j);
}

static void on_started(void *ctx)
{
        struct pause_job *j = ctx;
        int fd;

        if (!j->restore)
                return;
        fd = process_stdin_fd(j->process);
        /* A bigger pipe: fewer turns of the loop per archive. */
        if (fd >= 0)
                fcntl(fd, F_SETPIPE_SZ, PIPE_WANTED);
        feed(j);
}

static void on_failed(void *ctx, const char *message)
{
        struct pause_job *j = ctx;

        j->process = NULL;
        job_finish(j, -EIO, message);
}

static void on_ended(void *ctx, const struct hostmsg_exit *ex)
{
        struct pause_job *j = ctx;
        char message[STDERR_KEPT + 128];

        j->process = NULL;
        loop_timer_stop(&j->retry);
        if (!j->restore && j->write_error == -EFBIG) {
                unlinkat(j->dir_fd, "home.tar.new", 0);
                snprintf(message, sizeof(message),
                         "the files would take more than %llu MiB to keep: the sandbox's disk "
                         "limit, or what is left of its owner's room for paused sandboxes "
                         "(--pause-quota-mb); not paused",
                         (unsigned long long)(j->max_bytes >> 20));
                job_finish(j, -EFBIG, message);
                return;
        }
        if (ex->exit_code != 0) {
                snprintf(message, sizeof(message), "tar %s: %s%s",
                         ex->signal ? "was killed" : "failed", j->err_len ? j->err : "",
                         ex->reason[0] && strcmp(ex->reason, "exited") ? ex->reason : "");
                job_finish(j, -EIO, message);
                return;
        }
        if (!j->restore) {
                if (j->write_error) {
                        unlinkat(j->dir_fd, "home.tar.new", 0);
                        snprintf(message, sizeof(message), "cannot store the archive: %s",
                                 strerror(-j->write_error));
                        job_finish(j, j->write_error, message);
                        return;
                }
                if (fsync(j->file_fd) < 0 ||
                    renameat(j->dir_fd, "home.tar.new", j->dir_fd, "home.tar") < 0) {
                        snprintf(message, sizeof(message), "cannot store the archive: %s",
                                 strerror(errno));
                        job_finish(j, -EIO, message);
                        return;
                }
        }
        job_finish(j, 0, NULL);
}

static const struct process_ops tar_ops = {on_started, on_output, on_failed, on_ended};

static int run_tar(struct sandbox *sb, enum pause_store store, const char *id, bool restore,
                   uint64_t max_bytes, pause_done_fn done, void *ctx)
{
        /* tar runs in the sandbox as its user: it reads and writes only
         * what the user may, and the gateway touches nothing of the
         * sandbox's but the pipes. */
        /* IPython's history database is left out: the resumed kernel has
         * its own open before the files come back. */
        /* Sparse files as sparse: their holes take no room in the
         * archive (a file of a terabyte of holes is a few blocks). */
        char *save_argv[] = {"/usr/bin/tar",
                             "--create",
                             "--sparse",
                             "--file=-",
                             "--directory=/home/user",
                             "--numeric-owner",
                             "--exclude=./.ipython/profile_default/history.sqlite*",
                             ".",
                             NULL};
        char *restore_argv[] = {"/usr/bin/tar",           "--extract",       "--file=-",
                                "--directory=/home/user", "--no-same-owner", NULL};
        char *env[] = {"LC_ALL=C", NULL};
        struct hostmsg_start start = {.argv = restore ? restore_argv : save_argv, .env = env};
        struct pause_job *j = calloc(1, sizeof(*j));
        int rc;

        if (!j)
                return -ENOMEM;
        j->file_fd = -1;
        j->done = done;
        j->ctx = ctx;
        j->restore = restore;
        j->max_bytes = max_bytes;
        j->dir_fd = open_id_dir(store, id, !restore);
        if (j->dir_fd < 0) {
                rc = j->dir_fd;
                goto fail;
        }
        if (restore)
                j->file_fd = openat(j->dir_fd, "home.tar", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        else
                j->file_fd = openat(j->dir_fd, "home.tar.new",
                                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (j->file_fd < 0) {
                rc = -errno;
                goto fail;
        }
        if (restore) {
                j->piece = malloc(FEED_PIECE);
                if (!j->piece) {
                        rc = -ENOMEM;
                        goto fail;
                }
        }
        snprintf(start.sandbox_id, sizeof(start.sandbox_id), "%s", sb->id);
        rc = process_start(&start, restore, &tar_ops, j, &j->process);
        if (rc < 0)
                goto fail;
        return 0;
fail:
        job_free(j);
        return rc;
}

/* What owner's paused sandboxes keep now: their archives as the disk
 * holds them, read from each paused/<id>/meta.json's "owner". */
static uint64_t store_owner_bytes(int top, const char *owner, const char *skip)
{
        DIR *d = top >= 0 ? fdopendir(dup(top)) : NULL;
        struct dirent *e;
        uint64_t total = 0;

        if (!d)
                return 0;
        rewinddir(d);
        while ((e = readdir(d))) {
                char path[PAUSE_ID_MAX + 32];
                json_t *meta;
                struct stat st;
                int fd;

                if (!id_ok(e->d_name) || strcmp(e->d_name, skip) == 0)
                        continue;
                snprintf(path, sizeof(path), "%s/meta.json", e->d_name);
                fd = openat(top, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                meta = fd >= 0 ? json_read_fd(fd, META_MAX, 0, NULL) : NULL;
                if (fd >= 0)
                        close(fd);
                if (meta &&
                    strcmp(json_string_value(json_object_get(meta, "owner")) ?: "", owner) == 0) {
                        snprintf(path, sizeof(path), "%s/home.tar", e->d_name);
                        if (fstatat(top, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
                                total += (uint64_t)st.st_blocks * 512;
                        /* A pause with memory: its checkpoint, as measured. */
                        if (json_integer_value(json_object_get(meta, "checkpointBytes")) > 0)
                                total += (uint64_t)json_integer_value(
                                    json_object_get(meta, "checkpointBytes"));
                }
                json_decref(meta);
        }
        closedir(d);
        return total;
}

uint64_t pause_owner_bytes(const char *owner, const char *skip)
{
        return store_owner_bytes(paused_fd, owner, skip) +
               store_owner_bytes(snapshots_fd, owner, skip);
}

int pause_archive_room(const struct sandbox *sb, const char *owner, const char *id, uint64_t *room)
{
        const struct config *cfg = config_get();
        uint64_t disk = sb->limits.disk_mb << 20;
        uint64_t quota = (uint64_t)cfg->pause_quota_mb << 20;
        uint64_t used = pause_owner_bytes(owner, id);

        /* The files fit in the disk limit; tar adds a header of 512 bytes
         * per file and pads each: room for that too. */
        *room = disk + disk / 8 + PAUSE_ARCHIVE_SLACK;
        if (used + PAUSE_MIN_ROOM > quota)
                return -EDQUOT;
        if (quota - used < *room)
                *room = quota - used;
        return 0;
}

int pause_save_home_in(enum pause_store store, struct sandbox *sb, const char *id,
                       const char *owner, pause_done_fn done, void *ctx)
{
        uint64_t room;
        int rc = pause_archive_room(sb, owner, id, &room);

        return rc < 0 ? rc : run_tar(sb, store, id, false, room, done, ctx);
}

int pause_restore_home_from(enum pause_store store, struct sandbox *sb, const char *id,
                            pause_done_fn done, void *ctx)
{
        return run_tar(sb, store, id, true, 0, done, ctx);
}

int pause_write_meta(const char *id, json_t *meta)
{
        return pause_write_meta_in(PAUSE_PAUSED, id, meta);
}

int pause_load_all(void (*found)(void *ctx, const char *id, json_t *meta), void *ctx)
{
        return pause_load_all_in(PAUSE_PAUSED, found, ctx);
}

void pause_forget(const char *id)
{
        pause_forget_in(PAUSE_PAUSED, id);
}

int pause_save_home(struct sandbox *sb, const char *id, const char *owner, pause_done_fn done,
                    void *ctx)
{
        return pause_save_home_in(PAUSE_PAUSED, sb, id, owner, done, ctx);
}

int pause_restore_home(struct sandbox *sb, const char *id, pause_done_fn done, void *ctx)
{
        return pause_restore_home_from(PAUSE_PAUSED, sb, id, done, ctx);
}
