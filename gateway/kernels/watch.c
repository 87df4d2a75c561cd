#include "autoconf.h"

#include "gateway/kernels/watch.h"
#include "gateway/core/config.h"
#include "gateway/core/keys.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/loop.h"
#include "protocol/log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

/* What E2B's envd reports (fsnotify's operations). Self events of a
 * watched directory are left out: its parent reports the same change. */
#define WATCH_MASK                                                                                 \
        (IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB |             \
         IN_EXCL_UNLINK)
#define READ_SIZE (64 * 1024)
#define MAX_READS 16 /* per wake-up: a flood of events cannot hold the loop */

struct watched_dir {
        int wd;
        char *rel; /* relative to the watched directory; "" for itself */
};

struct watch {
        struct watch *next;
        struct sandbox *sb;         /* a reference */
        char tenant[KEYS_NAME_MAX]; /* whose sandbox: the tenant's bounds count it */
        enum files_user who;
        char root[PATH_MAX];
        bool recursive;
        bool with_entry; /* events carry the entry's EntryInfo */
        int fd;          /* its inotify instance */
        struct loop_watch *readable;
        struct watched_dir *dirs;
        size_t ndirs, cap;
        json_t *queue;      /* FilesystemEvent objects, oldest first */
        uint64_t dropped;   /* events lost since the last notice */
        bool limit_noticed; /* told once that subdirectories went unwatched */
        int root_wd;        /* the watched directory's own watch */
        bool gone;          /* that directory is gone (removed, unmounted) */
        watch_notify_fn notify;
        void *arg;
};

static struct watch *watches;
static size_t total_dirs;

static const struct config *cfg(void)
{
        return config_get();
}

size_t watch_count(void)
{
        size_t n = 0;

        for (struct watch *w = watches; w; w = w->next)
                n++;
        return n;
}

size_t watch_dirs(void)
{
        return total_dirs;
}

static size_t sandbox_dirs(const struct sandbox *sb)
{
        size_t n = 0;

        for (struct watch *w = watches; w; w = w->next)
                n += w->sb == sb ? w->ndirs : 0;
        return n;
}

static size_t sandbox_watchers(const struct sandbox *sb)
{
        size_t n = 0;

        for (struct watch *w = watches; w; w = w->next)
                n += w->sb == sb;
        return n;
}

static size_t tenant_dirs(const char *tenant)
{
        size_t n = 0;

        for (struct watch *w = watches; w; w = w->next)
                n += strcmp(w->tenant, tenant) == 0 ? w->ndirs : 0;
        return n;
}

static size_t tenant_watchers(const char *tenant)
{
        size_t n = 0;

        for (struct watch *w = watches; w; w = w->next)
                n += strcmp(w->tenant, tenant) == 0;
        return n;
}

/* Queues one event, or counts it lost when the queue is full; the notice
 * of what was lost takes the first free slot. */
static void note_dropped(struct watch *w);

static void push(struct watch *w, const char *name, const char *type)
{
        char path[PATH_MAX];
        json_t *event, *entry = NULL;

        note_dropped(w);
        if (json_array_size(w->queue) >= (size_t)cfg()->watch_queue_events) {
                w->dropped++;
                return;
        }
        event = json_pack("{s:s, s:s}", "name", name, "type", type);
        /* Best effort, as envd's: a path gone (or replaced) by now has
         * none. A remove or rename names what is no longer there. */
        if (event && w->with_entry && strcmp(type, "EVENT_TYPE_REMOVE") != 0 &&
            strcmp(type, "EVENT_TYPE_RENAME") != 0 &&
            (size_t)snprintf(path, sizeof(path), "%s/%s", strcmp(w->root, "/") ? w->root : "",
                             name) < sizeof(path) &&
            files_stat(w->sb, w->who, path, &entry) == 0)
                json_object_set_new(event, "entry", entry);
        if (event)
                json_array_append_new(w->queue, event);
}

/* An in-band notice: an event of no type, its name the message. It takes
 * a slot like any event (a full queue counts it lost). */
static void notice(struct watch *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void notice(struct watch *w, const char *fmt, ...)
{
        char message[512] = "glovebox: ";
        va_list ap;

        if (json_array_size(w->queue) >= (size_t)cfg()->watch_queue_events) {
                w->dropped++;
                return;
        }
        va_start(ap, fmt);
        vsnprintf(message + 10, sizeof(message) - 10, fmt, ap);
        va_end(ap);
        json_array_append_new(
            w->queue, json_pack("{s:s, s:s}", "name", message, "type", "EVENT_TYPE_UNSPECIFIED"));
}

static void note_dropped(struct watch *w)
{
        if (w->dropped == 0 || json_array_size(w->queue) >= (size_t)cfg()->watch_queue_events)
                return;
        notice(w, "%llu events were dropped: more than %lld waited for the client",
               (unsigned long long)w->dropped, (long long)cfg()->watch_queue_events);
        w->dropped = 0;
}

static struct watched_dir *dir_by_wd(struct watch *w, int wd)
{
        for (size_t i = 0; i < w->ndirs; i++) {
                if (w->dirs[i].wd == wd)
                        return &w->dirs[i];
        }
        return NULL;
}

static void forget_wd(struct watch *w, int wd)
{
        for (size_t i = 0; i < w->ndirs; i++) {
                if (w->dirs[i].wd != wd)
                        continue;
                free(w->dirs[i].rel);
                w->dirs[i] = w->dirs[--w->ndirs];
                total_dirs--;
                return;
        }
}

/* How many more directories fit every limit. */
static size_t dirs_left(const struct watch *w)
{
        size_t total = (size_t)cfg()->watch_max_dirs,
               mine = (size_t)cfg()->watch_max_dirs_per_sandbox,
               theirs = (size_t)cfg()->watch_max_dirs_per_tenant;
        size_t here = sandbox_dirs(w->sb), tenant = tenant_dirs(w->tenant);
        size_t a = total > total_dirs ? total - total_dirs : 0;
        size_t b = mine > here ? mine - here : 0;
        size_t c = theirs > tenant ? theirs - tenant : 0;

        a = a < b ? a : b;
        return a < c ? a : c;
}

/* Whether one more directory fits every limit; says so once when not. */
static int dir_room(struct watch *w, const char *rel)
{
        const char *which = NULL;
        long long limit = 0;

        if (total_dirs >= (size_t)cfg()->watch_max_dirs) {
                which = "the gateway's";
                limit = cfg()->watch_max_dirs;
        } else if (sandbox_dirs(w->sb) >= (size_t)cfg()->watch_max_dirs_per_sandbox) {
                which = "this sandbox's";
                limit = cfg()->watch_max_dirs_per_sandbox;
        } else if (tenant_dirs(w->tenant) >= (size_t)cfg()->watch_max_dirs_per_tenant) {
                which = "this tenant's";
                limit = cfg()->watch_max_dirs_per_tenant;
        }
        if (!which)
                return 0;
        if (!w->limit_noticed && w->ndirs > 0)
                notice(w,
                       "'%s' and directories made after it are not watched: %s limit of %lld "
                       "watched directories is reached",
                       rel, which, limit);
        w->limit_noticed = true;
        return -ENOSPC;
}

/* Watches rel and, recursively, the directories below it, breadth first
 * (a deep tree needs no deep stack), within the limits. Only the first
 * directory (the watched one itself) may follow a symlink. */
static int add_tree(struct watch *w, const char *first)
{
        json_t *todo = json_array();
        size_t next = 0;
        int rc = 0;

        if (!todo)
                return -ENOMEM;
        json_array_append_new(todo, json_string(first));
        while (next < json_array_size(todo)) {
                const char *rel = json_string_value(json_array_get(todo, next++));
                json_t *subdirs = w->recursive ? json_array() : NULL;
                char path[PATH_MAX];
                struct watched_dir *grown;
                const char *name;
                size_t i, queued;
                json_t *v;
                int wd;

                if ((size_t)snprintf(path, sizeof(path), "%s%s%s", w->root,
                                     rel[0] && strcmp(w->root, "/") ? "/" : "",
                                     rel) >= sizeof(path)) {
                        json_decref(subdirs);
                        continue;
                }
                rc = dir_room(w, rel);
                if (rc < 0) {
                        json_decref(subdirs);
                        break;
                }
                /* One more than fits, so that the limit is met and said. */
                queued = json_array_size(todo) - next;
                wd = files_watch_dir(w->sb, w->who, w->fd, path, rel[0] != '\0', WATCH_MASK,
                                     subdirs, dirs_left(w) > queued ? dirs_left(w) - queued : 1);
                if (wd < 0) {
                        json_decref(subdirs);
                        if (!rel[0]) {
                                rc = wd;
                                break;
                        }
                        rc = 0; /* gone already, or a symlink: nothing to watch */
                        continue;
                }
                if (!rel[0])
                        w->root_wd = wd;
                if (!dir_by_wd(w, wd)) {
                        grown = w->ndirs < w->cap
                                    ? w->dirs
                                    : realloc(w->dirs, (w->cap * 2 + 4) * sizeof(*w->dirs));
                        if (!grown) {
                                inotify_rm_watch(w->fd, wd);
                                json_decref(subdirs);
                                rc = -ENOMEM;
                                break;
                        }
                        if (grown != w->dirs || w->ndirs >= w->cap) {
                                w->dirs = grown;
                                w->cap = w->cap * 2 + 4;
                        }
                        w->dirs[w->ndirs].wd = wd;
                        w->dirs[w->ndirs].rel = strdup(rel);
                        if (!w->dirs[w->ndirs].rel) {
                                inotify_rm_watch(w->fd, wd);
                                json_decref(subdirs);
                                rc = -ENOMEM;
                                break;
                        }
                        w->ndirs++;
                        total_dirs++;
                }
                json_array_foreach(subdirs, i, v) {
                        char child[PATH_MAX];

                        name = json_string_value(v);
                        if ((size_t)snprintf(child, sizeof(child), "%s%s%s", rel, rel[0] ? "/" : "",
                                             name) < sizeof(child))
                                json_array_append_new(todo, json_string(child));
                }
                json_decref(subdirs);
        }
        json_decref(todo);
        return rc;
}

static const char *event_type(uint32_t mask)
{
        if (mask & (IN_CREATE | IN_MOVED_TO))
                return "EVENT_TYPE_CREATE";
        if (mask & IN_MODIFY)
                return "EVENT_TYPE_WRITE";
        if (mask & IN_DELETE)
                return "EVENT_TYPE_REMOVE";
        if (mask & IN_MOVED_FROM)
                return "EVENT_TYPE_RENAME";
        if (mask & IN_ATTRIB)
                return "EVENT_TYPE_CHMOD";
        return NULL;
}

static void handle_event(struct watch *w, const struct inotify_event *ev)
{
        char name[PATH_MAX];
        struct watched_dir *d;
        const char *type;

        if (ev->mask & IN_Q_OVERFLOW) {
                notice(w, "events were lost: the kernel's queue for this watcher overflowed");
                return;
        }
        if (ev->mask & IN_IGNORED) {
                /* The directory is gone (or unmounted): so is its watch. */
                forget_wd(w, ev->wd);
                w->gone = w->gone || ev->wd == w->root_wd;
                return;
        }
        d = dir_by_wd(w, ev->wd);
        type = event_type(ev->mask);
        if (!d || !type || ev->len == 0 || !ev->name[0])
                return;
        if ((size_t)snprintf(name, sizeof(name), "%s%s%s", d->rel, d->rel[0] ? "/" : "",
                             ev->name) >= sizeof(name))
                return;
        push(w, name, type);
        /* d may move: add_tree grows the table. */
        if (w->recursive && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
                add_tree(w, name);
}

static void on_readable(void *arg)
{
        struct watch *w = arg;
        static char data[READ_SIZE] __attribute__((aligned(__alignof__(struct inotify_event))));
        size_t before = json_array_size(w->queue) + w->dropped;
        bool was_gone = w->gone;

        for (int reads = 0; reads < MAX_READS; reads++) {
                ssize_t n = read(w->fd, data, sizeof(data));

                if (n <= 0)
                        break;
                for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
                        const struct inotify_event *ev = (const void *)(data + off);

                        handle_event(w, ev);
                        off += (ssize_t)(sizeof(*ev) + ev->len);
                }
        }
        if ((json_array_size(w->queue) + w->dropped != before || w->gone != was_gone) && w->notify)
                w->notify(w->arg);
}

int watch_new(struct sandbox *sb, const char *tenant, enum files_user who, const char *path,
              bool recursive, bool with_entry, watch_notify_fn notify, void *arg,
              struct watch **out, char *err, size_t errlen)
{
        struct watch *w = NULL;
        int rc;

        *out = NULL;
        if (watch_count() >= (size_t)cfg()->watch_max_watchers) {
                snprintf(err, errlen, "too many directory watchers in the gateway (%lld)",
                         (long long)cfg()->watch_max_watchers);
                return -ENOSPC;
        }
        if (sandbox_watchers(sb) >= (size_t)cfg()->watch_max_watchers_per_sandbox) {
                snprintf(err, errlen, "too many directory watchers in this sandbox (%lld)",
                         (long long)cfg()->watch_max_watchers_per_sandbox);
                return -ENOSPC;
        }
        if (tenant_watchers(tenant) >= (size_t)cfg()->watch_max_watchers_per_tenant) {
                snprintf(err, errlen,
                         "too many directory watchers in this tenant's sandboxes (%lld)",
                         (long long)cfg()->watch_max_watchers_per_tenant);
                return -ENOSPC;
        }
        w = calloc(1, sizeof(*w));
        if (!w) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        w->queue = json_array();
        w->sb = sandbox_ref(sb);
        snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
        w->who = who;
        w->recursive = recursive;
        w->with_entry = with_entry;
        w->notify = notify;
        w->arg = arg;
        snprintf(w->root, sizeof(w->root), "%s", path);
        if (w->fd < 0 || !w->queue) {
                rc = w->fd < 0 ? -errno : -ENOMEM;
                snprintf(err, errlen, "cannot make a watcher: %s", strerror(-rc));
                goto fail;
        }
        /* Listed first: the limits count its directories as they come. */
        w->next = watches;
        watches = w;
        rc = add_tree(w, "");
        if (rc < 0 && w->ndirs == 0) {
                if (rc == -ENOSPC)
                        snprintf(err, errlen, "the limit of watched directories is reached");
                else
                        snprintf(err, errlen, "%s: %s", path, strerror(-rc));
                goto fail;
        }
        rc = loop_watch_fd(w->fd, on_readable, w, &w->readable);
        if (rc < 0) {
                snprintf(err, errlen, "cannot watch: %s", strerror(-rc));
                goto fail;
        }
        *out = w;
        return 0;
fail:
        watch_destroy(&w);
        return rc;
}

size_t watch_take(struct watch *w, json_t *out, size_t max)
{
        size_t n = 0;

        while (n < max) {
                /* Emptied: the notice of what was lost comes last. */
                if (json_array_size(w->queue) == 0)
                        note_dropped(w);
                if (json_array_size(w->queue) == 0)
                        break;
                json_array_append(out, json_array_get(w->queue, 0));
                json_array_remove(w->queue, 0);
                n++;
        }
        return n;
}

bool watch_gone(const struct watch *w)
{
        return w->gone;
}

size_t watch_pending(const struct watch *w)
{
        return json_array_size(w->queue) + (w->dropped ? 1 : 0);
}

void watch_destroy(struct watch **wp)
{
        struct watch *w = *wp;

        if (!w)
                return;
        *wp = NULL;
        for (struct watch **link = &watches; *link; link = &(*link)->next) {
                if (*link == w) {
                        *link = w->next;
                        break;
                }
        }
        loop_unwatch(&w->readable);
        if (w->fd >= 0)
                close(w->fd); /* drops every watch of the instance */
        for (size_t i = 0; i < w->ndirs; i++)
                free(w->dirs[i].rel);
        total_dirs -= w->ndirs;
        free(w->dirs);
        json_decref(w->queue);
        sandbox_unref(&w->sb);
        free(w);
}
