/* A streaming multipart/form-data parser: parts are delivered as bytes
 * arrive, never buffered whole, so uploads of any size pass through a
 * fixed amount of memory. */
#ifndef GLOVEBOX_MULTIPART_H
#define GLOVEBOX_MULTIPART_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MULTIPART_MAX_BOUNDARY 70   /* RFC 2046 */
#define MULTIPART_MAX_HEADERS  8192 /* a part's header block */

struct multipart_handler {
        /* A part begins; name and filename ("" when absent) are NUL-terminated. */
        int (*begin)(void *arg, const char *name, const char *filename);
        int (*data)(void *arg, const uint8_t *data, size_t len);
        int (*end)(void *arg);
};

struct multipart {
        const struct multipart_handler *handler;
        void *arg;
        char delimiter[MULTIPART_MAX_BOUNDARY + 5]; /* "\r\n--" boundary */
        size_t dlen;
        size_t match; /* delimiter bytes matched and held back */
        int state;
        char headers[MULTIPART_MAX_HEADERS];
        size_t hlen;
        bool done;
};

/* Reads the boundary from a Content-Type value; -EINVAL when it is not
 * multipart/form-data with a valid boundary. */
int multipart_init(struct multipart *m, const char *content_type,
                   const struct multipart_handler *handler, void *arg);
/* Parses len bytes; 0, -EBADMSG for a malformed body, -ENAMETOOLONG for a
 * part whose name or filename does not fit (256 bytes, PATH_MAX), or a
 * handler's negative return. */
int multipart_feed(struct multipart *m, const uint8_t *in, size_t len);

#endif
