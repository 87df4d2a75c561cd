#include "autoconf.h"

#include "kernel-host/layers.h"
#include "kernel-host/loopfs.h"
#include "protocol/fleetid.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Layers kept open at once (a loop device each); past it the least
 * recently used one is let go (its mounts keep it while they last). */
#define MAX_OPEN_LAYERS 128

struct layer {
        char id[JP_UUID_SIZE];
        int rw_fd;   /* a build's layer, until sealed: its read-write mount */
        int loop_fd; /* a sealed layer's read-only loop device, kept for the next mount */
        char device[32];
        unsigned long long used; /* for eviction */
};

static int dir_fd = -1;
static struct layer open_layers[MAX_OPEN_LAYERS];
static unsigned long long clock_now;

int layers_init(const char *dir)
{
        for (size_t i = 0; i < MAX_OPEN_LAYERS; i++)
                open_layers[i].rw_fd = open_layers[i].loop_fd = -1;
        dir_fd = loopfs_images_dir(dir, "template builds");
        return dir_fd < 0 ? dir_fd : 0;
}

bool layers_enabled(void)
{
        return dir_fd >= 0;
}

static void image_name(const char *id, char *out, size_t size)
{
        snprintf(out, size, "%s.img", id);
}

static struct layer *find(const char *id)
{
        for (size_t i = 0; i < MAX_OPEN_LAYERS; i++) {
                if (open_layers[i].id[0] && strcmp(open_layers[i].id, id) == 0) {
                        open_layers[i].used = ++clock_now;
                        return &open_layers[i];
                }
        }
        return NULL;
}

static void forget(struct layer *l)
{
        if (l->rw_fd >= 0)
                close(l->rw_fd);
        if (l->loop_fd >= 0)
                close(l->loop_fd);
        memset(l, 0, sizeof(*l));
        l->rw_fd = l->loop_fd = -1;
}

/* A free slot, letting go of the least recently used sealed layer when
 * every slot is taken (a build's is never let go: it is still written). */
static struct layer *slot_for(const char *id)
{
        struct layer *oldest = NULL;

        for (size_t i = 0; i < MAX_OPEN_LAYERS; i++) {
                struct layer *l = &open_layers[i];

                if (!l->id[0]) {
                        oldest = l;
                        break;
                }
                if (l->rw_fd < 0 && (!oldest || l->used < oldest->used))
                        oldest = l;
        }
        if (!oldest)
                return NULL;
        forget(oldest);
        snprintf(oldest->id, sizeof(oldest->id), "%s", id);
        oldest->used = ++clock_now;
        return oldest;
}

/* The layer's directories, made through its mount before any sandbox
 * sees it (so owned by its uid 0: the sandbox's root once idmapped). */
static int make_dirs(int mount_fd)
{
        static const char *const dirs[] = {LAYERS_ROOT, LAYERS_USR, LAYERS_ROOT_WORK,
                                           LAYERS_USR_WORK};
        int root = openat(mount_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int rc = 0;

        if (root < 0)
                return -errno;
        if (unlinkat(root, "lost+found", AT_REMOVEDIR) < 0 && errno != ENOENT)
                rc = -errno;
        for (size_t i = 0; rc == 0 && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                if (mkdirat(root, dirs[i], 0755) < 0)
                        rc = -errno;
        }
        close(root);
        return rc;
}

int layers_create(const char *id, unsigned long long size_mb, int *mount_fd, const char **step)
{
        char name[JP_UUID_SIZE + 8], device[32];
        int image = -1, loop = -1, mnt = -1, rc;
        struct layer *l = NULL;

        *mount_fd = -1;
        *step = "layer image";
        if (dir_fd < 0)
                return -ENODEV;
        if (!jp_uuid_valid(id, strlen(id)) || find(id))
                return -EINVAL;
        image_name(id, name, sizeof(name));
        image = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (image < 0)
                return -errno;
        /* Sparse: the host pays for what the build writes, at most this. */
        if (ftruncate(image, (off_t)(size_mb << 20)) < 0) {
                rc = -errno;
                goto out;
        }
        *step = "layer mkfs";
        rc = loopfs_format(image, "layer", false);
        if (rc < 0)
                goto out;
        *step = "layer loop device";
        rc = loopfs_attach(image, false, &loop, device, sizeof(device));
        if (rc < 0)
                goto out;
        *step = "layer mount";
        rc = loopfs_mount(device, false, &mnt);
        if (rc == 0)
                rc = make_dirs(mnt);
        if (rc < 0)
                goto out;
        *step = "layer slot";
        l = slot_for(id);
        if (!l) {
                rc = -EMFILE;
                goto out;
        }
        l->rw_fd = fcntl(mnt, F_DUPFD_CLOEXEC, 3);
        if (l->rw_fd < 0) {
                rc = -errno;
                goto out;
        }
        *mount_fd = mnt;
        mnt = -1;
out:
        if (rc < 0 && l)
                forget(l);
        if (mnt >= 0)
                close(mnt);
        /* The mount holds the device now, the device the image. */
        if (loop >= 0)
                close(loop);
        close(image);
        if (rc < 0)
                unlinkat(dir_fd, name, 0);
        return rc;
}

int layers_seal(const char *id)
{
        struct layer *l = find(id);
        int fs, root, rc = 0;

        if (!l || l->rw_fd < 0)
                return -ENOENT;
        /* Read-only from now on, whoever still holds it: reconfiguring the
         * filesystem (not a mount) writes everything back first. (The
         * mount's descriptor is O_PATH: syncfs needs a real one.) */
        root = openat(l->rw_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0 || syncfs(root) < 0)
                rc = -errno;
        if (root >= 0)
                close(root);
        fs = rc == 0 ? fspick(l->rw_fd, "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC) : -1;
        if (rc == 0 && fs < 0)
                rc = -errno;
        if (rc == 0 && (fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
                        fsconfig(fs, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0) < 0))
                rc = -errno;
        if (fs >= 0)
                close(fs);
        if (rc < 0) {
                log_warn("layer %s: cannot seal it: %s", fleetid_short(id).s, strerror(-rc));
                layers_delete(id);
                return rc;
        }
        /* Mounted again read-only, from a read-only device, when used. */
        forget(l);
        return 0;
}

int layers_mount(const char *id, int *mount_fd)
{
        char name[JP_UUID_SIZE + 8];
        struct layer *l;
        int image, rc;

        *mount_fd = -1;
        if (dir_fd < 0)
                return -ENODEV;
        if (!jp_uuid_valid(id, strlen(id)))
                return -EINVAL;
        l = find(id);
        if (l && l->rw_fd >= 0)
                return -EBUSY; /* still being built */
        if (!l) {
                image_name(id, name, sizeof(name));
                image = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (image < 0)
                        return -errno;
                l = slot_for(id);
                rc = l ? loopfs_attach(image, true, &l->loop_fd, l->device, sizeof(l->device))
                       : -EMFILE;
                close(image);
                if (rc < 0) {
                        if (l)
                                forget(l);
                        return rc;
                }
        }
        return loopfs_mount(l->device, true, mount_fd);
}

void layers_delete(const char *id)
{
        char name[JP_UUID_SIZE + 8];
        struct layer *l;

        if (dir_fd < 0 || !jp_uuid_valid(id, strlen(id)))
                return;
        l = find(id);
        if (l)
                forget(l);
        image_name(id, name, sizeof(name));
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
                log_warn("layer %s: cannot remove its image: %s", fleetid_short(id).s,
                         strerror(errno));
}
