#include "autoconf.h"

#include "gateway/kernels/files.h"
#include "protocol/ids.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST_ENTRIES 100000
#define MAX_SYMLINK_HOPS 40 /* Linux's own limit (MAXSYMLINKS) */
/* Attributes a file may list (the kernel's XATTR_LIST_MAX): what code in
 * the sandbox set on it beyond that is not read. */
#define MAX_XATTR_LIST 65536

/* File operations run as whom they act for (the sandbox's user or its
 * root): with its effective ids, so that permission checks are those that
 * id has inside, and the kernel refuses to create files for an id the
 * sandbox does not map (EOVERFLOW). Effective, not only filesystem, ids:
 * with euid 0 the gateway would own every sandbox's user namespace (its
 * kernel-host made them), which grants every capability inside it, such
 * as CAP_SYS_PTRACE over the sandbox's processes' /proc files. And with
 * none of the gateway's own capabilities in effect but root's (below)
 * while acting for root. Raw system calls change only this thread (glibc's
 * would change libzmq's I/O thread too); the gateway has one thread of its
 * own, so switching them is safe. */
struct as_user {
        uid_t euid;
        gid_t egid;
        int dumpable;
        bool switched; /* caps holds the capabilities to restore */
        struct __user_cap_data_struct caps[2];
};

/* The sandbox's root may read and write every file of the sandbox, as its
 * processes may with these capabilities (kernel-host/sandbox.c,
 * ROOT_CAPS): they are the only ones in effect while the gateway acts for
 * that root, on paths resolved inside the sandbox's root, where the
 * sandbox's read-only mounts stay read-only. */
static const uint32_t root_caps =
    (1u << CAP_CHOWN) | (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH) | (1u << CAP_FOWNER);

/* Never host root: a sandbox without a root of its own acts as its user
 * (files_user_parse refused root before it got here). */
static void owner_of(const struct sandbox *sb, enum files_user who, uid_t *uid, gid_t *gid)
{
        bool root = who == FILES_ROOT && sb->has_root && sb->root_uid != 0;

        *uid = root ? sb->root_uid : sb->user_uid;
        *gid = root ? sb->root_gid : sb->user_gid;
}

static struct as_user become_user(const struct sandbox *sb, enum files_user who)
{
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct now[2];
        struct as_user saved;
        uid_t uid;
        gid_t gid;

        memset(&saved, 0, sizeof(saved));
        owner_of(sb, who, &uid, &gid);
        saved.euid = geteuid();
        saved.egid = getegid();
        saved.dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
        saved.switched = syscall(SYS_capget, &hdr, saved.caps) == 0;
        /* The filesystem ids follow the effective ones. */
        syscall(SYS_setresgid, -1, gid, -1);
        syscall(SYS_setresuid, -1, uid, -1);
        if (saved.switched) {
                memcpy(now, saved.caps, sizeof(now));
                now[0].effective = who == FILES_ROOT && uid != sb->user_uid && uid != 0
                                           ? root_caps & now[0].permitted
                                           : 0;
                now[1].effective = 0;
                syscall(SYS_capset, &hdr, now);
        }
        return saved;
}

static void become_self(struct as_user saved)
{
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};

        /* Back to euid 0 (the real and saved ids still are), then the
         * group (which CAP_SETGID, back in effect, allows) and the exact
         * capabilities. A change of euid made the process undumpable. */
        syscall(SYS_setresuid, -1, saved.euid, -1);
        syscall(SYS_setresgid, -1, saved.egid, -1);
        if (saved.switched)
                syscall(SYS_capset, &hdr, saved.caps);
        if (saved.dumpable >= 0)
                prctl(PR_SET_DUMPABLE, saved.dumpable, 0, 0, 0);
}

int files_user_parse(const struct sandbox *sb, const char *name, enum files_user *out)
{
        *out = FILES_USER;
        if (!name || !*name || strcmp(name, "user") == 0)
                return 0;
        if (strcmp(name, "root") != 0)
                return -EINVAL;
        if (!sb->has_root)
                return -EPERM;
        *out = FILES_ROOT;
        return 0;
}

int files_normalize(const char *path, char *out, size_t size)
{
        char joined[PATH_MAX * 2];
        size_t o = 0;
        const char *p;

        if (!path || !*path)
                return -EINVAL;
        if ((size_t)snprintf(joined, sizeof(joined), "%s%s", path[0] == '/' ? "" : FILES_HOME "/",
                             path) >= sizeof(joined))
                return -ENAMETOOLONG;
        /* Collapse "//" and "/./"; ".." stays for resolution to confine. */
        for (p = joined; *p;) {
                size_t n;

                while (*p == '/')
                        p++;
                n = strcspn(p, "/");
                if (n == 0)
                        break;
                if (!(n == 1 && p[0] == '.')) {
                        if (o + n + 2 > size)
                                return -ENAMETOOLONG;
                        out[o++] = '/';
                        memcpy(out + o, p, n);
                        o += n;
                }
                p += n;
        }
        if (o == 0)
                out[o++] = '/';
        out[o] = '\0';
        return 0;
}

/* Opens path (absolute, as the sandbox sees it) inside the sandbox. */
static int open_in(const struct sandbox *sb, const char *path, int flags, mode_t mode)
{
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .mode = mode,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        const char *rel = path[1] ? path + 1 : ".";
        long fd = syscall(SYS_openat2, sb->root_fd, rel, &how, sizeof(how));

        return fd < 0 ? -errno : (int)fd;
}

/* Splits "/a/b/c" into its parent directory, opened inside the sandbox,
 * and its last component "c". */
static int open_parent(const struct sandbox *sb, const char *path, char *name, size_t size)
{
        char parent[PATH_MAX];
        const char *slash = strrchr(path, '/');
        size_t plen = (size_t)(slash - path);

        if (!slash || !slash[1] || strcmp(slash + 1, "..") == 0 || strlen(slash + 1) >= size)
                return -EINVAL;
        snprintf(name, size, "%s", slash + 1);
        snprintf(parent, sizeof(parent), "%.*s", plen ? (int)plen : 1, plen ? path : "/");
        return open_in(sb, parent, O_PATH | O_DIRECTORY, 0);
}

/* Creates every missing directory of path's parents (and path itself when
 * include_last), owned by who. */
static int make_dirs(const struct sandbox *sb, enum files_user who, const char *path,
                     bool include_last)
{
        char prefix[PATH_MAX], name[NAME_MAX + 1];
        const char *end = include_last ? path + strlen(path) : strrchr(path, '/');
        int rc = 0;
        uid_t uid;
        gid_t gid;

        owner_of(sb, who, &uid, &gid);
        for (const char *s = strchr(path + 1, '/'); rc == 0; s = strchr(s + 1, '/')) {
                const char *stop = s && s < end ? s : end;
                int dir;

                if (stop <= path + 1)
                        break;
                snprintf(prefix, sizeof(prefix), "%.*s", (int)(stop - path), path);
                dir = open_parent(sb, prefix, name, sizeof(name));
                if (dir < 0)
                        return dir;
                if (mkdirat(dir, name, 0755) == 0) {
                        if (fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
                                rc = -errno;
                } else if (errno != EEXIST) {
                        rc = -errno;
                }
                close(dir);
                if (!s || s >= end)
                        break;
        }
        return rc;
}

/* A regular file opened by open_in, or -EISDIR / -EINVAL for anything
 * else: the sandbox owns every name, and a FIFO, a terminal or a device
 * must never block the gateway's one thread, become its controlling
 * terminal, or be written or chowned by it (O_NONBLOCK and O_NOCTTY for
 * the open itself; blocking again once it is known to be a file). */
static int open_regular(const struct sandbox *sb, const char *path, int flags, mode_t mode,
                        struct stat *st)
{
        int f = open_in(sb, path, flags | O_NONBLOCK | O_NOCTTY, mode);
        int rc = 0;

        if (f < 0)
                return f;
        if (fstat(f, st) < 0)
                rc = -errno;
        else if (S_ISDIR(st->st_mode))
                rc = -EISDIR;
        else if (!S_ISREG(st->st_mode))
                rc = -EINVAL;
        else if (fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) < 0)
                rc = -errno;
        if (rc < 0) {
                close(f);
                return rc;
        }
        return f;
}

static int files_open_read_inside(const struct sandbox *sb, const char *path, int *fd, struct stat *st)
{
        int f = open_regular(sb, path, O_RDONLY, 0, st);

        *fd = f < 0 ? -1 : f;
        return f < 0 ? f : 0;
}

static int files_open_write_inside(const struct sandbox *sb, enum files_user who, const char *path,
                                   int *fd)
{
        int rc = make_dirs(sb, who, path, false);
        uid_t uid;
        gid_t gid;
        int f;

        struct stat st;
        bool created = true;

        owner_of(sb, who, &uid, &gid);
        *fd = -1;
        if (rc < 0)
                return rc;
        /* Only a file this call makes gets who as its owner: an existing
         * one keeps its own. Truncated once known to be a regular file. */
        f = open_regular(sb, path, O_WRONLY | O_CREAT | O_EXCL, 0644, &st);
        if (f == -EEXIST) {
                created = false;
                f = open_regular(sb, path, O_WRONLY, 0, &st);
        }
        if (f < 0)
                return f;
        /* A file just made is empty: truncating it would only add an
         * event to its watchers (E2B's envd gives three for a new file:
         * create, chmod, write). */
        if ((!created && ftruncate(f, 0) < 0) || (created && fchown(f, uid, gid) < 0)) {
                rc = -errno;
                close(f);
                return rc;
        }
        *fd = f;
        return 0;
}

static int files_mkdir_inside(const struct sandbox *sb, enum files_user who, const char *path)
{
        int probe = open_in(sb, path, O_PATH, 0);

        if (probe >= 0) {
                close(probe);
                return -EEXIST;
        }
        return make_dirs(sb, who, path, true);
}

static int files_remove_inside(const struct sandbox *sb, const char *path)
{
        char name[NAME_MAX + 1];
        struct stat st;
        int dir = open_parent(sb, path, name, sizeof(name));
        int rc = 0;

        if (dir < 0)
                return dir;
        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                rc = -errno;
        } else if (S_ISDIR(st.st_mode)) {
                /* Child by child, never following a symlink. */
                int sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                if (sub >= 0) {
                        tree_remove_at(sub);
                        close(sub);
                }
                if (unlinkat(dir, name, AT_REMOVEDIR) < 0)
                        rc = -errno;
        } else if (unlinkat(dir, name, 0) < 0) {
                rc = -errno;
        }
        close(dir);
        return rc;
}

static int files_rename_inside(const struct sandbox *sb, enum files_user who, const char *from,
                               const char *to)
{
        char from_name[NAME_MAX + 1], to_name[NAME_MAX + 1];
        int from_dir, to_dir, rc = make_dirs(sb, who, to, false);

        if (rc < 0)
                return rc;
        from_dir = open_parent(sb, from, from_name, sizeof(from_name));
        if (from_dir < 0)
                return from_dir;
        to_dir = open_parent(sb, to, to_name, sizeof(to_name));
        if (to_dir < 0) {
                close(from_dir);
                return to_dir;
        }
        rc = renameat(from_dir, from_name, to_dir, to_name) < 0 ? -errno : 0;
        close(from_dir);
        close(to_dir);
        return rc;
}

/* Go's FileMode.String(), which E2B's envd reports. */
static void permission_string(mode_t mode, bool symlink, char out[11])
{
        static const char rwx[] = "rwxrwxrwx";

        out[0] = symlink ? 'L' : S_ISDIR(mode) ? 'd' : '-';
        for (int i = 0; i < 9; i++)
                out[i + 1] = (mode & (0400 >> i)) ? rwx[i] : '-';
        out[10] = '\0';
}

/* The E2B metadata of the file fd refers to (any descriptor, O_PATH
 * included): its user.e2b.* attributes as {key: value}, or NULL when it
 * has none. Read through /proc/self/fd, as the caller acts (a user.*
 * attribute needs read permission on the file), so that no name the
 * sandbox controls is resolved. Code in the sandbox may set any bytes:
 * what is not UTF-8, or goes past FILES_METADATA_MAX with what came before,
 * is left out. */
static json_t *metadata_of(int fd)
{
        static char names[MAX_XATTR_LIST];
        char self[64], value[FILES_METADATA_MAX + 1];
        json_t *metadata = NULL;
        size_t used = 0;
        ssize_t n;

        snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
        n = listxattr(self, names, sizeof(names));
        for (ssize_t at = 0; n > 0 && at < n; at += (ssize_t)strlen(names + at) + 1) {
                const char *name = names + at, *key = name + strlen(FILES_METADATA_PREFIX);
                ssize_t len;
                json_t *v;

                if (strncmp(name, FILES_METADATA_PREFIX, strlen(FILES_METADATA_PREFIX)) != 0 ||
                    !*key)
                        continue;
                len = getxattr(self, name, value, sizeof(value) - 1);
                if (len < 0 || used + strlen(name) + (size_t)len > FILES_METADATA_MAX)
                        continue;
                v = json_stringn(value, (size_t)len);
                if (!v)
                        continue; /* not UTF-8 */
                if (!metadata)
                        metadata = json_object();
                if (!metadata || json_object_set_new(metadata, key, v) < 0) {
                        json_decref(v);
                        continue;
                }
                used += strlen(name) + (size_t)len;
        }
        return metadata;
}

/* What path (absolute, inside the sandbox) names once every symlink in it
 * is followed, as an absolute path inside the sandbox: E2B reports that as
 * a symlink's target. Each step is looked at inside the sandbox, a
 * component at a time; -ELOOP past MAX_SYMLINK_HOPS links. */
static int resolve_inside(const struct sandbox *sb, const char *path, char *out, size_t size)
{
        char todo[PATH_MAX], target[PATH_MAX], next[PATH_MAX];
        unsigned hops = 0;
        int rc = 0;

        if (snprintf(todo, sizeof(todo), "%s", path) >= (int)sizeof(todo) || size < 2)
                return -ENAMETOOLONG;
        snprintf(out, size, "/");
        for (const char *p = todo; rc == 0 && *p;) {
                size_t n, olen = strlen(out);
                struct stat st;
                ssize_t len;
                int dir;

                while (*p == '/')
                        p++;
                n = strcspn(p, "/");
                if (n == 0 || (n == 1 && p[0] == '.')) {
                        p += n;
                        continue;
                }
                if (n == 2 && p[0] == '.' && p[1] == '.') {
                        /* Above the root is the root, as inside. */
                        char *slash = strrchr(out, '/');

                        slash[slash == out ? 1 : 0] = '\0';
                        p += n;
                        continue;
                }
                if (n > NAME_MAX || olen + 1 + n >= size)
                        return -ENAMETOOLONG;
                dir = open_in(sb, out, O_PATH | O_DIRECTORY, 0);
                if (dir < 0)
                        return dir;
                snprintf(next, sizeof(next), "%.*s", (int)n, p);
                p += n;
                if (fstatat(dir, next, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        rc = -errno;
                } else if (!S_ISLNK(st.st_mode)) {
                        snprintf(out + olen, size - olen, "%s%s", olen > 1 ? "/" : "", next);
                } else if (++hops > MAX_SYMLINK_HOPS) {
                        rc = -ELOOP;
                } else {
                        /* The link's text, then what was left of the path. */
                        len = readlinkat(dir, next, target, sizeof(target) - 1);
                        target[len < 0 ? 0 : len] = '\0';
                        if (len < 0)
                                rc = -errno;
                        else if (snprintf(next, sizeof(next), "%s/%s", target, p) >=
                                 (int)sizeof(next))
                                rc = -ENAMETOOLONG;
                        snprintf(todo, sizeof(todo), "%s", next);
                        p = todo;
                        if (target[0] == '/')
                                snprintf(out, size, "/");
                }
                close(dir);
        }
        return rc;
}

/* E2B's EntryInfo of name in dir (path is its absolute path inside). A
 * symlink has its target's type and permission bits, and its target as
 * E2B gives it: the absolute path it resolves to, inside only (or path
 * itself when it cannot be resolved); its metadata is its target's. */
static json_t *entry_info(const struct sandbox *sb, int dir, const char *name, const char *path)
{
        char perms[11], size[32], when[40], target[PATH_MAX];
        struct stat st, followed;
        mode_t bits, kind;
        struct tm tm;
        const char *type;
        json_t *e, *metadata;
        bool symlink;
        int fd;

        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return NULL;
        symlink = S_ISLNK(st.st_mode);
        bits = st.st_mode & 0777;
        kind = st.st_mode & S_IFMT;
        if (symlink) {
                fd = open_in(sb, path, O_PATH, 0);
                if (resolve_inside(sb, path, target, sizeof(target)) < 0)
                        snprintf(target, sizeof(target), "%s", path);
                if (fd >= 0 && fstat(fd, &followed) == 0) {
                        bits = followed.st_mode & 0777;
                        kind = followed.st_mode & S_IFMT;
                }
        } else {
                fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        }
        type = S_ISDIR(kind) ? "FILE_TYPE_DIRECTORY"
               : S_ISLNK(kind) ? "FILE_TYPE_SYMLINK"
                               : "FILE_TYPE_FILE";
        permission_string(kind | (st.st_mode & 0777), symlink, perms);
        snprintf(size, sizeof(size), "%lld", (long long)st.st_size);
        gmtime_r(&st.st_mtim.tv_sec, &tm);
        snprintf(when + strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm), 16, ".%09ldZ",
                 st.st_mtim.tv_nsec);
        e = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "name", name, "type", type,
                      "path", path, "size", size, "mode", (int)bits, "permissions", perms,
                      "owner", st.st_uid == sb->user_uid ? "user" : "root", "group",
                      st.st_gid == sb->user_gid ? "user" : "root", "modifiedTime", when);
        if (e && symlink)
                json_object_set_new(e, "symlinkTarget", json_string(target));
        metadata = fd >= 0 ? metadata_of(fd) : NULL;
        if (e && metadata)
                json_object_set(e, "metadata", metadata);
        json_decref(metadata);
        if (fd >= 0)
                close(fd);
        return e;
}

static int files_stat_inside(const struct sandbox *sb, const char *path, json_t **entry)
{
        char name[NAME_MAX + 1];
        int dir;

        *entry = NULL;
        if (strcmp(path, "/") == 0) {
                dir = open_in(sb, "/", O_PATH | O_DIRECTORY, 0);
                if (dir < 0)
                        return dir;
                *entry = entry_info(sb, dir, ".", "/");
        } else {
                dir = open_parent(sb, path, name, sizeof(name));
                if (dir < 0)
                        return dir;
                *entry = entry_info(sb, dir, name, path);
        }
        close(dir);
        return *entry ? 0 : -ENOENT;
}

/* By name, byte by byte: the order of E2B's envd (Go's filepath.WalkDir). */
static int compare_entries(const void *a, const void *b)
{
        json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;

        return strcmp(json_string_value(json_object_get(x, "name")),
                      json_string_value(json_object_get(y, "name")));
}

static int list_into(const struct sandbox *sb, const char *path, unsigned depth, json_t *out)
{
        json_t **found = NULL;
        size_t nfound = 0;
        struct dirent *de;
        int dir = open_in(sb, path, O_RDONLY | O_DIRECTORY, 0);
        int rc = 0;
        DIR *d;

        if (dir < 0)
                return dir;
        d = fdopendir(dir);
        if (!d) {
                close(dir);
                return -errno;
        }
        while ((de = readdir(d)) != NULL && rc == 0) {
                char child[PATH_MAX];
                json_t *e, **grown;

                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                snprintf(child, sizeof(child), "%s/%s", strcmp(path, "/") ? path : "",
                         de->d_name);
                e = entry_info(sb, dirfd(d), de->d_name, child);
                if (!e)
                        continue;
                grown = json_array_size(out) + nfound < MAX_LIST_ENTRIES
                                ? realloc(found, (nfound + 1) * sizeof(*found))
                                : NULL;
                if (!grown) {
                        json_decref(e);
                        rc = -E2BIG;
                        break;
                }
                found = grown;
                found[nfound++] = e;
        }
        closedir(d);
        qsort(found, nfound, sizeof(*found), compare_entries);
        for (size_t i = 0; i < nfound; i++) {
                json_t *e = found[i];
                const char *child = json_string_value(json_object_get(e, "path"));
                bool is_dir = strcmp(json_string_value(json_object_get(e, "type")),
                                     "FILE_TYPE_DIRECTORY") == 0 &&
                              !json_object_get(e, "symlinkTarget");

                json_array_append(out, e);
                if (rc == 0 && is_dir && depth > 1)
                        rc = list_into(sb, child, depth - 1, out);
                json_decref(e);
        }
        free(found);
        return rc;
}

static int files_list_inside(const struct sandbox *sb, const char *path, unsigned depth, json_t **entries)
{
        int rc;

        *entries = json_array();
        if (!*entries)
                return -ENOMEM;
        rc = list_into(sb, path, depth ? depth : 1, *entries);
        if (rc < 0) {
                json_decref(*entries);
                *entries = NULL;
        }
        return rc;
}

int files_open_read(const struct sandbox *sb, enum files_user who, const char *path, int *fd,
                    struct stat *st)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_open_read_inside(sb, path, fd, st);

        become_self(saved);
        return rc;
}

int files_open_write(const struct sandbox *sb, enum files_user who, const char *path, int *fd)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_open_write_inside(sb, who, path, fd);

        become_self(saved);
        return rc;
}

/* Through the descriptor only: the file was opened inside, as who. */
static int write_metadata_at(int fd, json_t *metadata)
{
        static char names[MAX_XATTR_LIST];
        char name[XATTR_NAME_MAX + 1];
        ssize_t n = flistxattr(fd, names, sizeof(names));
        const char *key;
        json_t *v;

        if (n < 0 && errno != ERANGE)
                return -errno;
        /* What is not in metadata goes: an upload replaces the whole set. */
        for (ssize_t at = 0; n > 0 && at < n; at += (ssize_t)strlen(names + at) + 1) {
                const char *old = names + at;

                if (strncmp(old, FILES_METADATA_PREFIX, strlen(FILES_METADATA_PREFIX)) == 0 &&
                    !json_object_get(metadata, old + strlen(FILES_METADATA_PREFIX)) &&
                    fremovexattr(fd, old) < 0 && errno != ENODATA)
                        return -errno;
        }
        json_object_foreach(metadata, key, v) {
                const char *value = json_string_value(v);

                if ((size_t)snprintf(name, sizeof(name), FILES_METADATA_PREFIX "%s", key) >=
                        sizeof(name) ||
                    !value)
                        return -EINVAL;
                if (fsetxattr(fd, name, value, strlen(value), 0) < 0)
                        return -errno;
        }
        return 0;
}

int files_write_metadata(const struct sandbox *sb, enum files_user who, int fd, json_t *metadata,
                         json_t **persisted)
{
        struct as_user saved = become_user(sb, who);
        int rc = write_metadata_at(fd, metadata);

        if (persisted)
                *persisted = metadata_of(fd);
        become_self(saved);
        return rc;
}

bool files_size_unknown(int fd, const struct stat *st)
{
        struct statfs fs;

        if (st->st_size == 0)
                return true;
        return fstatfs(fd, &fs) == 0 &&
               (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC);
}

int files_read_all(int fd, size_t max, char **data, size_t *len)
{
        size_t cap = 0, used = 0;
        char *buf = NULL;
        int rc = 0;

        for (;;) {
                ssize_t n;

                if (used == cap) {
                        /* One byte past max says there is more. */
                        size_t want = cap ? cap * 2 : 64 * 1024;
                        char *grown;

                        if (want > max + 1)
                                want = max + 1;
                        grown = want > cap ? realloc(buf, want) : NULL;
                        if (!grown) {
                                rc = want > cap ? -ENOMEM : -EFBIG;
                                break;
                        }
                        buf = grown;
                        cap = want;
                }
                n = read(fd, buf + used, cap - used);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        rc = -errno;
                        break;
                }
                if (n == 0)
                        break;
                used += (size_t)n;
                if (used > max) {
                        rc = -EFBIG;
                        break;
                }
        }
        if (rc < 0) {
                free(buf);
                buf = NULL;
                used = 0;
        }
        *data = buf;
        *len = used;
        return rc;
}

int files_mkdir(const struct sandbox *sb, enum files_user who, const char *path)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_mkdir_inside(sb, who, path);

        become_self(saved);
        return rc;
}

int files_remove(const struct sandbox *sb, enum files_user who, const char *path)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_remove_inside(sb, path);

        become_self(saved);
        return rc;
}

int files_rename(const struct sandbox *sb, enum files_user who, const char *from, const char *to)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_rename_inside(sb, who, from, to);

        become_self(saved);
        return rc;
}

int files_stat(const struct sandbox *sb, enum files_user who, const char *path, json_t **entry)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_stat_inside(sb, path, entry);

        become_self(saved);
        return rc;
}

int files_enter_dir(const struct sandbox *sb, enum files_user who, const char *path)
{
        struct as_user saved = become_user(sb, who);
        int fd = open_in(sb, path, O_PATH | O_DIRECTORY, 0);

        become_self(saved);
        if (fd < 0)
                return fd;
        close(fd);
        return 0;
}

int files_list(const struct sandbox *sb, enum files_user who, const char *path, unsigned depth,
               json_t **entries)
{
        struct as_user saved = become_user(sb, who);
        int rc = files_list_inside(sb, path, depth, entries);

        become_self(saved);
        return rc;
}

/* inotify_add_watch takes a path: it is given the directory's descriptor,
 * opened inside the sandbox as who, as /proc/self/fd/N. No path the gateway
 * resolves itself through directories the sandbox can write is ever
 * watched. A subdirectory (nofollow) that is a symlink is not one. */
static int watch_dir_inside(const struct sandbox *sb, int inotify_fd, const char *path,
                            bool nofollow, uint32_t mask, json_t *subdirs, size_t max_subdirs)
{
        char self[64];
        int dir = open_in(sb, path, O_PATH | O_DIRECTORY | (nofollow ? O_NOFOLLOW : 0), 0);
        int wd, rc = 0;
        DIR *d;

        if (dir < 0)
                return dir;
        snprintf(self, sizeof(self), "/proc/self/fd/%d", dir);
        wd = inotify_add_watch(inotify_fd, self, mask | IN_ONLYDIR);
        rc = wd < 0 ? -errno : wd;
        if (wd < 0 || !subdirs)
                goto out;
        /* Listed after the watch is in place: a directory made meanwhile
         * is either listed here or reported by the watch (or both). */
        {
                int list = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                struct dirent *de;

                d = list >= 0 ? fdopendir(list) : NULL;
                if (!d) {
                        if (list >= 0)
                                close(list);
                        goto out;
                }
                /* Bounded: a directory of a million directories costs no
                 * more than the caller has room to watch. */
                while (json_array_size(subdirs) < max_subdirs && (de = readdir(d)) != NULL) {
                        if (de->d_type == DT_DIR && strcmp(de->d_name, ".") != 0 &&
                            strcmp(de->d_name, "..") != 0)
                                json_array_append_new(subdirs, json_string(de->d_name));
                }
                closedir(d);
        }
out:
        close(dir);
        return rc;
}

int files_watch_dir(const struct sandbox *sb, enum files_user who, int inotify_fd, const char *path,
                    bool nofollow, uint32_t mask, json_t *subdirs, size_t max_subdirs)
{
        struct as_user saved = become_user(sb, who);
        int rc = watch_dir_inside(sb, inotify_fd, path, nofollow, mask, subdirs, max_subdirs);

        become_self(saved);
        return rc;
}

int files_http_status(int error)
{
        switch (-error) {
        case ENOENT: return 404;
        case EEXIST: return 409;
        case EROFS:
        case EACCES:
        case EPERM: return 403;
        case ENOSPC:
        case EDQUOT: return 507;
        case EFBIG: return 413;
        case EISDIR:
        case ENOTDIR:
        case EINVAL:
        case ENAMETOOLONG:
        case ELOOP:
        case EXDEV:
        case EBADMSG: return 400;
        default: return 500;
        }
}
