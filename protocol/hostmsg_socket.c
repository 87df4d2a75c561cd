/* The transport of protocol/hostmsg.h: one datagram per message on a
 * SOCK_SEQPACKET socket, its header, the descriptors that travel with it
 * (SCM_RIGHTS), and a body too large for the datagram sent in a sealed
 * memfd instead. */
#include "autoconf.h"

#include "protocol/hostmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

struct hostmsg_header {
        uint32_t type;
        uint32_t length; /* of the body; with HOSTMSG_IN_MEMFD, the body is in a memfd */
};

/* The length's top bit: the body travels in a memfd, the datagram's first
 * descriptor, and the datagram is the header alone. */
#define HOSTMSG_IN_MEMFD 0x80000000u
/* What a body's memfd must be sealed with: nothing can change its size or
 * bytes after the receiver checked them. */
#define BODY_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* A sealed memfd holding len bytes of text: the fd, or -errno. */
static int body_memfd(const char *text, size_t len)
{
        int fd = memfd_create("glovebox-hostmsg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        size_t done = 0;
        int rc;

        if (fd < 0)
                return -errno;
        while (done < len) {
                ssize_t n = write(fd, text + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        rc = n < 0 ? -errno : -EIO;
                        goto fail;
                }
                done += (size_t)n;
        }
        if (fcntl(fd, F_ADD_SEALS, BODY_SEALS) < 0) {
                rc = -errno;
                goto fail;
        }
        return fd;
fail:
        close(fd);
        return rc;
}

int hostmsg_send(int fd, enum hostmsg_type type, json_t *body, const int *fds, size_t nfds)
{
        struct hostmsg_header h = {.type = (uint32_t)type};
        union {
                char buf[CMSG_SPACE(sizeof(int) * (HOSTMSG_MAX_FDS + 1))];
                struct cmsghdr align;
        } control;
        int all[HOSTMSG_MAX_FDS + 1];
        size_t nall = 0, len;
        struct iovec iov[2];
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        int body_fd = -1;
        char *text;
        ssize_t n;
        int rc = 0;

        if (nfds > HOSTMSG_MAX_FDS)
                return -EINVAL;
        text = json_dumps(body, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        len = strlen(text);
        if (len > HOSTMSG_MAX_BODY) {
                rc = -EMSGSIZE;
                goto out;
        }
        h.length = (uint32_t)len;
        iov[0] = (struct iovec){&h, sizeof(h)};
        iov[1] = (struct iovec){text, len};
        if (len > HOSTMSG_MAX_INLINE) {
                body_fd = body_memfd(text, len);
                if (body_fd < 0) {
                        rc = body_fd;
                        goto out;
                }
                h.length |= HOSTMSG_IN_MEMFD;
                mh.msg_iovlen = 1;
                all[nall++] = body_fd;
        }
        for (size_t i = 0; i < nfds; i++)
                all[nall++] = fds[i];
        if (nall) {
                struct cmsghdr *c;

                memset(&control, 0, sizeof(control));
                mh.msg_control = control.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nall);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nall);
                memcpy(CMSG_DATA(c), all, sizeof(int) * nall);
        }
        do {
                n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
                rc = -errno;
out:
        if (body_fd >= 0)
                close(body_fd);
        free(text);
        return rc;
}

/* Takes the descriptors out of a received message into got (room for
 * HOSTMSG_MAX_FDS + 1: a body's memfd and a message's own), closing any
 * past that. False when more came than fit: the message must be refused
 * rather than acted on without them. */
static bool take_fds(struct msghdr *mh, int *got, size_t *ngot)
{
        size_t seen = 0;

        *ngot = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                size_t n;

                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                        int one;

                        memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        seen++;
                        if (*ngot < HOSTMSG_MAX_FDS + 1)
                                got[(*ngot)++] = one;
                        else
                                close(one);
                }
        }
        return seen <= HOSTMSG_MAX_FDS + 1;
}

/* Reads a body of len bytes from a memfd the peer sealed: the text (caller
 * frees), or NULL when fd is not such a memfd or holds anything else than
 * len bytes. The seals are what make the checks hold while it is read:
 * only a shmem file has them, and a sealed one cannot change. */
static char *read_body_memfd(int fd, size_t len)
{
        struct stat st;
        int seals = fcntl(fd, F_GET_SEALS);
        char *text;
        size_t done = 0;

        if (seals < 0 || (seals & BODY_SEALS) != BODY_SEALS || fstat(fd, &st) < 0 ||
            !S_ISREG(st.st_mode) || st.st_size < 0 || (size_t)st.st_size != len)
                return NULL;
        text = malloc(len ? len : 1);
        while (text && done < len) {
                ssize_t n = pread(fd, text + done, len - done, (off_t)done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        free(text);
                        return NULL;
                }
                done += (size_t)n;
        }
        return text;
}

int hostmsg_recv(int fd, enum hostmsg_type *type, json_t **body, int *fds, size_t *nfds)
{
        static char data[sizeof(struct hostmsg_header) + HOSTMSG_MAX_INLINE];
        union {
                char buf[CMSG_SPACE(sizeof(int) * (HOSTMSG_MAX_FDS + 1))];
                struct cmsghdr align;
        } control;
        struct iovec iov = {data, sizeof(data)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                            .msg_controllen = sizeof(control.buf)};
        int got[HOSTMSG_MAX_FDS + 1];
        size_t ngot = 0, first = 0, len;
        struct hostmsg_header h;
        char *text = NULL;
        int rc = -EBADMSG;
        bool fit;
        ssize_t n;

        *body = NULL;
        if (nfds)
                *nfds = 0;
        do {
                /* MSG_TRUNC reports the real size of an oversized datagram. */
                n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        fit = take_fds(&mh, got, &ngot);
        /* An empty datagram reads as the peer's end: a caller tearing down
         * would never close what came with it. */
        if (n == 0) {
                rc = -EPIPE;
                goto bad;
        }
        if (!fit || (size_t)n < sizeof(h) || (size_t)n > sizeof(data) ||
            (mh.msg_flags & MSG_CTRUNC))
                goto bad;
        memcpy(&h, data, sizeof(h));
        len = h.length & ~HOSTMSG_IN_MEMFD;
        if (h.length & HOSTMSG_IN_MEMFD) {
                /* The header alone, the body in the first descriptor. */
                if ((size_t)n != sizeof(h) || len > HOSTMSG_MAX_BODY || ngot == 0)
                        goto bad;
                text = read_body_memfd(got[0], len);
                close(got[0]);
                first = 1;
                if (!text)
                        goto bad;
                *body = json_loadb(text, len, 0, NULL);
                free(text);
        } else {
                if (len != (size_t)n - sizeof(h) || ngot > HOSTMSG_MAX_FDS)
                        goto bad;
                *body = json_loadb(data + sizeof(h), len, 0, NULL);
        }
        if (!json_is_object(*body))
                goto bad;
        for (size_t i = first; i < ngot; i++) {
                if (fds)
                        fds[i - first] = got[i];
                else
                        close(got[i]);
        }
        if (nfds && fds)
                *nfds = ngot - first;
        *type = (enum hostmsg_type)h.type;
        return 0;
bad:
        json_decref(*body);
        *body = NULL;
        for (size_t i = first; i < ngot; i++)
                close(got[i]);
        return rc;
}
