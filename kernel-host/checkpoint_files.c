#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/major.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"

/* Files the sandbox's processes map or hold open from mounts that are not
 * the sandbox's: a zygote's kernel (zygote.h) maps the zygote's
 * interpreter, libraries and modules, which it loaded from the host's /usr
 * before it forked into the sandbox. CRIU finds no mount of the sandbox
 * for them; it is told they are external (--external file[MNT:INO]), and
 * the restore hands it each, opened again by the kernel-host from the same
 * host path, checked to be the same file (--inherit-fd). */

#define PROCS_MAX 4096 /* processes walked in one sandbox */

struct walk {
        json_t *files;  /* {key: {"path", "ino", "size", "mtime"}} */
        json_t *mounts; /* the sandbox's mount ids, {id: true} */
        char *err;
        size_t errlen;
};

static int mnt_id_of(const char *fdinfo)
{
        char text[1024];
        const char *p;

        if (read_small_file(fdinfo, text, sizeof(text)) < 0)
                return -1;
        p = strstr(text, "\nmnt_id:");
        return p ? (int)strtol(p + 8, NULL, 10) : -1;
}

/* The mount id of the file a link of /proc/PID/map_files or /proc/PID/fd
 * leads to. statx follows the link: one call, where opening the mapped
 * file and reading its fdinfo took five (a kernel that imported pandas
 * maps some 400 files: 7 to 13 ms, against 2.5 ms). Where statx cannot
 * say (Linux before 5.8, or it fails but for the file being gone), fdinfo
 * does: the fd's own (fdinfo), else that of the file opened here. -1 when
 * the file is gone. */
static int link_mnt_id(const char *link, const char *fdinfo)
{
        struct statx sx;
        char own[64];
        int fd, mnt_id;

        if (statx(AT_FDCWD, link, AT_NO_AUTOMOUNT, STATX_MNT_ID, &sx) == 0) {
                if (sx.stx_mask & STATX_MNT_ID)
                        return (int)sx.stx_mnt_id;
        } else if (errno == ENOENT) {
                return -1;
        }
        if (fdinfo)
                return mnt_id_of(fdinfo);
        fd = open(link, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0)
                return -1;
        snprintf(own, sizeof(own), "/proc/self/fdinfo/%d", fd);
        mnt_id = mnt_id_of(own);
        close(fd);
        return mnt_id;
}

/* One file of the process: noted when it is on a mount of no sandbox's. */
static int note(struct walk *w, const char *link, int mnt_id)
{
        char key[64], id[16], path[PATH_MAX];
        struct stat st;
        ssize_t n;

        snprintf(id, sizeof(id), "%d", mnt_id);
        if (mnt_id < 0 || json_object_get(w->mounts, id))
                return 0;
        /* Pipes, sockets, anonymous inodes: CRIU's own to take. */
        n = readlink(link, path, sizeof(path) - 1);
        if (n <= 0 || path[0] != '/')
                return 0;
        path[n] = '\0';
        if (stat(link, &st) < 0)
                return 0; /* gone meanwhile */
        /* Shared anonymous memory and memfds: inodes of the kernel's own
         * internal mount, linked nowhere, which CRIU dumps with their
         * contents and makes again at the restore (a zygote kernel's
         * report on its start, kernel-host/zygote_pages.h; a cell's
         * mmap(-1) or memfd_create). */
        if (st.st_nlink == 0 &&
            (strcmp(path, "/dev/zero (deleted)") == 0 || strncmp(path, "/memfd:", 7) == 0))
                return 0;
        /* A command's terminal given at a restore, of a devpts instance
         * mounted nowhere: the dump names it external (checkpoint.c). */
        if (S_ISCHR(st.st_mode) && major(st.st_rdev) >= UNIX98_PTY_SLAVE_MAJOR &&
            major(st.st_rdev) < UNIX98_PTY_SLAVE_MAJOR + UNIX98_PTY_MAJOR_COUNT)
                return 0;
        if (!S_ISREG(st.st_mode)) {
                snprintf(w->err, w->errlen,
                         "%.200s, of a mount outside the sandbox, is not a regular file", path);
                return -EOPNOTSUPP;
        }
        /* CRIU's name for it (files-reg.c). */
        snprintf(key, sizeof(key), "file[%x:%" PRIx64 "]", (unsigned)mnt_id, (uint64_t)st.st_ino);
        if (json_object_get(w->files, key))
                return 0;
        if (json_object_size(w->files) >= CHECKPOINT_MAX_FOREIGN) {
                snprintf(w->err, w->errlen, "more than %d files of mounts outside the sandbox",
                         CHECKPOINT_MAX_FOREIGN);
                return -EOPNOTSUPP;
        }
        json_object_set_new(w->files, key,
                            json_pack("{s:s, s:I, s:I, s:I}", "path", path, "ino",
                                      (json_int_t)st.st_ino, "size", (json_int_t)st.st_size,
                                      "mtime", (json_int_t)st.st_mtim.tv_sec));
        return 0;
}

/* Every mapped and open file of process pid. */
static int walk_process(struct walk *w, pid_t pid)
{
        static const char *const dirs[] = {"map_files", "fd"};
        int rc = 0;

        for (size_t d = 0; rc == 0 && d < 2; d++) {
                char path[64], link[PATH_MAX];
                struct dirent *de;
                DIR *dir;

                snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, dirs[d]);
                dir = opendir(path);
                if (!dir)
                        continue;
                while (rc == 0 && (de = readdir(dir))) {
                        char info[96];

                        if (de->d_name[0] == '.')
                                continue;
                        snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
                        /* A descriptor has an fdinfo of its own; a mapping's
                         * mount is that of the file it maps. */
                        if (d == 1)
                                snprintf(info, sizeof(info), "/proc/%d/fdinfo/%s", (int)pid,
                                         de->d_name);
                        rc = note(w, link, link_mnt_id(link, d == 1 ? info : NULL));
                }
                closedir(dir);
        }
        return rc;
}

json_t *checkpoint_foreign_files(pid_t init, char *err, size_t errlen)
{
        struct walk w = {json_object(), json_object(), err, errlen};
        pid_t queue[PROCS_MAX];
        size_t head = 0, tail = 0;
        char path[64], line[3 * PATH_MAX];
        FILE *f;
        int rc = 0;

        snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)init);
        f = fopen(path, "re");
        if (!f || !w.files || !w.mounts) {
                snprintf(err, errlen, "cannot read the sandbox's mounts");
                rc = -EIO;
        }
        while (f && rc == 0 && fgets(line, sizeof(line), f)) {
                char id[16];

                if (sscanf(line, "%15s", id) == 1)
                        json_object_set_new(w.mounts, id, json_true());
        }
        if (f)
                fclose(f);
        /* init and every process under it, breadth first. */
        queue[tail++] = init;
        while (rc == 0 && head < tail) {
                pid_t pid = queue[head++];
                char list[16384];

                rc = walk_process(&w, pid);
                snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
                if (rc < 0 || read_small_file(path, list, sizeof(list)) < 0)
                        continue;
                for (char *s = list, *end; tail < PROCS_MAX; s = end) {
                        long child = strtol(s, &end, 10);

                        if (end == s)
                                break;
                        queue[tail++] = (pid_t)child;
                }
        }
        json_decref(w.mounts);
        if (rc < 0) {
                json_decref(w.files);
                return NULL;
        }
        return w.files;
}

int checkpoint_foreign_open(struct job *j, json_t *files, char *err, size_t errlen)
{
        const char *key;
        json_t *rec;

        if (!files)
                return 0;
        if (!json_is_object(files) || json_object_size(files) > CHECKPOINT_MAX_FOREIGN) {
                snprintf(err, errlen, "the checkpoint's record is malformed");
                return -EBADMSG;
        }
        json_object_foreach(files, key, rec) {
                const char *path = json_string_value(json_object_get(rec, "path"));
                unsigned long long ino, size, mtime;
                struct stat st;
                int fd, high;

                if (!path || path[0] != '/' || strncmp(key, "file[", 5) != 0 ||
                    strlen(key) >= sizeof(j->foreign[0].key) ||
                    !checkpoint_json_uint(rec, "ino", UINT64_MAX, &ino) ||
                    !checkpoint_json_uint(rec, "size", INT64_MAX, &size) ||
                    !checkpoint_json_uint(rec, "mtime", INT64_MAX, &mtime)) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                /* The host's file, as the kernel-host sees it; read only. */
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
                if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
                    (unsigned long long)st.st_ino != ino ||
                    (unsigned long long)st.st_size != size ||
                    (unsigned long long)st.st_mtim.tv_sec != mtime) {
                        if (fd >= 0)
                                close(fd);
                        snprintf(err, errlen,
                                 "%.200s is not the file it mapped at the checkpoint (the host's "
                                 "packages changed?)",
                                 path);
                        return -ESTALE;
                }
                /* Above the worker's own descriptors, where its dup2s cannot
                 * reach it. */
                high = fcntl(fd, F_DUPFD_CLOEXEC, REPORT_FD + 1);
                close(fd);
                if (high < 0) {
                        snprintf(err, errlen, "too many files open");
                        return -EMFILE;
                }
                j->foreign[j->nforeign].fd = high;
                snprintf(j->foreign[j->nforeign].key, sizeof(j->foreign[0].key), "%s", key);
                j->nforeign++;
        }
        return 0;
}
