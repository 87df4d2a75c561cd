#include "autoconf.h"

#include "gateway/kernels/kernel_output.h"
#include "gateway/core/loop.h"
#include "protocol/ids.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kernel_output {
        int fd;
        struct loop_watch *watch;
        char kernel_id[JP_UUID_SIZE];
        char tail[KERNEL_OUTPUT_TAIL];
        size_t len;
};

static void keep(struct kernel_output *o, const char *data, size_t n)
{
        if (n >= sizeof(o->tail)) {
                memcpy(o->tail, data + n - sizeof(o->tail), sizeof(o->tail));
                o->len = sizeof(o->tail);
                return;
        }
        if (o->len + n > sizeof(o->tail)) {
                size_t drop = o->len + n - sizeof(o->tail);

                memmove(o->tail, o->tail + drop, o->len - drop);
                o->len -= drop;
        }
        memcpy(o->tail + o->len, data, n);
        o->len += n;
}

static void stop(struct kernel_output *o)
{
        loop_unwatch(&o->watch);
        if (o->fd >= 0)
                close(o->fd);
        o->fd = -1;
}

void kernel_output_drain(struct kernel_output *o)
{
        char buf[16384];

        /* Bounded: a kernel that writes without end cannot hold the loop. */
        for (int i = 0; o && o->fd >= 0 && i < 64; i++) {
                ssize_t n = read(o->fd, buf, sizeof(buf));

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        stop(o);
                        return;
                }
                klog_debug(o->kernel_id, "kernel output: %.*s", (int)n, buf);
                keep(o, buf, (size_t)n);
        }
}

static void on_readable(void *arg)
{
        kernel_output_drain(arg);
}

int kernel_output_new(int fd, const char *kernel_id, struct kernel_output **out)
{
        struct kernel_output *o = calloc(1, sizeof(*o));
        int rc;

        *out = NULL;
        if (!o) {
                close(fd);
                return -ENOMEM;
        }
        o->fd = fd;
        snprintf(o->kernel_id, sizeof(o->kernel_id), "%s", kernel_id);
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
                rc = -errno;
                goto fail;
        }
        rc = loop_watch_fd(fd, on_readable, o, &o->watch);
        if (rc < 0)
                goto fail;
        *out = o;
        return 0;
fail:
        kernel_output_destroy(&o);
        return rc;
}

void kernel_output_tail(const struct kernel_output *o, char *out, size_t size)
{
        size_t start = 0, end, n = 0;

        if (size == 0)
                return;
        out[0] = '\0';
        if (!o || o->len == 0)
                return;
        end = o->len;
        while (end > 0 &&
               (o->tail[end - 1] == '\n' || o->tail[end - 1] == '\r' || o->tail[end - 1] == ' '))
                end--;
        /* Whole lines only, unless the kept bytes hold a single line. */
        if (o->len == sizeof(o->tail)) {
                const char *nl = memchr(o->tail, '\n', end);

                if (nl)
                        start = (size_t)(nl - o->tail) + 1;
        }
        /* The newest bytes that fit: skip from the front. */
        while (end - start > size - 1)
                start++;
        for (size_t i = start; i < end && n + 4 < size; i++) {
                unsigned char c = (unsigned char)o->tail[i];

                if (c == '\n') {
                        memcpy(out + n, " | ", 3);
                        n += 3;
                } else if (c == '\r' || c == '\t') {
                        out[n++] = ' ';
                } else {
                        /* ASCII only: a cut multi-byte character would make the
                         * JSON that carries the message invalid. */
                        out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
                }
        }
        out[n] = '\0';
}

void kernel_output_destroy(struct kernel_output **op)
{
        struct kernel_output *o = *op;

        if (!o)
                return;
        stop(o);
        free(o);
        *op = NULL;
}
