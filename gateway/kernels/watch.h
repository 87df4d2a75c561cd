/* Directory watches inside a sandbox, on inotify, for E2B's envd (WatchDir
 * and the polling watchers). A watch opens its directory inside the
 * sandbox as the user it acts for and watches it through that descriptor
 * (gateway/kernels/files.h), never a path the gateway resolves itself; a recursive
 * watch adds each subdirectory as it appears. Everything is bounded by the
 * configuration: watchers per gateway, per tenant and per sandbox (each is
 * an inotify instance of the gateway's user), watched directories per
 * gateway, per tenant and per sandbox, and the events a watcher holds for
 * its client. The tenant's bounds keep one tenant's many sandboxes from
 * taking the whole gateway's. What does not fit
 * is reported in-band, as an event of type EVENT_TYPE_UNSPECIFIED whose
 * name is the notice (the SDKs skip events of a type they do not know). */
#ifndef GLOVEBOX_WATCH_H
#define GLOVEBOX_WATCH_H

#include "gateway/kernels/files.h"
#include "gateway/kernels/sandboxes.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct watch;

/* Called when events were queued; arg is watch_new's. */
typedef void (*watch_notify_fn)(void *arg);

/* Watches the directory path (normalized, absolute inside the sandbox) of
 * sb as who, counted against tenant (sb's owner; copied); recursive: its subdirectories too;
 * with_entry: each event of a path that is still there (create, write, chmod) carries its EntryInfo
 * (files_stat's, taken as the event is read), as E2B's includeEntry.
 * The watch holds a
 * reference to sb. 0, or -errno with the reason in err: -ENOENT,
 * -ENOTDIR, -EACCES, -ENOSPC (a limit; err names it). The caller owns *out
 * and ends it with watch_destroy. */
int watch_new(struct sandbox *sb, const char *tenant, enum files_user who, const char *path,
              bool recursive, bool with_entry, watch_notify_fn notify, void *arg,
              struct watch **out, char *err, size_t errlen);
/* Moves up to max queued events, oldest first, into the array out as E2B's
 * FilesystemEvent ({"name": relative to the watched directory, "type":
 * "EVENT_TYPE_CREATE"..., "entry"?}). Returns how many. */
size_t watch_take(struct watch *w, json_t *out, size_t max);
/* Events waiting to be taken. */
size_t watch_pending(const struct watch *w);
/* Whether the watched directory itself is gone (removed, or its
 * filesystem unmounted as its sandbox ended): nothing more will come. */
bool watch_gone(const struct watch *w);
/* Stops watching and frees the watch; nulls *w. */
void watch_destroy(struct watch **w);

/* Watchers and watched directories now, in the whole gateway (for tests
 * and metrics). */
size_t watch_count(void);
size_t watch_dirs(void);

#endif
