#include "autoconf.h"

#include "protocol/chunked.h"

#include <errno.h>

enum {
        SIZE,      /* hex digits of a chunk size */
        EXTENSION, /* ";..." up to the line's end */
        SIZE_LF,   /* the LF after a size line's CR */
        DATA,
        DATA_CR,   /* the CRLF after a chunk's data */
        DATA_LF,
        TRAILER,   /* trailer lines after the last chunk, up to an empty one */
        TRAILER_LF,
        DONE,
};

void chunked_init(struct chunked *c)
{
        c->state = SIZE;
        c->remaining = 0;
        c->line_len = 0;
        c->done = false;
}

static int hex_value(uint8_t ch)
{
        if (ch >= '0' && ch <= '9')
                return ch - '0';
        if (ch >= 'a' && ch <= 'f')
                return ch - 'a' + 10;
        if (ch >= 'A' && ch <= 'F')
                return ch - 'A' + 10;
        return -1;
}

/* After a size line: data follows, or, for size 0, the trailers. */
static void end_size_line(struct chunked *c)
{
        c->state = c->remaining ? DATA : TRAILER;
        c->line_len = 0;
}

long chunked_feed(struct chunked *c, const uint8_t *in, size_t len,
                  int (*emit)(void *arg, const uint8_t *data, size_t n), void *arg)
{
        size_t i = 0;

        while (i < len && c->state != DONE) {
                uint8_t ch = in[i];

                if (c->state == DATA) {
                        size_t n = len - i < c->remaining ? len - i : (size_t)c->remaining;
                        int rc = emit(arg, in + i, n);

                        if (rc < 0)
                                return rc;
                        c->remaining -= n;
                        i += n;
                        if (c->remaining == 0)
                                c->state = DATA_CR;
                        continue;
                }
                i++;
                if (c->state != DATA_CR && c->state != DATA_LF && ++c->line_len > CHUNKED_MAX_LINE)
                        return -EBADMSG;
                switch (c->state) {
                case SIZE:
                        if (hex_value(ch) >= 0) {
                                /* 15 hex digits stay far below 2^64. */
                                if (c->line_len > 15)
                                        return -EBADMSG;
                                c->remaining = c->remaining * 16 + (uint64_t)hex_value(ch);
                        } else if (ch == ';' && c->line_len > 1) {
                                c->state = EXTENSION;
                        } else if (ch == '\r' && c->line_len > 1) {
                                c->state = SIZE_LF;
                        } else {
                                return -EBADMSG;
                        }
                        break;
                case EXTENSION:
                        if (ch == '\r')
                                c->state = SIZE_LF;
                        break;
                case SIZE_LF:
                        if (ch != '\n')
                                return -EBADMSG;
                        end_size_line(c);
                        break;
                case DATA_CR:
                        if (ch != '\r')
                                return -EBADMSG;
                        c->state = DATA_LF;
                        break;
                case DATA_LF:
                        if (ch != '\n')
                                return -EBADMSG;
                        c->state = SIZE;
                        c->line_len = 0;
                        break;
                case TRAILER:
                        if (ch == '\r')
                                c->state = TRAILER_LF;
                        break;
                case TRAILER_LF:
                        if (ch != '\n')
                                return -EBADMSG;
                        /* An empty line (just CRLF) ends the body. */
                        if (c->line_len == 2) {
                                c->state = DONE;
                                c->done = true;
                        } else {
                                c->state = TRAILER;
                                c->line_len = 0;
                        }
                        break;
                default:
                        return -EBADMSG;
                }
        }
        return (long)i;
}
