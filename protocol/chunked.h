/* A decoder for HTTP/1.1 chunked request bodies, fed as bytes arrive
 * (libwebsockets 4.1 hands them over undecoded). Chunk extensions are
 * skipped; trailers are read and dropped. */
#ifndef GLOVEBOX_CHUNKED_H
#define GLOVEBOX_CHUNKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHUNKED_MAX_LINE 256 /* a size line or trailer line, extensions included */

struct chunked {
        int state;
        uint64_t remaining; /* data bytes left in the current chunk */
        size_t line_len;    /* bytes of the current size or trailer line */
        bool done;          /* the last chunk and its trailers were read */
};

void chunked_init(struct chunked *c);
/* Decodes len bytes of in; every piece of data goes to emit(arg, data, n),
 * which may return a negative errno to stop. Returns the number of input
 * bytes consumed (less than len only once done: the rest is not body),
 * -EBADMSG for a malformed body, or emit's error. */
long chunked_feed(struct chunked *c, const uint8_t *in, size_t len,
                  int (*emit)(void *arg, const uint8_t *data, size_t n), void *arg);

#endif
