/* A checkpoint's memory pages on disk. CRIU writes them as pages-N.img,
 * the bulk of a checkpoint (about 50 MiB for a fresh Python kernel, 200
 * MiB for one holding a 128 MiB DataFrame). Once a checkpoint has waited
 * --pause-compress-after, checkpoint_compact.c has each file compressed
 * with zstd into pages-N.img.zst; a restore decompresses them again into
 * an image directory of its own (checkpoint_copy.c's), never into the
 * checkpoint, so that a failed restore can be tried again and a snapshot
 * restored as often as asked.
 *
 * At every moment one whole copy of each file is there: the compressed one
 * is written as pages-N.img.zst.tmp, made durable and renamed before the
 * .img is unlinked. Where both are (a compaction killed between the two),
 * the .img is read; a .tmp is a dead compaction's, and is removed.
 *
 * A page file that zstd shrinks by less than an eighth (random bytes,
 * data compressed already) is kept plain: its restore would pay for
 * decompressing it and the disk would hardly gain. An extended attribute
 * on it says so, so that no later compaction tries it again.
 *
 * The manifest (checkpoint_manifest.c) leaves all three forms out, as it
 * always left out the pages' contents, the sandbox's own memory. What it
 * seals instead is pages.json, written at the dump: each page file's size
 * as CRIU wrote it. Nothing is decompressed past that size, whatever a
 * .zst holds. zstd is Debian's program, run as a child: what it reads and
 * writes are descriptors we opened, and it runs with no other. */
#include "autoconf.h"

#include "kernel-host/checkpoint_internal.h"
#include "protocol/buf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PAGES_RECORD_MAX (1 << 16) /* a name and a size per process tree */
#define ZST              ".zst"
#define ZST_TMP          ".zst.tmp"
/* zstd's fastest level: about 170 MiB/s on incompressible pages here, and
 * a decompression does not get faster at a higher one. */
#define ZSTD_LEVEL "-1"
/* On a page file compressing does not pay for (see above). */
#define XATTR_KEPT_PLAIN "user.glovebox.kept-plain"

enum checkpoint_pages_form checkpoint_pages_form(const char *name, char *base, size_t size)
{
        const char *p = name + 6;
        size_t digits;
        enum checkpoint_pages_form form;

        if (strncmp(name, "pages-", 6) != 0)
                return PAGES_NOT;
        digits = strspn(p, "0123456789");
        if (digits == 0 || digits > 10 || strncmp(p + digits, ".img", 4) != 0)
                return PAGES_NOT;
        p += digits + 4;
        form = !*p                       ? PAGES_PLAIN
               : strcmp(p, ZST) == 0     ? PAGES_COMPRESSED
               : strcmp(p, ZST_TMP) == 0 ? PAGES_PARTIAL
                                         : PAGES_NOT;
        if (form != PAGES_NOT && base && size)
                snprintf(base, size, "%.*s", (int)(p - name), name);
        return form;
}

/* The base names (pages-N.img) of dir_fd's page files in form, as a JSON
 * array (the caller decrefs; NULL when the directory cannot be read):
 * listed whole before any is renamed, which readdir would not promise to
 * see consistently. */
static json_t *list_form(int dir_fd, enum checkpoint_pages_form form)
{
        int fd = dup(dir_fd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        json_t *out = json_array();
        struct dirent *e;

        if (!d || !out) {
                if (d)
                        closedir(d);
                else if (fd >= 0)
                        close(fd);
                json_decref(out);
                return NULL;
        }
        rewinddir(d);
        while ((e = readdir(d))) {
                char base[NAME_MAX + 1];

                if (checkpoint_pages_form(e->d_name, base, sizeof(base)) == form)
                        json_array_append_new(out, json_string(base));
        }
        closedir(d);
        return out;
}

/* Whether dir_fd holds name (not following a link). */
static bool has(int dir_fd, const char *name)
{
        struct stat st;

        return fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

int checkpoint_pages_record(int dir_fd)
{
        json_t *plain = list_form(dir_fd, PAGES_PLAIN), *sizes = json_object(), *v;
        char *text = NULL;
        size_t i;
        int fd = -1, rc = -EIO;

        if (!plain || !sizes)
                goto out;
        json_array_foreach(plain, i, v) {
                struct stat st;

                if (fstatat(dir_fd, json_string_value(v), &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISREG(st.st_mode) ||
                    json_object_set_new(sizes, json_string_value(v),
                                        json_integer((json_int_t)st.st_size)) < 0)
                        goto out;
        }
        text = json_dumps(sizes, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text || strlen(text) >= PAGES_RECORD_MAX)
                goto out;
        /* Made durable with the rest by checkpoint_seal. */
        fd = openat(dir_fd, CHECKPOINT_PAGES_RECORD,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text))
                rc = 0;
out:
        if (fd >= 0)
                close(fd);
        free(text);
        json_decref(plain);
        json_decref(sizes);
        return rc;
}

json_t *checkpoint_pages_sizes(int dir_fd)
{
        int fd = openat(dir_fd, CHECKPOINT_PAGES_RECORD, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        json_t *sizes = fd >= 0 ? json_read_fd(fd, PAGES_RECORD_MAX, 0, NULL) : NULL;

        if (fd >= 0)
                close(fd);
        if (!json_is_object(sizes)) {
                json_decref(sizes);
                return NULL;
        }
        return sizes;
}

/* base's size in sizes, when it is a sane one. */
static bool recorded_size(json_t *sizes, const char *base, uint64_t *out)
{
        json_t *v = json_object_get(sizes, base);

        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return false;
        *out = (uint64_t)json_integer_value(v);
        return true;
}

/* Runs zstd with option mode ("-d", or a level), reading in and writing
 * out, whose output may reach limit bytes and no further: past it a write
 * fails (RLIMIT_FSIZE, SIGXFSZ ignored) and zstd stops. 0 when zstd
 * exited 0, else -EIO. The child dies with us (a killed compaction's
 * zstd writes nothing more). */
static int run_zstd(const char *mode, int in, int out, uint64_t limit)
{
        char *argv[] = {"zstd", (char *)mode, "-q", "-c", "--no-progress", NULL};
        pid_t parent = getpid(), pid;
        int status;

        pid = fork();
        if (pid == 0) {
                struct rlimit fsize = {.rlim_cur = limit, .rlim_max = limit};
                int null_fd = open("/dev/null", O_WRONLY);
                sigset_t none;

                sigemptyset(&none);
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
                    sigprocmask(SIG_SETMASK, &none, NULL) < 0 ||
                    signal(SIGXFSZ, SIG_IGN) == SIG_ERR)
                        _exit(127);
                /* Above stdio first, so that no dup2 below overwrites one. */
                in = fcntl(in, F_DUPFD, 3);
                out = fcntl(out, F_DUPFD, 3);
                if (in < 0 || out < 0 || null_fd < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
                    dup2(null_fd, 2) < 0)
                        _exit(127);
                syscall(SYS_close_range, 3, ~0u, 0);
                if (limit != UINT64_MAX && setrlimit(RLIMIT_FSIZE, &fsize) < 0)
                        _exit(127);
                execvp(argv[0], argv);
                _exit(127);
        }
        if (pid < 0)
                return -errno;
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -EIO;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* Whether a compressed form of size bytes saves too little on plain
 * ones to be worth a slower restore. */
static bool too_little_saved(uint64_t plain, uint64_t compressed)
{
        return compressed > plain - plain / 8;
}

/* Whether base in dir_fd was found not worth compressing. */
static bool kept_plain(int dir_fd, const char *base)
{
        int fd = openat(dir_fd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        char mark;
        bool kept = fd >= 0 && fgetxattr(fd, XATTR_KEPT_PLAIN, &mark, 1) == 1;

        if (fd >= 0)
                close(fd);
        return kept;
}

int checkpoint_pages_compress(int dir_fd, const char *base, uint64_t size)
{
        char zst[NAME_MAX + 1], tmp[NAME_MAX + 1];
        int in = openat(dir_fd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), out = -1, rc = 0;
        struct stat st;

        snprintf(zst, sizeof(zst), "%s" ZST, base);
        snprintf(tmp, sizeof(tmp), "%s" ZST_TMP, base);
        /* Not as the dump recorded it: not ours to touch. */
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
                rc = in < 0 ? -errno : -ESTALE;
                goto out;
        }
        out = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (out < 0) {
                rc = -errno;
                goto out;
        }
        rc = run_zstd(ZSTD_LEVEL, in, out, UINT64_MAX);
        if (rc == 0 && fstat(out, &st) == 0 && too_little_saved(size, (uint64_t)st.st_size)) {
                /* Best effort: a filesystem without user attributes only
                 * has it tried again at the next compaction. */
                unlinkat(dir_fd, tmp, 0);
                (void)fsetxattr(in, XATTR_KEPT_PLAIN, "1", 1, 0);
                goto out;
        }
        /* Whole on disk before it takes the .img's place, readable by the
         * restore's CRIU as the other images are (checkpoint_seal). */
        if (rc == 0 && (fchmod(out, 0644) < 0 || fsync(out) < 0))
                rc = -EIO;
        if (rc == 0 && renameat(dir_fd, tmp, dir_fd, zst) < 0)
                rc = -errno;
        if (rc == 0 && fsync(dir_fd) < 0)
                rc = -EIO;
        if (rc < 0) {
                unlinkat(dir_fd, tmp, 0);
                goto out;
        }
        if (unlinkat(dir_fd, base, 0) < 0 || fsync(dir_fd) < 0)
                rc = -EIO;
out:
        if (in >= 0)
                close(in);
        if (out >= 0)
                close(out);
        return rc;
}

int checkpoint_pages_compress_all(int dir_fd)
{
        json_t *plain = list_form(dir_fd, PAGES_PLAIN), *sizes = checkpoint_pages_sizes(dir_fd);
        json_t *v;
        size_t i;
        int rc = plain ? 0 : -EIO;

        json_array_foreach(plain, i, v) {
                uint64_t size;

                /* One the dump did not record (an older checkpoint's), or
                 * one found not worth it, stays. */
                if (!recorded_size(sizes, json_string_value(v), &size) ||
                    kept_plain(dir_fd, json_string_value(v)))
                        continue;
                rc = checkpoint_pages_compress(dir_fd, json_string_value(v), size);
                if (rc < 0)
                        break;
        }
        json_decref(plain);
        json_decref(sizes);
        return rc;
}

bool checkpoint_pages_pending(int dir_fd)
{
        json_t *plain = list_form(dir_fd, PAGES_PLAIN), *sizes = checkpoint_pages_sizes(dir_fd);
        json_t *v;
        size_t i;
        bool pending = false;

        json_array_foreach(plain, i, v) {
                uint64_t size;

                pending = pending || (recorded_size(sizes, json_string_value(v), &size) &&
                                      !kept_plain(dir_fd, json_string_value(v)));
        }
        json_decref(plain);
        json_decref(sizes);
        return pending;
}

bool checkpoint_pages_compressed(int dir_fd)
{
        json_t *compressed = list_form(dir_fd, PAGES_COMPRESSED), *v;
        size_t i;
        bool any = false;

        json_array_foreach(compressed, i, v)
                any = any || !has(dir_fd, json_string_value(v));
        json_decref(compressed);
        return any;
}

void checkpoint_pages_remove_partial(int dir_fd)
{
        json_t *partial = list_form(dir_fd, PAGES_PARTIAL), *v;
        size_t i;

        json_array_foreach(partial, i, v) {
                char tmp[NAME_MAX + 1];

                snprintf(tmp, sizeof(tmp), "%s" ZST_TMP, json_string_value(v));
                unlinkat(dir_fd, tmp, 0);
        }
        json_decref(partial);
}

/* base.zst of dir_fd decompressed as base into images_fd: exactly size
 * bytes, or nothing is left and -EBADMSG. */
static int expand_one(int dir_fd, int images_fd, const char *base, uint64_t size)
{
        char zst[NAME_MAX + 1];
        int in, out, rc;
        struct stat st;

        snprintf(zst, sizeof(zst), "%s" ZST, base);
        in = openat(dir_fd, zst, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        out = openat(images_fd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        rc = in < 0 || out < 0 ? -errno : run_zstd("-d", in, out, size);
        if (rc == 0 && (fstat(out, &st) < 0 || (uint64_t)st.st_size != size))
                rc = -EBADMSG;
        /* Read by CRIU as the other images are (checkpoint_seal). */
        if (rc == 0 && fchmod(out, 0644) < 0)
                rc = -errno;
        if (in >= 0)
                close(in);
        if (out >= 0) {
                close(out);
                if (rc < 0)
                        unlinkat(images_fd, base, 0);
        }
        return rc == -EIO ? -EBADMSG : rc;
}

int checkpoint_pages_expand(int dir_fd, int images_fd)
{
        json_t *compressed = list_form(dir_fd, PAGES_COMPRESSED), *sizes = NULL, *v;
        size_t i;
        int rc = compressed ? 0 : -EIO;

        json_array_foreach(compressed, i, v) {
                const char *base = json_string_value(v);
                uint64_t size;

                /* The .img is there too (a compaction ended between its
                 * rename and its unlink): that one is read. */
                if (has(images_fd, base))
                        continue;
                if (!sizes)
                        sizes = checkpoint_pages_sizes(dir_fd);
                rc = recorded_size(sizes, base, &size) ? expand_one(dir_fd, images_fd, base, size)
                                                       : -EBADMSG;
                if (rc < 0)
                        break;
        }
        json_decref(compressed);
        json_decref(sizes);
        return rc;
}

int checkpoint_pages_expand_for(int dir_fd, const char *sandbox_id)
{
        char images[NAME_MAX + 1];
        int images_fd, rc;

        snprintf(images, sizeof(images), "copy-%s", sandbox_id);
        images_fd = openat(dir_fd, images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (images_fd < 0)
                return -errno;
        rc = checkpoint_pages_expand(dir_fd, images_fd);
        close(images_fd);
        return rc;
}
