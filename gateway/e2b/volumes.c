#include "autoconf.h"

#include "gateway/e2b/volumes.h"
#include "gateway/e2b/e2b.h"
#include "gateway/kernels/volumes.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CONTENT_PREFIX "volumecontent/"
#define DEFAULT_OWNER  1000  /* "user" in every sandbox */
#define LIST_MAX       10000 /* entries one listing gives at most */
#define DEPTH_MAX      32
#define REMOVE_DEPTH   256

/* ---- the control plane ------------------------------------------------------- */

static json_t *volume_json(const struct volume *v, bool token)
{
        json_t *o = json_pack("{s:s, s:s}", "volumeID", v->id, "name", v->name);

        if (o && token)
                json_object_set_new(o, "token", json_string(v->token));
        return o;
}

struct pending {
        struct volume_waiter w;
        struct http_request *r;
};

static void pending_cleanup(struct http_request *r)
{
        struct pending *p = r->ctx;

        volume_waiter_cancel(&p->w);
        free(p);
        r->ctx = NULL;
}

static void on_made(struct volume_waiter *w, int error, int root_fd)
{
        struct pending *p = (struct pending *)w;

        (void)root_fd;
        if (error)
                e2b_reply_error(p->r, 500, "the volume could not be made: %s", strerror(-error));
        else
                http_reply_json(p->r, 201, volume_json(w->volume, true));
        w->volume = NULL;
}

static void create(struct http_request *r)
{
        json_t *body = http_parse_body(r);
        const char *name;
        struct pending *p;
        int rc;

        if (!body)
                return;
        name = json_string_value(json_object_get(body, "name"));
        if (!name || !volume_name_valid(name)) {
                e2b_reply_error(
                    r, 400, "name: 1 to %d letters, digits, '-', '_' or '.' are a volume's name",
                    VOLUME_NAME_MAX - 1);
                json_decref(body);
                return;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                json_decref(body);
                e2b_reply_error(r, 500, "out of memory");
                return;
        }
        p->r = r;
        p->w.done = on_made;
        rc = volume_create(name, &p->w);
        if (rc == 0) {
                r->ctx = p;
                r->cleanup = pending_cleanup;
        } else {
                free(p);
        }
        if (rc == -EEXIST)
                e2b_reply_error(r, 409, "a volume named \"%s\" exists", name);
        else if (rc == -EDQUOT)
                e2b_reply_error(r, 429,
                                "volumes: this key's volumes would hold more than its quota "
                                "(--volume-quota-mb)");
        else if (rc == -ENODEV)
                e2b_reply_error(r, 400, "volumes: %s", volumes_disabled());
        else if (rc < 0)
                e2b_reply_error(r, 500, "the volume could not be made: %s", strerror(-rc));
        json_decref(body);
}

static void add_listed(struct volume *v, void *ctx)
{
        json_array_append_new(ctx, volume_json(v, false));
}

bool e2b_volumes_handle(struct http_request *r, const char *route)
{
        char id[64], rest[8];
        struct volume *v;
        json_t *list;

        if (strcmp(route, "volumes") == 0) {
                if (r->method == HTTP_POST) {
                        create(r);
                } else if (r->method == HTTP_GET) {
                        list = json_array();
                        volume_each(add_listed, list);
                        http_reply_json(r, 200, list);
                } else {
                        e2b_reply_error(r, 405, "use GET or POST");
                }
                return true;
        }
        if (sscanf(route, "volumes/%63[^/]%7s", id, rest) != 1)
                return false;
        v = volume_by_id(id);
        if (!v || !volume_visible(v)) {
                e2b_reply_error(r, 404, "volume \"%.64s\" not found", id);
                return true;
        }
        if (r->method == HTTP_GET) {
                http_reply_json(r, 200, volume_json(v, true));
        } else if (r->method == HTTP_DELETE) {
                volume_destroy(v);
                http_reply_empty(r, 204);
        } else {
                e2b_reply_error(r, 405, "use GET or DELETE");
        }
        return true;
}

/* ---- the content API: where ---------------------------------------------------- */

bool e2b_volume_content_route(const char *route)
{
        return strncmp(route, CONTENT_PREFIX, strlen(CONTENT_PREFIX)) == 0;
}

/* The volume and the operation ("file", "dir", "path") a route names. */
static struct volume *content_target(const char *route, char *op, size_t size)
{
        char id[64];

        if (sscanf(route + strlen(CONTENT_PREFIX), "%63[^/]/%15s", id, op) != 2 || size < 16)
                return NULL;
        return volume_by_id(id);
}

static bool bearer_matches(struct http_request *r, const struct volume *v)
{
        char auth[256];
        const char *token;

        if (lws_hdr_copy(r->wsi, auth, sizeof(auth), WSI_TOKEN_HTTP_AUTHORIZATION) <= 0)
                return false;
        if (strncasecmp(auth, "Bearer ", 7) != 0)
                return false;
        token = auth + 7 + strspn(auth + 7, " ");
        return volume_token_matches(v, token);
}

bool e2b_volume_content_admit(struct http_request *r, const char *route)
{
        char op[16];
        struct volume *v = content_target(route, op, sizeof(op));

        /* Whether the volume exists is said only to its token's holder. */
        if (!v || !bearer_matches(r, v)) {
                e2b_reply_error(r, 401, "invalid or missing volume token");
                return false;
        }
        return true;
}

/* The request's path below the volume's root: "/" or "/a/b" into shown,
 * and what openat2 takes from the root ("." or "a/b") into rel. No ".."
 * is taken at all (400), "." and empty components are dropped. */
static int content_path(struct http_request *r, char *shown, size_t size, const char **rel)
{
        char given[PATH_MAX];
        size_t o = 0;

        if (http_query_arg(r->wsi, "path", given, sizeof(given)) < 0)
                return -EINVAL;
        for (const char *p = given; *p;) {
                size_t n;

                p += strspn(p, "/");
                n = strcspn(p, "/");
                if (n == 0)
                        break;
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return -EINVAL;
                if (!(n == 1 && p[0] == '.')) {
                        if (o + n + 2 > size)
                                return -ENAMETOOLONG;
                        shown[o++] = '/';
                        memcpy(shown + o, p, n);
                        o += n;
                }
                p += n;
        }
        if (o == 0)
                shown[o++] = '/';
        shown[o] = '\0';
        *rel = shown[1] ? shown + 1 : ".";
        return 0;
}

/* Opens rel below root: symlinks, ".." and absolute links stay inside the
 * volume, and nothing mounted elsewhere is crossed into. */
static int open_below(int root, const char *rel, int flags, mode_t mode)
{
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                               .mode = mode,
                               .resolve =
                                   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
        long fd = syscall(SYS_openat2, root, rel, &how, sizeof(how));

        return fd < 0 ? -errno : (int)fd;
}

/* rel's parent directory, opened below root, and its last name. */
static int open_parent(int root, const char *rel, char *name, size_t size)
{
        char parent[PATH_MAX];
        const char *slash = strrchr(rel, '/');

        if (strcmp(rel, ".") == 0)
                return -EINVAL;
        if ((size_t)snprintf(name, size, "%s", slash ? slash + 1 : rel) >= size)
                return -ENAMETOOLONG;
        snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - rel) : 1, slash ? rel : ".");
        return open_below(root, parent, O_PATH | O_DIRECTORY, 0);
}

/* ---- the content API: what -------------------------------------------------------- */

static void iso_time(const struct timespec *t, char *out, size_t size)
{
        struct tm tm;
        char base[32];

        gmtime_r(&t->tv_sec, &tm);
        strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, size, "%s.%06ldZ", base, t->tv_nsec / 1000);
}

static json_t *entry_json(const char *name, const char *path, const struct stat *st,
                          const char *target)
{
        char at[40], mt[40], ct[40];
        const char *type = S_ISDIR(st->st_mode)   ? "directory"
                           : S_ISREG(st->st_mode) ? "file"
                           : S_ISLNK(st->st_mode) ? "symlink"
                                                  : "unknown";
        json_t *o;

        iso_time(&st->st_atim, at, sizeof(at));
        iso_time(&st->st_mtim, mt, sizeof(mt));
        iso_time(&st->st_ctim, ct, sizeof(ct));
        o = json_pack("{s:s, s:s, s:s, s:I, s:i, s:I, s:I, s:s, s:s, s:s}", "name", name, "type",
                      type, "path", path, "size", (json_int_t)st->st_size, "mode",
                      (int)(st->st_mode & 07777), "uid", (json_int_t)st->st_uid, "gid",
                      (json_int_t)st->st_gid, "atime", at, "mtime", mt, "ctime", ct);
        if (o && target)
                json_object_set_new(o, "target", json_string(target));
        return o;
}

/* The entry name in the directory dir (a descriptor), shown as path. */
static json_t *entry_at(int dir, const char *name, const char *path)
{
        char target[PATH_MAX];
        struct stat st;
        ssize_t n = -1;

        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) < 0)
                return NULL;
        if (S_ISLNK(st.st_mode)) {
                n = readlinkat(dir, name, target, sizeof(target) - 1);
                if (n >= 0)
                        target[n] = '\0';
        }
        return entry_json(name[0] ? name : "/", path, &st, n >= 0 ? target : NULL);
}

static int stat_path(int root, const char *shown, const char *rel, json_t **entry)
{
        char name[NAME_MAX + 1];
        int dir = strcmp(rel, ".") == 0 ? open_below(root, ".", O_PATH | O_DIRECTORY, 0)
                                        : open_parent(root, rel, name, sizeof(name));

        if (dir < 0)
                return dir;
        *entry = entry_at(dir, strcmp(rel, ".") == 0 ? "" : name, shown);
        close(dir);
        return *entry ? 0 : -ENOENT;
}

/* The entries below dir (its path shown), depth levels deep, each
 * followed by its own; symlinks are listed, never followed. */
static int list_dir(int dir, const char *shown, unsigned depth, json_t *out)
{
        int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;
        int rc = 0;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        while (rc == 0 && (e = readdir(d))) {
                char path[PATH_MAX];
                json_t *entry;

                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                if (json_array_size(out) >= LIST_MAX)
                        break;
                snprintf(path, sizeof(path), "%s%s%s", shown, strcmp(shown, "/") ? "/" : "",
                         e->d_name);
                entry = entry_at(dirfd(d), e->d_name, path);
                if (!entry)
                        continue;
                json_array_append_new(out, entry);
                if (depth > 1 &&
                    strcmp(json_string_value(json_object_get(entry, "type")), "directory") == 0) {
                        int sub = openat(dirfd(d), e->d_name,
                                         O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                        if (sub >= 0) {
                                rc = list_dir(sub, path, depth - 1, out);
                                close(sub);
                        }
                }
        }
        closedir(d);
        return rc;
}

/* Removes name in dir and, for a directory, everything in it (never
 * following a symlink). */
static int remove_at(int dir, const char *name, int depth)
{
        struct dirent *e;
        DIR *d;
        int fd, rc = 0;

        if (unlinkat(dir, name, 0) == 0)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return -errno;
        if (depth >= REMOVE_DEPTH)
                return -ELOOP;
        fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                rc = -errno;
                if (fd >= 0)
                        close(fd);
                return rc;
        }
        while (rc == 0 && (e = readdir(d))) {
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                        rc = remove_at(dirfd(d), e->d_name, depth + 1);
        }
        closedir(d);
        if (rc == 0 && unlinkat(dir, name, AT_REMOVEDIR) < 0)
                rc = -errno;
        return rc;
}

/* A number from the query (dflt when absent): false after replying 400. */
static bool query_number(struct http_request *r, const char *name, long long lo, long long hi,
                         long long dflt, long long *out)
{
        char text[32], *end;
        int rc = http_query_arg(r->wsi, name, text, sizeof(text));

        *out = dflt;
        if (rc == -ENOENT)
                return true;
        errno = 0;
        *out = rc == 0 ? strtoll(text, &end, 10) : 0;
        if (rc < 0 || errno || end == text || *end || *out < lo || *out > hi) {
                e2b_reply_error(r, 400, "%s: a number from %lld to %lld", name, lo, hi);
                return false;
        }
        return true;
}

static bool query_flag(struct http_request *r, const char *name)
{
        char text[8];

        return http_query_arg(r->wsi, name, text, sizeof(text)) == 0 && strcmp(text, "true") == 0;
}

/* Sets who owns the object open as fd (O_PATH) and its mode (not a
 * symlink's): through /proc/self/fd, never by a path in the volume. */
static int set_owner_mode(int fd, long long uid, long long gid, long long mode)
{
        char self[32];
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if ((uid >= 0 || gid >= 0) &&
            fchownat(fd, "", (uid_t)uid, (gid_t)gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
        if (mode >= 0 && !S_ISLNK(st.st_mode) && chmod(self, (mode_t)mode) < 0)
                return -errno;
        return 0;
}

static void reply_errno(struct http_request *r, int rc, const char *path)
{
        if (rc == -ENOENT || rc == -ENOTDIR)
                e2b_reply_error(r, 404, "path \"%s\" not found", path);
        else if (rc == -EEXIST)
                e2b_reply_error(r, 409, "path \"%s\" exists", path);
        else if (rc == -EISDIR)
                e2b_reply_error(r, 400, "path \"%s\" is a directory", path);
        else if (rc == -EINVAL || rc == -ENAMETOOLONG || rc == -EXDEV || rc == -ELOOP)
                e2b_reply_error(r, 400, "path \"%s\": %s", path, strerror(-rc));
        else if (rc == -ENOSPC || rc == -EDQUOT)
                e2b_reply_error(r, 507, "the volume is full");
        else
                e2b_reply_error(r, 500, "path \"%s\": %s", path, strerror(-rc));
}

/* Makes the directory name in dir, or says it exists. */
static int make_dir_at(int dir, const char *name, long long uid, long long gid, long long mode)
{
        int fd, rc;

        if (mkdirat(dir, name, (mode_t)mode) < 0)
                return -errno;
        fd = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        rc = set_owner_mode(fd, uid, gid, mode);
        close(fd);
        return rc;
}

/* POST dir: rel made (its missing parents too, with force), owned by
 * uid:gid; an existing one is refused without force. */
static int make_dir(int root, const char *rel, bool force, long long uid, long long gid,
                    long long mode)
{
        char partial[PATH_MAX], name[NAME_MAX + 1];
        int dir, rc;

        if (strcmp(rel, ".") == 0)
                return force ? 0 : -EEXIST;
        if (force) {
                for (const char *s = strchr(rel, '/'); s; s = strchr(s + 1, '/')) {
                        snprintf(partial, sizeof(partial), "%.*s", (int)(s - rel), rel);
                        dir = open_parent(root, partial, name, sizeof(name));
                        if (dir < 0)
                                return dir;
                        rc = make_dir_at(dir, name, uid, gid, 0755);
                        close(dir);
                        if (rc < 0 && rc != -EEXIST)
                                return rc;
                }
        }
        dir = open_parent(root, rel, name, sizeof(name));
        if (dir < 0)
                return dir;
        rc = make_dir_at(dir, name, uid, gid, mode);
        close(dir);
        if (rc == -EEXIST && force) {
                struct stat st;

                dir = open_below(root, rel, O_PATH | O_NOFOLLOW, 0);
                rc = dir < 0               ? dir
                     : fstat(dir, &st) < 0 ? -errno
                     : S_ISDIR(st.st_mode) ? 0
                                           : -EEXIST;
                if (dir >= 0)
                        close(dir);
        }
        return rc;
}

/* ---- uploads: a file's body written as it comes --------------------------------- */

struct upload {
        int fd;
        int error; /* the first failed write's errno */
        char shown[PATH_MAX];
};

static void upload_cleanup(struct http_request *r)
{
        struct upload *u = r->ctx;

        if (u->fd >= 0)
                close(u->fd);
        free(u);
        r->ctx = NULL;
}

static int upload_body(struct http_request *r, const uint8_t *data, size_t len)
{
        struct upload *u = r->ctx;

        while (len > 0 && !u->error) {
                ssize_t n = write(u->fd, data, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        u->error = errno;
                        break;
                }
                data += n;
                len -= (size_t)n;
        }
        return 0;
}

/* PUT file: the file is made (or emptied, with force) before its body is
 * written; the upload goes in r->ctx. false after replying. */
static bool upload_open(struct http_request *r, struct volume *v)
{
        char name[NAME_MAX + 1];
        long long uid, gid, mode;
        const char *rel;
        struct upload *u;
        struct stat st;
        bool force;
        int dir, fd, rc;

        u = calloc(1, sizeof(*u));
        if (!u) {
                e2b_reply_error(r, 500, "out of memory");
                return false;
        }
        u->fd = -1;
        r->ctx = u;
        r->cleanup = upload_cleanup;
        if (content_path(r, u->shown, sizeof(u->shown), &rel) < 0) {
                e2b_reply_error(r, 400, "path: a path in the volume, without \"..\"");
                return false;
        }
        if (!query_number(r, "uid", 0, UINT32_MAX - 1, DEFAULT_OWNER, &uid) ||
            !query_number(r, "gid", 0, UINT32_MAX - 1, DEFAULT_OWNER, &gid) ||
            !query_number(r, "mode", 0, 07777, 0644, &mode))
                return false;
        force = query_flag(r, "force");
        dir = open_parent(v->root_fd, rel, name, sizeof(name));
        if (dir < 0) {
                reply_errno(r, dir, u->shown);
                return false;
        }
        /* Never through a symlink, never a FIFO's open that waits. */
        fd = openat(dir, name,
                    O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                        (force ? O_TRUNC : O_EXCL),
                    (mode_t)mode);
        rc = fd < 0 ? (errno == ELOOP ? -EEXIST : -errno) : 0;
        close(dir);
        if (rc == 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))
                rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        if (rc == 0)
                rc = set_owner_mode(fd, uid, gid, mode);
        if (rc == 0 && fcntl(fd, F_SETFL, 0) < 0)
                rc = -errno;
        if (rc < 0) {
                if (fd >= 0)
                        close(fd);
                reply_errno(r, rc, u->shown);
                return false;
        }
        u->fd = fd;
        return true;
}

static void upload_finish(struct http_request *r)
{
        struct upload *u = r->ctx;
        const char *slash;
        struct stat st;

        if (u->error || fstat(u->fd, &st) < 0) {
                reply_errno(r, u->error ? -u->error : -errno, u->shown);
                return;
        }
        slash = strrchr(u->shown, '/');
        http_reply_json(r, 201, entry_json(slash + 1, u->shown, &st, NULL));
}

/* ---- the content API's routes --------------------------------------------------- */

/* An open volume's upload is written as it comes; one whose volume is
 * not open yet (just after a start) is read whole first (within
 * --max-body-bytes) and written once it is. */
void e2b_volume_content_prepare(struct http_request *r, const char *route)
{
        char op[16];
        struct volume *v = content_target(route, op, sizeof(op));

        if (v && v->root_fd >= 0 && strcmp(op, "file") == 0 && r->method == HTTP_PUT &&
            bearer_matches(r, v) && upload_open(r, v))
                r->body_fn = upload_body;
}

struct opening {
        struct volume_waiter w;
        struct http_request *r;
        char route[HTTP_PATH_MAX];
};

static void opening_cleanup(struct http_request *r)
{
        struct opening *o = r->ctx;

        volume_waiter_cancel(&o->w);
        free(o);
        r->ctx = NULL;
}

static void on_open(struct volume_waiter *w, int error, int root_fd)
{
        struct opening *o = (struct opening *)w;
        struct http_request *r = o->r;
        char route[HTTP_PATH_MAX];

        (void)root_fd;
        snprintf(route, sizeof(route), "%s", o->route);
        w->volume = NULL;
        free(o);
        r->ctx = NULL;
        r->cleanup = NULL;
        if (error == -ENOENT)
                e2b_reply_error(r, 404, "the volume is gone");
        else if (error)
                e2b_reply_error(r, 500, "the volume cannot be opened: %s", strerror(-error));
        else
                e2b_volume_content(r, route);
}

/* The volume is being opened: r is served once it is. */
static void wait_open(struct http_request *r, struct volume *v, const char *route)
{
        struct opening *o = calloc(1, sizeof(*o));

        if (!o) {
                e2b_reply_error(r, 500, "out of memory");
                return;
        }
        o->r = r;
        o->w.done = on_open;
        snprintf(o->route, sizeof(o->route), "%s", route);
        r->ctx = o;
        r->cleanup = opening_cleanup;
        volume_root(v, &o->w);
}

static void patch(struct http_request *r, int root, const char *shown, const char *rel)
{
        json_t *body = http_parse_body(r), *entry = NULL;
        long long uid = -1, gid = -1, mode = -1;
        json_t *j;
        int fd, rc;

        if (!body)
                return;
        if ((j = json_object_get(body, "uid")) && json_is_integer(j))
                uid = json_integer_value(j);
        if ((j = json_object_get(body, "gid")) && json_is_integer(j))
                gid = json_integer_value(j);
        if ((j = json_object_get(body, "mode")) && json_is_integer(j))
                mode = json_integer_value(j);
        json_decref(body);
        if (uid < -1 || uid >= UINT32_MAX || gid < -1 || gid >= UINT32_MAX || mode < -1 ||
            mode > 07777) {
                e2b_reply_error(r, 400, "uid, gid: 0 to 4294967294; mode: 0 to 07777");
                return;
        }
        fd = open_below(root, rel, O_PATH | O_NOFOLLOW, 0);
        rc = fd < 0 ? fd : set_owner_mode(fd, uid, gid, mode);
        if (fd >= 0)
                close(fd);
        if (rc == 0)
                rc = stat_path(root, shown, rel, &entry);
        if (rc < 0)
                reply_errno(r, rc, shown);
        else
                http_reply_json(r, 200, entry);
}

void e2b_volume_content(struct http_request *r, const char *route)
{
        char op[16], shown[PATH_MAX], name[NAME_MAX + 1];
        struct volume *v = content_target(route, op, sizeof(op));
        json_t *entry = NULL, *list;
        long long depth, uid, gid, mode;
        const char *rel;
        struct stat st;
        int root, fd, rc;

        if (!v || !bearer_matches(r, v)) {
                e2b_reply_error(r, 401, "invalid or missing volume token");
                return;
        }
        if (strcmp(op, "file") == 0 && r->method == HTTP_PUT && r->ctx) {
                if (!r->responded)
                        upload_finish(r);
                return;
        }
        root = v->root_fd;
        if (root < 0) {
                wait_open(r, v, route);
                return;
        }
        if (strcmp(op, "file") == 0 && r->method == HTTP_PUT) {
                /* Its body was read whole while the volume opened. */
                if (upload_open(r, v))
                        upload_body(r, (const uint8_t *)r->body.data, r->body.len);
                if (!r->responded)
                        upload_finish(r);
                return;
        }
        if (content_path(r, shown, sizeof(shown), &rel) < 0) {
                e2b_reply_error(r, 400, "path: a path in the volume, without \"..\"");
                return;
        }
        if (strcmp(op, "file") == 0 && r->method == HTTP_GET) {
                /* A FIFO's open must not wait: it is not a file anyway. */
                fd = open_below(root, rel, O_RDONLY | O_NONBLOCK, 0);
                rc = fd < 0 ? fd : fstat(fd, &st) < 0 ? -errno : 0;
                if (rc == 0 && !S_ISREG(st.st_mode))
                        rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
                if (rc < 0) {
                        if (fd >= 0)
                                close(fd);
                        reply_errno(r, rc, shown);
                        return;
                }
                http_reply_fd(r, 200, "application/octet-stream", fd, (uint64_t)st.st_size);
        } else if (strcmp(op, "dir") == 0 && r->method == HTTP_GET) {
                if (!query_number(r, "depth", 1, DEPTH_MAX, 1, &depth))
                        return;
                fd = open_below(root, rel, O_PATH | O_DIRECTORY, 0);
                list = json_array();
                rc = fd < 0 ? fd : list_dir(fd, shown, (unsigned)depth, list);
                if (fd >= 0)
                        close(fd);
                if (rc < 0) {
                        json_decref(list);
                        reply_errno(r, rc, shown);
                        return;
                }
                http_reply_json(r, 200, list);
        } else if (strcmp(op, "dir") == 0 && r->method == HTTP_POST) {
                if (!query_number(r, "uid", 0, UINT32_MAX - 1, DEFAULT_OWNER, &uid) ||
                    !query_number(r, "gid", 0, UINT32_MAX - 1, DEFAULT_OWNER, &gid) ||
                    !query_number(r, "mode", 0, 07777, 0755, &mode))
                        return;
                rc = make_dir(root, rel, query_flag(r, "force"), uid, gid, mode);
                if (rc == 0)
                        rc = stat_path(root, shown, rel, &entry);
                if (rc < 0)
                        reply_errno(r, rc, shown);
                else
                        http_reply_json(r, 201, entry);
        } else if (strcmp(op, "path") == 0 && r->method == HTTP_GET) {
                rc = stat_path(root, shown, rel, &entry);
                if (rc < 0)
                        reply_errno(r, rc, shown);
                else
                        http_reply_json(r, 200, entry);
        } else if (strcmp(op, "path") == 0 && r->method == HTTP_PATCH) {
                patch(r, root, shown, rel);
        } else if (strcmp(op, "path") == 0 && r->method == HTTP_DELETE) {
                if (strcmp(rel, ".") == 0) {
                        e2b_reply_error(r, 400, "the volume's root cannot be removed");
                        return;
                }
                fd = open_parent(root, rel, name, sizeof(name));
                rc = fd < 0 ? fd : remove_at(fd, name, 0);
                if (fd >= 0)
                        close(fd);
                if (rc < 0)
                        reply_errno(r, rc, shown);
                else
                        http_reply_empty(r, 204);
        } else {
                e2b_reply_error(r, 404, "no route %s", route);
        }
}
