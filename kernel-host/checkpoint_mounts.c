#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "kernel-host/rootfs.h"
#include "protocol/buf.h"
#include "protocol/ids.h"
#include "kernel-host/volumes.h"
#include "kernel-host/homedisk.h"
#include "kernel-host/layers.h"
#include "kernel-host/sandbox.h"
#include "protocol/hostmsg.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
/* The kernel-host's own mount table (a few dozen lines). */
#define MOUNTINFO_MAX (4 << 20)

/* The sandbox's mounts as a checkpoint sees them: which come from outside
 * (CRIU is told, and the restore binds them again), and the flags each
 * had, which the restore gives back. */

/* ---- the mounts from outside --------------------------------------------------- */

bool checkpoint_mount_parse(char *line, struct mount_line *m)
{
        char *sep = strstr(line, " - ");
        int parent;

        if (!sep || strchr(line, '\\'))
                return false;
        if (sscanf(line, "%d %d %u:%u %4095s %4095s", &m->id, &parent, &m->major, &m->minor,
                   m->root, m->point) != 6)
                return false;
        m->options[0] = '\0';
        return sscanf(sep + 3, "%63s %*s %1023s", m->fstype, m->options) >= 1;
}

/* Where the host has the file or directory that is root on device
 * major:minor: the host mount of that device whose root is the longest
 * prefix of it, and the rest below its mount point. host is the
 * kernel-host's own mountinfo, read once per dump: a sandbox binds some
 * 40 host paths, and reading it again for each cost 40 opens and reads. */
static int host_path(const struct buf *host, unsigned major, unsigned minor, const char *root,
                     char *out, size_t size)
{
        char line[3 * PATH_MAX];
        size_t best = 0;
        bool found = false;

        for (const char *p = host->data, *end; p && *p; p = *end ? end + 1 : end) {
                struct mount_line m;
                size_t n = (size_t)((end = strchrnul(p, '\n')) - p);

                if (n >= sizeof(line))
                        continue;
                memcpy(line, p, n);
                line[n] = '\0';
                if (!checkpoint_mount_parse(line, &m) || m.major != major || m.minor != minor)
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
        return found ? 0 : -ENOENT;
}

/* Whether m is the mount of one of volumes ("id:/path"), its id then in
 * id: at the volume's path, the root of an ext4 filesystem (volumes.h). */
static bool volume_at(char *const *volumes, const struct mount_line *m, char *id, size_t size)
{
        for (size_t i = 0; volumes && volumes[i]; i++) {
                char vid[JP_UUID_SIZE];
                const char *path;

                if (hostmsg_volume_mount_split(volumes[i], vid, &path) &&
                    strcmp(path, m->point) == 0 && strcmp(m->root, "/") == 0 &&
                    strcmp(m->fstype, "ext4") == 0) {
                        snprintf(id, size, "%s", vid);
                        return true;
                }
        }
        return false;
}

/* The sandbox's mounts CRIU must be told come from outside, as
 * [{"point", "key", "kind", "path"}]: "top" (a bind of the top's path),
 * "usr" (the /usr overlay) or "host" (a host path). Its own tmpfs, proc,
 * devpts and mqueue CRIU saves itself. NULL with err set when one is of
 * a kind we cannot restore. */
json_t *checkpoint_outside_mounts(pid_t init, int top_fd, char *const *volumes, bool disk_home,
                                  char *err, size_t errlen)
{
        char path[64], line[3 * PATH_MAX], host[PATH_MAX];
        json_t *list = json_array();
        struct buf own;
        struct stat top;
        int own_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        FILE *f;

        buf_init(&own, MOUNTINFO_MAX);
        if (own_fd < 0 || buf_read_fd(&own, own_fd) < 0) {
                snprintf(err, errlen, "cannot read the kernel-host's mounts");
                f = NULL;
                goto fail;
        }
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

                if (!checkpoint_mount_parse(line, &m)) {
                        snprintf(err, errlen, "a mount whose path CRIU cannot be given");
                        goto fail;
                }
                if (strcmp(m.point, "/") == 0)
                        continue;
                if (m.major == major(top.st_dev) && m.minor == minor(top.st_dev)) {
                        kind = "top";
                        snprintf(host, sizeof(host), "%s", m.root);
                } else if (volume_at(volumes, &m, host, sizeof(host))) {
                        kind = "volume";
                } else if (disk_home && strcmp(m.point, ROOTFS_HOME) == 0 &&
                           strcmp(m.root, "/") == 0 && strcmp(m.fstype, "ext4") == 0) {
                        kind = "home"; /* its files are in home.tar */
                        host[0] = '\0';
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
                        if (host_path(&own, m.major, m.minor, m.root, host, sizeof(host)) < 0) {
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
        close(own_fd);
        buf_free(&own);
        return list;
fail:
        if (f)
                fclose(f);
        if (own_fd >= 0)
                close(own_fd);
        buf_free(&own);
        json_decref(list);
        return NULL;
}

/* The options of the sandbox's overlays, as its mountinfo shows them (the
 * root's and /usr's): {point: "lowerdir=...,upperdir=...,..."}, without
 * the leading rw. Every directory in them is relative to the top (rootfs.h).
 * NULL when they cannot be read. */
json_t *checkpoint_overlays(pid_t init)
{
        char path[64], line[3 * PATH_MAX];
        json_t *overlays = json_object();
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)init);
        f = fopen(path, "re");
        if (!f || !overlays) {
                if (f)
                        fclose(f);
                json_decref(overlays);
                return NULL;
        }
        while (fgets(line, sizeof(line), f)) {
                char point[PATH_MAX], fstype[64], options[2 * PATH_MAX];
                const char *sep = strstr(line, " - ");

                if (!sep || sscanf(line, "%*d %*d %*u:%*u %*s %4095s", point) != 1 ||
                    sscanf(sep + 3, "%63s %*s %8191s", fstype, options) != 2 ||
                    strcmp(fstype, "overlay") != 0 ||
                    (strcmp(point, "/") != 0 && strcmp(point, "/usr") != 0))
                        continue;
                json_object_set_new(
                    overlays, point,
                    json_string(strncmp(options, "rw,", 3) == 0 ? options + 3 : options));
        }
        fclose(f);
        return overlays;
}

/* Whether data is an overlay's options as rootfs.c makes them: known
 * options only, every directory relative to the top and without "..". */
bool checkpoint_overlay_data_ok(const char *data)
{
        static const char *const plain[] = {
            "userxattr", "redirect_dir=nofollow", "uuid=on",  "uuid=off", "uuid=null",
            "index=off", "metacopy=off",          "xino=off", "xino=auto"};
        char copy[2 * PATH_MAX], *save = NULL;

        if (!data || strlen(data) >= sizeof(copy) || strpbrk(data, " \\\n"))
                return false;
        snprintf(copy, sizeof(copy), "%s", data);
        for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
                bool known = false;
                char *dirs = NULL, *dsave = NULL;

                for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
                        known = known || strcmp(o, plain[i]) == 0;
                if (known)
                        continue;
                if (strncmp(o, "lowerdir=", 9) == 0)
                        dirs = o + 9;
                else if (strncmp(o, "upperdir=", 9) == 0)
                        dirs = o + 9;
                else if (strncmp(o, "workdir=", 8) == 0)
                        dirs = o + 8;
                if (!dirs || !*dirs)
                        return false;
                for (char *d = strtok_r(dirs, ":", &dsave); d; d = strtok_r(NULL, ":", &dsave)) {
                        if (d[0] == '/' || strstr(d, ".."))
                                return false;
                }
        }
        return true;
}

/* Each layer of a built template (ids, top first) mounted again for j,
 * read-only, idmapped through holder's user namespace. 0 or -errno with
 * err set. */
int checkpoint_layers_take(struct job *j, json_t *layers, pid_t holder, char *err, size_t errlen)
{
        size_t i;
        json_t *l;

        if (!layers)
                return 0;
        if (!json_is_array(layers) || json_array_size(layers) > OVERLAY_MAX_LAYERS) {
                snprintf(err, errlen, "the checkpoint's record is malformed");
                return -EBADMSG;
        }
        json_array_foreach(layers, i, l) {
                const char *id = json_string_value(l) ?: "";
                int fd = -1, rc;

                if (!jp_uuid_valid(id, strlen(id))) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                rc = layers_mount(id, &fd);
                if (rc == 0)
                        rc = overlay_idmap(fd, holder, true);
                j->layer_fds[j->nlayers++] = fd;
                if (rc < 0) {
                        snprintf(err, errlen, "the template's layer %.8s: %s", id,
                                 rc == -ENOENT ? "it was deleted" : strerror(-rc));
                        return rc;
                }
        }
        return 0;
}

/* ---- at a restore ---------------------------------------------------------------- */

/* Each volume the sandbox had (a "volume" of the record's mounts), mounted
 * again for it (volumes.h), idmapped through holder's user namespace (its
 * ids), for the worker to put where CRIU is told it is; and its
 * "id:/path" again, for the box. 0, or -errno with err set. */
int checkpoint_volumes_take(struct job *j, json_t *mounts, pid_t holder, char *err, size_t errlen)
{
        size_t i, n = 0;
        json_t *m;

        j->volumes = calloc(OVERLAY_MAX_VOLUMES + 1, sizeof(char *));
        if (!j->volumes) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        json_array_foreach(mounts, i, m) {
                const char *kind = json_string_value(json_object_get(m, "kind")) ?: "";
                const char *id = json_string_value(json_object_get(m, "path")) ?: "";
                const char *point = json_string_value(json_object_get(m, "point")) ?: "";
                int fd = -1, rc;

                if (strcmp(kind, "volume") != 0)
                        continue;
                if (n == OVERLAY_MAX_VOLUMES || !jp_uuid_valid(id, strlen(id)) ||
                    !hostmsg_volume_path_valid(point)) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                rc = volumes_mount(id, &fd);
                if (rc == 0)
                        rc = overlay_idmap(fd, holder, false);
                j->volume_fds[j->nvolumes++] = fd;
                if (rc == 0 && asprintf(&j->volumes[n], "%s:%s", id, point) < 0)
                        rc = -ENOMEM;
                if (rc < 0) {
                        snprintf(err, errlen, "volume %.8s: %s", id,
                                 rc == -ENOENT ? "it was deleted" : strerror(-rc));
                        return rc;
                }
                n++;
        }
        return 0;
}

/* A disk home (a "home" of the record's mounts): a new one of the
 * sandbox's disk limit, owned by its user, for the worker to fill from
 * HOME_ARCHIVE. 0 (none: nothing done), or -errno with err set. */
int checkpoint_home_take(struct job *j, json_t *mounts, int dir_fd, char *err, size_t errlen)
{
        const char *step = "";
        size_t i;
        json_t *m;
        int rc;

        json_array_foreach(mounts, i, m) {
                const char *kind = json_string_value(json_object_get(m, "kind")) ?: "";

                if (strcmp(kind, "home") != 0)
                        continue;
                if (j->home_fd >= 0 || faccessat(dir_fd, HOME_ARCHIVE, F_OK, 0) < 0) {
                        snprintf(err, errlen, "the checkpoint's record is malformed");
                        return -EBADMSG;
                }
                rc = homedisk_create(j->limits.disk_mb, j->ids.user_uid, j->ids.user_gid,
                                     &j->home_fd, &step);
                if (rc < 0) {
                        snprintf(err, errlen, "the disk home: %s: %s", step, strerror(-rc));
                        return rc;
                }
        }
        snprintf(j->home_archive, sizeof(j->home_archive), "%s/%s/" HOME_ARCHIVE, checkpoint_dir,
                 j->name);
        return 0;
}

/* In the restore's worker, in the rebuilt top (its working directory):
 * a built template's layers, the template's tree or the host's /usr
 * (usr_fd, idmapped), and the overlays over them as the sandbox had them.
 * 0, or the worker's exit status for the step that failed. */
int checkpoint_lay_overlays(const struct job *j, int usr_fd)
{
        /* A template's tree under the root (its own /usr), or the host's
         * /usr under /usr's overlay; layers named relative to the top, as
         * the sandbox made them: its mountinfo names no host directory. */
        for (size_t k = 0; k < j->nlayers; k++) {
                char name[32];

                snprintf(name, sizeof(name), "l%zu", k);
                if ((mkdir(name, 0755) < 0 && errno != EEXIST) ||
                    syscall(SYS_move_mount, j->layer_fds[k], "", AT_FDCWD, name,
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        return 124;
        }
        if (j->template_root[0]) {
                if ((mkdir("work", 0700) < 0 && errno != EEXIST) ||
                    (mkdir("lower", 0755) < 0 && errno != EEXIST))
                        return 123;
                if (syscall(SYS_move_mount, usr_fd, "", AT_FDCWD, "lower",
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        return 124;
                if (mount("overlay", "root", "overlay", MS_NOSUID | MS_NODEV,
                          j->root_data[0]
                              ? j->root_data
                              : "lowerdir=base:lower,upperdir=upper,workdir=work,userxattr") < 0)
                        return 125;
        } else {
                if ((mkdir("work", 0700) < 0 && errno != EEXIST) ||
                    (mkdir("usr-work", 0700) < 0 && errno != EEXIST) ||
                    (mkdir(USR_MERGED, 0755) < 0 && errno != EEXIST))
                        return 123;
                if (syscall(SYS_move_mount, usr_fd, "", AT_FDCWD, "usr-lower",
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        return 124;
                if (mount("overlay", "root", "overlay", MS_NOSUID | MS_NODEV,
                          j->root_data[0]
                              ? j->root_data
                              : "lowerdir=base,upperdir=upper,workdir=work,userxattr") < 0 ||
                    mount("overlay", USR_MERGED, "overlay", MS_NOSUID | MS_NODEV,
                          j->usr_data[0] ? j->usr_data
                                         : "lowerdir=usr-lower,upperdir=usr-upper,"
                                           "workdir=usr-work,userxattr") < 0)
                        return 125;
        }
        return 0;
}

/* ---- their flags ---------------------------------------------------------------- */

json_t *checkpoint_mount_flags(pid_t init)
{
        char path[64], line[3 * PATH_MAX];
        json_t *flags = json_object();
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)init);
        f = fopen(path, "re");
        if (!f || !flags) {
                if (f)
                        fclose(f);
                json_decref(flags);
                return NULL;
        }
        while (fgets(line, sizeof(line), f)) {
                char point[PATH_MAX], options[256];

                if (sscanf(line, "%*d %*d %*u:%*u %*s %4095s %255s", point, options) == 2)
                        json_object_set_new(flags, point, json_string(options));
        }
        fclose(f);
        return flags;
}

/* The mount flags of options (a mountinfo's per-mount field). */
static unsigned long flags_of(const char *options)
{
        static const struct {
                const char *name;
                unsigned long flag;
        } known[] = {{"ro", MS_RDONLY},        {"nosuid", MS_NOSUID},
                     {"nodev", MS_NODEV},      {"noexec", MS_NOEXEC},
                     {"noatime", MS_NOATIME},  {"nodiratime", MS_NODIRATIME},
                     {"relatime", MS_RELATIME}};
        unsigned long flags = 0;

        for (const char *o = options; *o;) {
                size_t n = strcspn(o, ",");

                for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
                        if (strlen(known[i].name) == n && strncmp(o, known[i].name, n) == 0)
                                flags |= known[i].flag;
                }
                o += n + (o[n] == ',');
        }
        return flags;
}

/* Gives every mount of the restored sandbox at least the flags it had at
 * the dump (recorded: {point: options}), in a child that enters its
 * mount namespace. The flags only tighten, whatever a path leads to. 0,
 * or -EPERM when one could not be given. */
int checkpoint_restore_flags(const struct sandbox *sb, json_t *recorded)
{
        const unsigned long tight = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
        int status;
        pid_t pid;

        if (!json_is_object(recorded))
                return -EPERM;
        pid = fork();
        if (pid == 0) {
                char line[3 * PATH_MAX];
                int failed = 0;
                FILE *f;

                /* init's mounts, read through the host's /proc: once in
                 * the namespace, /proc is the sandbox's, without us. */
                snprintf(line, sizeof(line), "/proc/%d/mountinfo", (int)sb->init_pid);
                f = fopen(line, "re");
                if (!f || setns(sb->ns_fds[1], CLONE_NEWNS) < 0)
                        _exit(100);
                while (fgets(line, sizeof(line), f)) {
                        char point[PATH_MAX], options[256];
                        unsigned long now, want;
                        const char *was;

                        if (sscanf(line, "%*d %*d %*u:%*u %*s %4095s %255s", point, options) != 2)
                                continue;
                        was = json_string_value(json_object_get(recorded, point));
                        now = flags_of(options);
                        want = was ? flags_of(was) & tight : 0;
                        if ((now | want) == now)
                                continue;
                        if (mount(NULL, point, NULL, MS_REMOUNT | MS_BIND | now | want, NULL) < 0) {
                                log_warn("cannot give %s its flags back: %s", point,
                                         strerror(errno));
                                failed++;
                        }
                }
                fclose(f);
                _exit(failed ? 102 : 0);
        }
        if (pid < 0)
                return -errno;
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -errno;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}
