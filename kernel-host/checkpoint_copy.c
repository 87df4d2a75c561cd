/* A copy of a checkpointed sandbox beside the one it was taken from (a
 * fork): the same images and files under host ids of its own. CRIU keeps
 * every process's credentials as its user namespace sees them, so only two
 * things name host ids: the namespace's maps (userns-*.img, rewritten into
 * the copy's own image directory, where every other image is a hard link
 * to the checkpoint's), and the owners of the files in its top (files.tar
 * keeps host ids, shifted after it is unpacked, before anything of the
 * sandbox runs there).
 *
 * The copy's image directory is also what a restore of a checkpoint whose
 * pages are compressed reads (checkpoint_pages.c): the same links under
 * the same ids, and the pages decompressed there.
 *
 * Hard links, not symbolic ones: a symbolic link is an inode of its own,
 * and ext4 looks for a free inode past every one deleted in the last
 * minute or so, which a fork's copies had just deleted by the hundred
 * (their image directories, the checkpoints before): the 40 symbolic
 * links of a Python kernel's copy cost up to 20 ms of the kernel-host,
 * one copy after another. A hard link is a name. The checkpoint's images
 * are its regular files (its manifest refuses anything else), and CRIU
 * reads them only. */
#include "autoconf.h"

#include "kernel-host/checkpoint_internal.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USERNS_MAX 4096 /* a user namespace's image: two maps of a few extents */

static const struct sandbox_ids *shift_from, *shift_to;

/* ---- protobuf, as far as UsernsEntry needs it ------------------------------------- */

static int varint_get(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
        uint64_t v = 0;

        for (int shift = 0; shift < 64 && *p < end; shift += 7) {
                uint8_t b = *(*p)++;

                v |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        *out = v;
                        return 0;
                }
        }
        return -EBADMSG;
}

static size_t varint_put(uint8_t *out, uint64_t v)
{
        size_t n = 0;

        do {
                out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
        } while (v);
        return n;
}

/* The host id a copy gets for one of the source's (uids: gid false). */
static int map_id(uint64_t id, bool gid, uint64_t *out)
{
        uint64_t setup = gid ? shift_from->setup_gid : shift_from->setup_uid;
        uint64_t user = gid ? shift_from->user_gid : shift_from->user_uid;

        if (id == setup)
                *out = gid ? shift_to->setup_gid : shift_to->setup_uid;
        else if (id == user)
                *out = gid ? shift_to->user_gid : shift_to->user_uid;
        else
                return -EBADMSG; /* not ours: the image is not what we made */
        return 0;
}

/* One UidGidExtent {first = 1, lower_first = 2, count = 3}, re-encoded
 * into out with lower_first mapped; its length, or -EBADMSG. */
static ssize_t extent_map(const uint8_t *p, const uint8_t *end, bool gid, uint8_t *out)
{
        size_t n = 0;

        while (p < end) {
                uint64_t key, v;

                if (varint_get(&p, end, &key) < 0 || (key & 7) != 0 || varint_get(&p, end, &v) < 0)
                        return -EBADMSG;
                if ((key >> 3) == 2 && map_id(v, gid, &v) < 0)
                        return -EBADMSG;
                n += varint_put(out + n, key);
                n += varint_put(out + n, v);
        }
        return (ssize_t)n;
}

/* UsernsEntry {repeated uid_map = 1, repeated gid_map = 2}, re-encoded. */
static ssize_t entry_map(const uint8_t *p, const uint8_t *end, uint8_t *out, size_t room)
{
        size_t n = 0;

        while (p < end) {
                uint8_t sub[64];
                uint64_t key, len;
                ssize_t m;

                if (varint_get(&p, end, &key) < 0 || (key & 7) != 2 ||
                    ((key >> 3) != 1 && (key >> 3) != 2) || varint_get(&p, end, &len) < 0 ||
                    len > (uint64_t)(end - p) || len > 40)
                        return -EBADMSG;
                m = extent_map(p, p + len, (key >> 3) == 2, sub);
                if (m < 0 || n + 20 + (size_t)m > room)
                        return -EBADMSG;
                p += len;
                n += varint_put(out + n, key);
                n += varint_put(out + n, (uint64_t)m);
                memcpy(out + n, sub, (size_t)m);
                n += (size_t)m;
        }
        return (ssize_t)n;
}

/* CRIU's image: two magic words, then entries of a 32-bit length and a
 * message each. */
static int userns_rewrite(int src, int dst)
{
        uint8_t in[USERNS_MAX], out[USERNS_MAX + 256];
        ssize_t len = read(src, in, sizeof(in));
        const uint8_t *p = in + 8, *end;
        size_t o = 8;

        if (len < 8 || len == (ssize_t)sizeof(in))
                return -EBADMSG;
        end = in + len;
        memcpy(out, in, 8);
        while (p < end) {
                uint32_t size, mapped;
                ssize_t m;

                if (end - p < 4)
                        return -EBADMSG;
                memcpy(&size, p, 4);
                p += 4;
                if (size > (size_t)(end - p) || o + 4 > sizeof(out))
                        return -EBADMSG;
                m = entry_map(p, p + size, out + o + 4, sizeof(out) - o - 4);
                if (m < 0)
                        return -EBADMSG;
                mapped = (uint32_t)m;
                memcpy(out + o, &mapped, 4);
                o += 4 + (size_t)m;
                p += size;
        }
        return write(dst, out, o) == (ssize_t)o ? 0 : -EIO;
}

int checkpoint_copy_images(const char *src, int dst_fd, const struct sandbox_ids *from,
                           const struct sandbox_ids *to)
{
        int src_fd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = src_fd >= 0 ? fdopendir(src_fd) : NULL;
        struct dirent *e;
        int rc = 0;

        if (!d) {
                if (src_fd >= 0)
                        close(src_fd);
                return -errno;
        }
        shift_from = from;
        shift_to = to;
        while (rc == 0 && (e = readdir(d))) {
                size_t len = strlen(e->d_name);

                if (e->d_name[0] == '.' || strncmp(e->d_name, "copy-", 5) == 0)
                        continue;
                if (strncmp(e->d_name, "userns-", 7) == 0 && len > 4 &&
                    strcmp(e->d_name + len - 4, ".img") == 0) {
                        int in = openat(src_fd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                        int out = openat(dst_fd, e->d_name,
                                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

                        rc = in < 0 || out < 0 ? -errno : userns_rewrite(in, out);
                        if (in >= 0)
                                close(in);
                        if (out >= 0)
                                close(out);
                        continue;
                }
                if (linkat(src_fd, e->d_name, dst_fd, e->d_name, 0) < 0)
                        rc = -errno;
        }
        closedir(d);
        return rc;
}

static int shift_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        uint64_t uid, gid;

        (void)type;
        (void)ftw;
        /* Anything else was never the sandbox's to make: left as it is. */
        if (map_id(st->st_uid, false, &uid) < 0)
                uid = st->st_uid;
        if (map_id(st->st_gid, true, &gid) < 0)
                gid = st->st_gid;
        if ((uid != st->st_uid || gid != st->st_gid) &&
            lchown(path, (uid_t)uid, (gid_t)gid) < 0)
                return -1;
        /* chown drops set-id bits: they come back as they were. */
        if (!S_ISLNK(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)) &&
            chmod(path, st->st_mode & 07777) < 0)
                return -1;
        return 0;
}

int checkpoint_copy_owners(const char *top, const struct sandbox_ids *from,
                           const struct sandbox_ids *to)
{
        shift_from = from;
        shift_to = to;
        return nftw(top, shift_one, 32, FTW_PHYS | FTW_MOUNT) == 0 ? 0 : -1;
}

/* ---- a restore's own image directory ------------------------------------------- */

int checkpoint_images_dir(char *dir, size_t size, const char *sandbox_id,
                          const struct sandbox_ids *from, const struct sandbox_ids *to)
{
        char images[PATH_MAX + 128];
        int fd, rc;

        snprintf(images, sizeof(images), "%s/copy-%s", dir, sandbox_id);
        /* A dead kernel-host's restore of the same sandbox left it. */
        tree_remove(images);
        if (mkdir(images, 0711) < 0)
                return -errno;
        fd = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        rc = checkpoint_copy_images(dir, fd, from, to);
        close(fd);
        if (rc == 0)
                snprintf(dir, size, "%s", images);
        return rc;
}

void checkpoint_images_dir_remove(int checkpoints_fd, const char *name, const char *sandbox_id)
{
        char path[JP_UUID_SIZE * 2 + 16];
        int fd;

        snprintf(path, sizeof(path), "%s/copy-%s", name, sandbox_id);
        fd = openat(checkpoints_fd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return;
        tree_remove_at(fd);
        close(fd);
        unlinkat(checkpoints_fd, path, AT_REMOVEDIR);
}
