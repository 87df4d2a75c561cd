#include "autoconf.h"

#include "kernel-host/volumes.h"
#include "kernel-host/loopfs.h"
#include "kernel-host/rootfs.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Volumes open at once (a loop device each, kept while the kernel-host
 * lives: letting one go while a sandbox still mounts it would put the
 * next mount on a second device). */
#define MAX_OPEN_VOLUMES 256

struct volume {
        char id[JP_UUID_SIZE];
        int loop_fd;
        int mount_fd; /* the kernel-host's own mount: the gateway's root comes from it */
        char device[32];
};

static int dir_fd = -1;
static struct volume open_volumes[MAX_OPEN_VOLUMES];

int volumes_init(const char *dir)
{
        for (size_t i = 0; i < MAX_OPEN_VOLUMES; i++)
                open_volumes[i].loop_fd = open_volumes[i].mount_fd = -1;
        dir_fd = loopfs_images_dir(dir, "volumes");
        return dir_fd < 0 ? dir_fd : 0;
}

bool volumes_enabled(void)
{
        return dir_fd >= 0;
}

static struct volume *find(const char *id)
{
        for (size_t i = 0; i < MAX_OPEN_VOLUMES; i++) {
                if (open_volumes[i].id[0] && strcmp(open_volumes[i].id, id) == 0)
                        return &open_volumes[i];
        }
        return NULL;
}

static struct volume *free_slot(void)
{
        for (size_t i = 0; i < MAX_OPEN_VOLUMES; i++) {
                if (!open_volumes[i].id[0])
                        return &open_volumes[i];
        }
        return NULL;
}

static void forget(struct volume *v)
{
        if (v->mount_fd >= 0)
                close(v->mount_fd);
        if (v->loop_fd >= 0)
                close(v->loop_fd);
        memset(v, 0, sizeof(*v));
        v->loop_fd = v->mount_fd = -1;
}

/* A new volume's root: owned by "user" (on the image: every sandbox maps
 * it to its own), without lost+found. Through the kernel-host's own mount,
 * before any sandbox has it. */
static int prepare_root(int mount_fd)
{
        int root = openat(mount_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int rc = 0;

        if (root < 0)
                return -errno;
        if (unlinkat(root, "lost+found", AT_REMOVEDIR) < 0 && errno != ENOENT)
                rc = -errno;
        if (rc == 0 &&
            (fchown(root, ROOTFS_USER_UID, ROOTFS_USER_UID) < 0 || fchmod(root, 0755) < 0))
                rc = -errno;
        if (rc == 0 && syncfs(root) < 0)
                rc = -errno;
        close(root);
        return rc;
}

static int open_image(const char *id, uint64_t size_mb, struct volume *v, const char **step)
{
        char name[JP_UUID_SIZE + 8];
        bool made = false;
        int image, rc = 0;

        snprintf(name, sizeof(name), "%s.img", id);
        *step = "volume image";
        if (size_mb) {
                image =
                    openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                made = image >= 0;
        } else {
                image = openat(dir_fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        }
        if (image < 0)
                return -errno;
        /* Sparse: the host pays for what is written, at most this. */
        if (made && ftruncate(image, (off_t)(size_mb << 20)) < 0)
                rc = -errno;
        if (rc == 0 && made) {
                *step = "volume mkfs";
                rc = loopfs_format(image, "volume", true);
        }
        if (rc == 0) {
                *step = "volume loop device";
                /* One device per image, ever: a mount that outlived the
                 * kernel-host that attached it keeps its device. */
                if (made || loopfs_find(image, v->device, sizeof(v->device)) < 0)
                        rc = loopfs_attach(image, false, &v->loop_fd, v->device, sizeof(v->device));
                else if ((v->loop_fd = open(v->device, O_RDWR | O_CLOEXEC)) < 0)
                        rc = -errno;
        }
        if (rc == 0) {
                *step = "volume mount";
                rc = loopfs_mount(v->device, false, &v->mount_fd);
        }
        if (rc == 0 && made) {
                *step = "volume root";
                rc = prepare_root(v->mount_fd);
        }
        close(image);
        if (rc < 0 && made)
                unlinkat(dir_fd, name, 0);
        return rc;
}

int volumes_open(const char *id, uint64_t size_mb, int *root_fd, const char **step)
{
        struct volume *v;
        int rc;

        *root_fd = -1;
        *step = "volumes";
        if (dir_fd < 0)
                return -ENODEV;
        if (!jp_uuid_valid(id, strlen(id)))
                return -EINVAL;
        v = find(id);
        if (v && size_mb)
                return -EEXIST;
        if (!v) {
                v = free_slot();
                if (!v)
                        return -EMFILE;
                rc = open_image(id, size_mb, v, step);
                if (rc < 0) {
                        forget(v);
                        return rc;
                }
                snprintf(v->id, sizeof(v->id), "%s", id);
        }
        *step = "volume root";
        *root_fd = openat(v->mount_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        return *root_fd < 0 ? -errno : 0;
}

int volumes_mount(const char *id, int *mount_fd)
{
        const char *step;
        struct volume *v;
        int root, rc;

        *mount_fd = -1;
        v = find(id);
        if (!v) {
                rc = volumes_open(id, 0, &root, &step);
                if (rc < 0)
                        return rc;
                close(root);
                v = find(id);
        }
        return v ? loopfs_mount(v->device, false, mount_fd) : -ENOENT;
}

void volumes_delete(const char *id)
{
        char name[JP_UUID_SIZE + 8];
        struct volume *v;

        if (dir_fd < 0 || !jp_uuid_valid(id, strlen(id)))
                return;
        v = find(id);
        if (v)
                forget(v);
        snprintf(name, sizeof(name), "%s.img", id);
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
                log_warn("volume %.8s: cannot remove its image: %s", id, strerror(errno));
}
