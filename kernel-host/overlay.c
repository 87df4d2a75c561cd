#include "autoconf.h"

#include "kernel-host/overlay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int overlay_lower_open(const char *tree, pid_t sandbox_pid, int *fd_out, bool *idmapped)
{
        struct mount_attr attr = {
            .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        };
        char path[64];
        int fd, userns = -1, rc;

        *fd_out = -1;
        *idmapped = false;
        /* A clone, detached: it is attached nowhere in the host's tree, and
         * its flags are ours to set, whatever the tree's own mount has.
         * Not recursive: what is mounted inside the tree (a /proc or /sys
         * left from a chroot) stays out, as overlayfs leaves it out of a
         * layer given by its path. */
        fd = open_tree(AT_FDCWD, tree, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (fd < 0)
                return -errno;
        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sandbox_pid);
        userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0) {
                rc = -errno;
                goto fail;
        }
        attr.attr_set |= MOUNT_ATTR_IDMAP;
        attr.userns_fd = (__u64)userns;
        if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) == 0) {
                *idmapped = true;
        } else if (errno == EINVAL || errno == EPERM || errno == EOPNOTSUPP) {
                /* A filesystem without idmapped mounts (or a tree holding
                 * such a mount): read-only all the same. */
                attr.attr_set &= ~(__u64)MOUNT_ATTR_IDMAP;
                attr.userns_fd = 0;
                if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
                        rc = -errno;
                        goto fail;
                }
        } else {
                rc = -errno;
                goto fail;
        }
        close(userns);
        *fd_out = fd;
        return 0;
fail:
        if (userns >= 0)
                close(userns);
        close(fd);
        return rc;
}

int overlay_send_go(int sock, int fd)
{
        char cbuf[CMSG_SPACE(sizeof(int))];
        char go = 'g';
        struct iovec iov = {&go, 1};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *cmsg;
        ssize_t n;

        if (fd >= 0) {
                memset(cbuf, 0, sizeof(cbuf));
                msg.msg_control = cbuf;
                msg.msg_controllen = sizeof(cbuf);
                cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
        }
        do {
                n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n == 1 ? 0 : n < 0 ? -errno : -EIO;
}

int overlay_recv_go(int sock, int *fd)
{
        char cbuf[CMSG_SPACE(sizeof(int))];
        char go;
        struct iovec iov = {&go, 1};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *cmsg;
        ssize_t n;

        *fd = -1;
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof(cbuf);
        do {
                n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        } while (n < 0 && errno == EINTR);
        if (n != 1)
                return -1;
        for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
                if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS &&
                    cmsg->cmsg_len == CMSG_LEN(sizeof(int)))
                        memcpy(fd, CMSG_DATA(cmsg), sizeof(int));
        }
        return 0;
}
