/* Volumes: named filesystems that outlive sandboxes and are shared by
 * them (E2B's Volume, a kernel's "volumes" on POST /api/kernels). Each
 * belongs to a tenant (the key that made it), has a size that is its
 * quota (an ext4 image, kernel-host/volumes.h), and a token of its own
 * for E2B's content API. A tenant's volumes together take at most
 * --volume-quota-mb; each is --volume-size-mb.
 *
 * The records are STATE_DIR/volumes/<id>.json (durable writes,
 * pause.h's state_write_file); the images STATE_DIR/volumes/images,
 * the kernel-host's. Needs a gateway run as root with sandboxes and a
 * state directory: else volumes_disabled() says why. */
#ifndef GLOVEBOX_VOLUMES_H
#define GLOVEBOX_VOLUMES_H

#include "gateway/core/config.h"
#include "protocol/ids.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define VOLUME_NAME_MAX  64 /* a name: [A-Za-z0-9._-], 1 to 63 characters */
#define VOLUME_TOKEN_LEN 48 /* "vol_" and 44 hex digits */
#define VOLUME_OWNER_MAX 128

struct volume_waiter;

struct volume {
        struct volume *next;
        char id[JP_UUID_SIZE];
        char name[VOLUME_NAME_MAX];
        char owner[VOLUME_OWNER_MAX];
        char token[VOLUME_TOKEN_LEN + 1];
        uint64_t size_mb;
        time_t created;
        int root_fd; /* its root directory (O_PATH), -1 until opened */
        bool opening;
        char request[JP_UUID_SIZE]; /* the kernel-host request while opening */
        struct volume_waiter *waiters;
};

/* done(w, 0, root_fd) with the volume's root (borrowed: the volume keeps
 * it), or done(w, -errno, -1). */
struct volume_waiter {
        struct volume_waiter *next;
        struct volume *volume;
        void (*done)(struct volume_waiter *w, int error, int root_fd);
};

int volumes_init(const struct config *cfg);
/* Asks the kernel-host for every volume's root, so that the content API
 * finds them open (after host_attach). */
void volumes_open_all(void);
void volumes_free(void);
/* NULL when volumes work here, else why not. */
const char *volumes_disabled(void);

/* Whether name is a volume name (see VOLUME_NAME_MAX). */
bool volume_name_valid(const char *name);
/* A new volume of the caller's tenant (tenants_owner_now), made on disk
 * before w->done hears it (w->volume is it then). -EEXIST: the tenant
 * has one of that name; -EDQUOT: past its quota; -EINVAL: a bad name;
 * -ENODEV: volumes are off. */
int volume_create(const char *name, struct volume_waiter *w);
struct volume *volume_by_id(const char *id);
/* The caller's tenant's volume of that name, or NULL. */
struct volume *volume_by_name(const char *name);
/* Whether the caller's tenant may see v. */
bool volume_visible(const struct volume *v);
/* The caller's tenant's volumes, oldest first: fn for each. */
void volume_each(void (*fn)(struct volume *v, void *ctx), void *ctx);
/* Whether token is v's (in constant time). */
bool volume_token_matches(const struct volume *v, const char *token);
/* Forgets v and removes its image; sandboxes that mount it keep what they
 * see until they end. Waiters hear -ENOENT. */
void volume_destroy(struct volume *v);
/* w->done hears v's root directory (now, when it is open). */
void volume_root(struct volume *v, struct volume_waiter *w);
void volume_waiter_cancel(struct volume_waiter *w);
/* Adds the mount of the caller's volume which (its name, or its id) at
 * path to *list (*n entries, "UUID:/path" for the kernel-host's sandbox
 * request, NULL-terminated; the caller frees it with jp_strv_free).
 * -EINVAL with why in err (a bad path, no such volume, two at one path,
 * more than HOSTMSG_MAX_VOLUMES, volumes off). */
int volume_mounts_add(char ***list, size_t *n, const char *path, const char *which, char *err,
                      size_t errlen);

#endif
