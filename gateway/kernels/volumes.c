#include "autoconf.h"

#include "gateway/kernels/volumes.h"
#include "gateway/core/tenants.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/pause.h"
#include "protocol/hostmsg.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOLUMES_DIR "volumes"
#define IMAGES_DIR  "images"
#define RECORD_MAX  4096

static const struct config *config;
static struct volume *volumes; /* newest first */
static int dir_fd = -1;        /* STATE_DIR/volumes, -1 when volumes are off */
static char why_disabled[256] = "volumes need a gateway run as root with sandboxes and a "
                                "--state-dir";

const char *volumes_disabled(void)
{
        return dir_fd >= 0 ? NULL : why_disabled;
}

bool volume_name_valid(const char *name)
{
        size_t n = strlen(name);

        if (n == 0 || n >= VOLUME_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.'))
                        return false;
        }
        return strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static bool str_field(json_t *o, const char *key, char *out, size_t size)
{
        const char *s = json_string_value(json_object_get(o, key));

        return s && (size_t)snprintf(out, size, "%s", s) < size;
}

static struct volume *volume_alloc(void)
{
        struct volume *v = calloc(1, sizeof(*v));

        if (v)
                v->root_fd = -1;
        return v;
}

static void volume_free(struct volume *v)
{
        if (v->root_fd >= 0)
                close(v->root_fd);
        free(v);
}

static int record_save(const struct volume *v)
{
        json_t *doc = json_pack("{s:i, s:s, s:s, s:s, s:s, s:I, s:I}", "version", 1, "id", v->id,
                                "name", v->name, "owner", v->owner, "token", v->token, "size_mb",
                                (json_int_t)v->size_mb, "created", (json_int_t)v->created);
        char name[JP_UUID_SIZE + 8], *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        int rc;

        snprintf(name, sizeof(name), "%s.json", v->id);
        rc = text ? state_write_file(dir_fd, name, text) : -ENOMEM;
        free(text);
        json_decref(doc);
        return rc;
}

static void record_remove(const struct volume *v)
{
        char name[JP_UUID_SIZE + 8];

        snprintf(name, sizeof(name), "%s.json", v->id);
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
                log_warn("volume %.8s: cannot remove its record: %s", v->id, strerror(errno));
        fsync(dir_fd);
}

static struct volume *record_load(const char *file)
{
        char text[RECORD_MAX + 1];
        json_t *doc = NULL;
        struct volume *v = NULL;
        json_int_t size_mb, created;
        ssize_t n = -1;
        int fd = openat(dir_fd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        if (fd >= 0) {
                n = read(fd, text, RECORD_MAX);
                close(fd);
        }
        if (n > 0 && n < RECORD_MAX) {
                text[n] = '\0';
                doc = json_loads(text, 0, NULL);
        }
        v = doc ? volume_alloc() : NULL;
        size_mb = json_integer_value(json_object_get(doc, "size_mb"));
        created = json_integer_value(json_object_get(doc, "created"));
        if (v && str_field(doc, "id", v->id, sizeof(v->id)) &&
            jp_uuid_valid(v->id, strlen(v->id)) &&
            str_field(doc, "name", v->name, sizeof(v->name)) && volume_name_valid(v->name) &&
            str_field(doc, "owner", v->owner, sizeof(v->owner)) &&
            str_field(doc, "token", v->token, sizeof(v->token)) && size_mb > 0) {
                v->size_mb = (uint64_t)size_mb;
                v->created = (time_t)created;
        } else {
                log_warn("volumes: %s is not a volume's record: left alone", file);
                free(v);
                v = NULL;
        }
        json_decref(doc);
        return v;
}

static void load(void)
{
        DIR *d = fdopendir(dup(dir_fd));
        struct dirent *e;
        size_t n = 0;

        if (!d)
                return;
        rewinddir(d);
        while ((e = readdir(d))) {
                size_t len = strlen(e->d_name);
                struct volume *v;

                if (len != JP_UUID_SIZE - 1 + 5 || strcmp(e->d_name + len - 5, ".json") != 0)
                        continue;
                v = record_load(e->d_name);
                if (!v)
                        continue;
                v->next = volumes;
                volumes = v;
                n++;
        }
        closedir(d);
        if (n)
                log_info("volumes: %zu kept from before", n);
}

int volumes_init(const struct config *cfg)
{
        char path[PATH_MAX];
        int state;

        config = cfg;
        if (!cfg->state_dir[0] || geteuid() != 0 || strcmp(cfg->sandbox, "none") == 0)
                return 0;
        state = open(cfg->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (state < 0 || (mkdirat(state, VOLUMES_DIR, 0700) < 0 && errno != EEXIST) ||
            (dir_fd = openat(state, VOLUMES_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
                0) {
                snprintf(why_disabled, sizeof(why_disabled), "cannot use %s/" VOLUMES_DIR ": %s",
                         cfg->state_dir, strerror(errno));
                log_error("volumes are off: %s", why_disabled);
                if (state >= 0)
                        close(state);
                return 0;
        }
        close(state);
        snprintf(path, sizeof(path), "%s/" VOLUMES_DIR "/" IMAGES_DIR, cfg->state_dir);
        host_set_volumes_dir(path);
        load();
        return 0;
}

void volumes_free(void)
{
        while (volumes) {
                struct volume *v = volumes;

                volumes = v->next;
                volume_free(v);
        }
        if (dir_fd >= 0)
                close(dir_fd);
        dir_fd = -1;
}

static uint64_t owner_mb(const char *owner)
{
        uint64_t mb = 0;

        for (struct volume *v = volumes; v; v = v->next) {
                if (strcmp(v->owner, owner) == 0)
                        mb += v->size_mb;
        }
        return mb;
}

struct volume *volume_by_id(const char *id)
{
        for (struct volume *v = volumes; v; v = v->next) {
                if (strcmp(v->id, id) == 0)
                        return v;
        }
        return NULL;
}

struct volume *volume_by_name(const char *name)
{
        const char *owner = tenants_owner_now();

        for (struct volume *v = volumes; v; v = v->next) {
                if (strcmp(v->name, name) == 0 && strcmp(v->owner, owner) == 0)
                        return v;
        }
        return NULL;
}

bool volume_visible(const struct volume *v)
{
        return tenants_may_reach(v->owner) || strcmp(v->owner, tenants_owner_now()) == 0;
}

void volume_each(void (*fn)(struct volume *v, void *ctx), void *ctx)
{
        struct volume *list[4096];
        size_t n = 0;

        /* Oldest first: the list is newest first. */
        for (struct volume *v = volumes; v && n < sizeof(list) / sizeof(list[0]); v = v->next) {
                if (volume_visible(v))
                        list[n++] = v;
        }
        while (n > 0)
                fn(list[--n], ctx);
}

bool volume_token_matches(const struct volume *v, const char *token)
{
        size_t n = strlen(v->token);
        unsigned char diff = 0;

        if (!token || strlen(token) != n)
                return false;
        for (size_t i = 0; i < n; i++)
                diff |= (unsigned char)(v->token[i] ^ token[i]);
        return diff == 0;
}

static void resolve(struct volume *v, int error)
{
        struct volume_waiter *w = v->waiters;

        v->waiters = NULL;
        while (w) {
                struct volume_waiter *next = w->next;

                w->next = NULL;
                w->volume = error ? NULL : v;
                w->done(w, error, error ? -1 : v->root_fd);
                w = next;
        }
}

static void unlink_volume(struct volume *v)
{
        for (struct volume **link = &volumes; *link; link = &(*link)->next) {
                if (*link == v) {
                        *link = v->next;
                        return;
                }
        }
}

/* The kernel-host's answer: the root, or why not. A volume being made
 * that could not be is forgotten. */
static void on_opened(void *ctx, int error, int fd)
{
        struct volume *v = ctx;
        bool made = v->size_mb && !v->created;

        v->opening = false;
        v->request[0] = '\0';
        if (error == 0) {
                v->root_fd = fd;
                if (made) {
                        v->created = time(NULL);
                        if (record_save(v) < 0) {
                                error = EIO;
                                host_volume_delete(v->id);
                        }
                }
        }
        if (error) {
                log_warn("volume %.8s (%s): cannot %s it: %s", v->id, v->name,
                         made ? "make" : "open", strerror(error));
                if (made) {
                        unlink_volume(v);
                        resolve(v, -error);
                        volume_free(v);
                        return;
                }
        }
        resolve(v, error ? -error : 0);
}

static int ask_host(struct volume *v, uint64_t size_mb)
{
        struct hostmsg_volume req = {.size_mb = size_mb};
        int rc;

        if (jp_uuid4(req.id) < 0)
                return -EIO;
        snprintf(req.volume_id, sizeof(req.volume_id), "%s", v->id);
        rc = host_volume_open(&req, on_opened, v);
        if (rc == 0) {
                v->opening = true;
                snprintf(v->request, sizeof(v->request), "%s", req.id);
        }
        return rc;
}

int volume_create(const char *name, struct volume_waiter *w)
{
        const char *owner = tenants_owner_now();
        uint64_t size = (uint64_t)config->volume_size_mb;
        struct volume *v;
        char hex[(VOLUME_TOKEN_LEN - 4) / 2 * 2 + 1];
        int rc;

        if (dir_fd < 0)
                return -ENODEV;
        if (!volume_name_valid(name) || strlen(owner) >= VOLUME_OWNER_MAX)
                return -EINVAL;
        if (volume_by_name(name))
                return -EEXIST;
        if (owner_mb(owner) + size > (uint64_t)config->volume_quota_mb)
                return -EDQUOT;
        v = volume_alloc();
        if (!v)
                return -ENOMEM;
        if (jp_uuid4(v->id) < 0 || jp_random_hex(hex, (VOLUME_TOKEN_LEN - 4) / 2) < 0) {
                volume_free(v);
                return -EIO;
        }
        snprintf(v->name, sizeof(v->name), "%s", name);
        snprintf(v->owner, sizeof(v->owner), "%s", owner);
        snprintf(v->token, sizeof(v->token), "vol_%s", hex);
        v->size_mb = size;
        rc = ask_host(v, size);
        if (rc < 0) {
                volume_free(v);
                return rc;
        }
        /* Listed (and counted against the quota) while it is made. */
        v->next = volumes;
        volumes = v;
        w->volume = v;
        w->next = NULL;
        v->waiters = w;
        return 0;
}

void volumes_open_all(void)
{
        for (struct volume *v = volumes; v; v = v->next) {
                if (v->root_fd < 0 && !v->opening && ask_host(v, 0) < 0)
                        log_warn("volume %.8s (%s): cannot ask for it", v->id, v->name);
        }
}

void volume_root(struct volume *v, struct volume_waiter *w)
{
        int rc;

        w->volume = v;
        if (v->root_fd >= 0) {
                w->done(w, 0, v->root_fd);
                return;
        }
        if (!v->opening) {
                rc = ask_host(v, 0);
                if (rc < 0) {
                        w->volume = NULL;
                        w->done(w, rc, -1);
                        return;
                }
        }
        w->next = v->waiters;
        v->waiters = w;
}

void volume_waiter_cancel(struct volume_waiter *w)
{
        if (!w->volume)
                return;
        for (struct volume_waiter **link = &w->volume->waiters; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        w->volume = NULL;
}

void volume_destroy(struct volume *v)
{
        if (v->opening)
                host_connect_cancel(v->request);
        unlink_volume(v);
        record_remove(v);
        host_volume_delete(v->id);
        resolve(v, -ENOENT);
        volume_free(v);
}

int volume_mounts_add(char ***list, size_t *n, const char *path, const char *which, char *err,
                      size_t errlen)
{
        struct volume *v = volume_by_name(which);
        char entry[JP_UUID_SIZE + 260];
        char **grown;

        if (dir_fd < 0) {
                snprintf(err, errlen, "volumes: %s", why_disabled);
                return -EINVAL;
        }
        if (!v) {
                v = volume_by_id(which);
                if (v && !volume_visible(v))
                        v = NULL;
        }
        if (!v) {
                snprintf(err, errlen, "volume \"%.64s\" not found", which);
                return -EINVAL;
        }
        if (!hostmsg_volume_path_valid(path)) {
                snprintf(err, errlen,
                         "volume mount path \"%.64s\": absolute, plain (no \".\" or \"..\"), not "
                         "/, /tmp, /home/user or a system directory (/proc, /dev, /etc, /usr...)",
                         path);
                return -EINVAL;
        }
        for (size_t i = 0; i < *n; i++) {
                const char *other = strchr((*list)[i], ':') + 1;

                if (strcmp(other, path) == 0) {
                        snprintf(err, errlen, "two volumes at %.64s", path);
                        return -EINVAL;
                }
        }
        if (*n >= HOSTMSG_MAX_VOLUMES) {
                snprintf(err, errlen, "at most %d volumes per sandbox", HOSTMSG_MAX_VOLUMES);
                return -EINVAL;
        }
        snprintf(entry, sizeof(entry), "%s:%s", v->id, path);
        grown = realloc(*list, (*n + 2) * sizeof(char *));
        if (!grown)
                return -ENOMEM;
        *list = grown;
        grown[*n] = strdup(entry);
        grown[*n + 1] = NULL;
        if (!grown[*n])
                return -ENOMEM;
        (*n)++;
        return 0;
}
