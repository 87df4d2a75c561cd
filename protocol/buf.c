#include "autoconf.h"

#include "protocol/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void buf_init(struct buf *b, size_t max)
{
        b->data = NULL;
        b->len = 0;
        b->cap = 0;
        b->max = max;
}

int buf_reserve(struct buf *b, size_t extra)
{
        size_t need, cap;
        char *p;

        if (extra > b->max || b->len > b->max - extra)
                return -E2BIG;
        need = b->len + extra + 1;
        if (need <= b->cap)
                return 0;
        cap = b->cap ? b->cap : 256;
        while (cap < need)
                cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        p = realloc(b->data, cap);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->cap = cap;
        return 0;
}

int buf_grow(struct buf *b, size_t len, char **out)
{
        int rc = buf_reserve(b, len);

        if (rc < 0)
                return rc;
        *out = b->data + b->len;
        b->len += len;
        b->data[b->len] = '\0';
        return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
        char *dst;
        int rc = buf_grow(b, len, &dst);

        if (rc < 0)
                return rc;
        if (len)
                memcpy(dst, data, len);
        return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
        return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
        va_list ap;
        int n;
        int rc;

        va_start(ap, fmt);
        n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -EINVAL;
        rc = buf_reserve(b, (size_t)n);
        if (rc < 0)
                return rc;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
        b->len += (size_t)n;
        return 0;
}

int buf_append_json_string(struct buf *b, const char *s, size_t len)
{
        static const char hex[] = "0123456789abcdef";
        size_t run = 0;
        int rc = buf_append(b, "\"", 1);

        for (size_t i = 0; rc == 0 && i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                char esc[6] = {'\\', (char)c, '0', '0', hex[c >> 4], hex[c & 15]};

                if (c != '"' && c != '\\' && c >= 0x20)
                        continue;
                /* Copy the run of plain bytes before this one in one go. */
                rc = buf_append(b, s + run, i - run);
                run = i + 1;
                if (rc == 0 && c < 0x20) {
                        esc[1] = 'u';
                        rc = buf_append(b, esc, 6);
                } else if (rc == 0) {
                        rc = buf_append(b, esc, 2);
                }
        }
        if (rc == 0)
                rc = buf_append(b, s + run, len - run);
        if (rc == 0)
                rc = buf_append(b, "\"", 1);
        return rc;
}

void buf_reset(struct buf *b)
{
        b->len = 0;
        if (b->data)
                b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
        free(b->data);
        b->data = NULL;
        b->len = 0;
        b->cap = 0;
}

char *buf_steal(struct buf *b, size_t *len)
{
        char *p = b->data;

        if (len)
                *len = b->len;
        b->data = NULL;
        b->len = 0;
        b->cap = 0;
        return p;
}

ssize_t read_small_file(const char *path, char *out, size_t size)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = read(fd, out, size - 1);
        close(fd);
        if (n < 0)
                return -errno;
        out[n] = '\0';
        return n;
}

int buf_read_fd(struct buf *b, int fd)
{
        for (;;) {
                size_t room = b->max - b->len < (1 << 16) ? b->max - b->len : (1 << 16);
                char extra;
                ssize_t n;
                int rc;

                /* Full to its maximum: one more byte says it is longer. */
                if (room == 0) {
                        do
                                n = read(fd, &extra, 1);
                        while (n < 0 && errno == EINTR);
                        return n == 0 ? 0 : n > 0 ? -E2BIG : -errno;
                }
                rc = buf_reserve(b, room);
                if (rc < 0)
                        return rc;
                n = read(fd, b->data + b->len, room);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;
                b->len += (size_t)n;
                b->data[b->len] = '\0';
        }
}

json_t *json_read_fd(int fd, size_t max, size_t flags, json_error_t *err)
{
        struct buf b;
        json_t *doc = NULL;
        int rc;

        buf_init(&b, max);
        rc = buf_read_fd(&b, fd);
        if (rc == 0) {
                doc = json_loadb(b.data ? b.data : "", b.len, flags, err);
        } else if (err) {
                memset(err, 0, sizeof(*err));
                snprintf(err->text, sizeof(err->text), "%s",
                         rc == -E2BIG ? "longer than its limit" : strerror(-rc));
        }
        buf_free(&b);
        return doc;
}

int buf_append_base64(struct buf *out, const uint8_t *data, size_t len)
{
        static const char table[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char quad[4];

        for (size_t i = 0; i < len; i += 3) {
                uint32_t v = (uint32_t)data[i] << 16;

                if (i + 1 < len)
                        v |= (uint32_t)data[i + 1] << 8;
                if (i + 2 < len)
                        v |= data[i + 2];
                quad[0] = table[(v >> 18) & 63];
                quad[1] = table[(v >> 12) & 63];
                quad[2] = i + 1 < len ? table[(v >> 6) & 63] : '=';
                quad[3] = i + 2 < len ? table[v & 63] : '=';
                if (buf_append(out, quad, 4) < 0)
                        return -E2BIG;
        }
        return 0;
}

int buf_append_unbase64(struct buf *out, const char *in)
{
        uint32_t acc = 0;
        int bits = 0;

        for (const char *p = in; *p && *p != '='; p++) {
                const char *alpha =
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                const char *at = strchr(alpha, *p);
                int v;

                if (at && *p)
                        v = (int)(at - alpha);
                else if (*p == '+' || *p == '-')
                        v = 62;
                else if (*p == '/' || *p == '_')
                        v = 63;
                else
                        return -EINVAL;
                acc = (acc << 6) | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        char byte = (char)(acc >> (bits - 8));

                        bits -= 8;
                        if (buf_append(out, &byte, 1) < 0)
                                return -E2BIG;
                }
        }
        return 0;
}

int program_beside_self(const char *name, char *out, size_t size)
{
        return file_beside_self(name, X_OK, out, size);
}

int file_beside_self(const char *name, int mode, char *out, size_t size)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        char *slash;

        if (n <= 0)
                return -ENOENT;
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (!slash)
                return -ENOENT;
        *slash = '\0';
        if ((size_t)snprintf(out, size, "%s/%s", self, name) >= size || access(out, mode) < 0)
                return -ENOENT;
        return 0;
}

bool program_in_build_tree(void)
{
        char self[PATH_MAX], build[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        char *slash;

        if (n <= 0 || !realpath(GLOVEBOX_BUILDDIR, build))
                return false;
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash)
                *slash = '\0';
        return strcmp(self, build) == 0;
}
