/* libFuzzer target for the chunked request-body decoder (protocol/chunked.c).
 *
 * Input: two bytes (little-endian) choosing where the body is cut, one byte
 * limiting how much data emit accepts (0: no limit, else 4 * that many
 * bytes, after which emit fails with -ECANCELED), then the body.
 *
 * The body is decoded whole, in two pieces cut at the chosen offset, and
 * one byte at a time. Invariants: all three emit the same data and end the
 * same way (the same error, or the same number of consumed bytes and the
 * same done flag); emit is never called with nothing; a decoder returns
 * only what was fed to it, consumes less only once done, and consumes
 * nothing once done; the only errors are -EBADMSG and emit's own. */
#include "autoconf.h"

#include "protocol/chunked.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1 << 16)

struct outcome {
        uint8_t data[FUZZ_MAX_INPUT];
        size_t len;
        size_t limit;
        long rc; /* the first error, else 0 */
        size_t consumed;
        bool done;
};

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-chunked: invariant broken: %s\n", what);
        abort();
}

static int record(void *arg, const uint8_t *data, size_t n)
{
        struct outcome *o = arg;

        if (n == 0)
                fail("emit called with no data");
        for (size_t i = 0; i < n; i++) {
                if (o->len >= o->limit)
                        return -ECANCELED;
                /* Data is never longer than the body it came from. */
                if (o->len >= sizeof(o->data))
                        fail("more data than input");
                o->data[o->len++] = data[i];
        }
        return 0;
}

/* Feeds one piece; false once decoding has failed. */
static bool feed(struct chunked *c, const uint8_t *in, size_t len, struct outcome *o)
{
        bool was_done = c->done;
        long rc = chunked_feed(c, in, len, record, o);

        if (rc < 0) {
                if (rc != -EBADMSG && rc != -ECANCELED)
                        fail("an error that is neither -EBADMSG nor emit's");
                if (was_done)
                        fail("an error after done");
                o->rc = rc;
                return false;
        }
        if ((size_t)rc > len)
                fail("consumed more than was fed");
        if ((size_t)rc < len && !c->done)
                fail("stopped short without being done");
        if (was_done && rc != 0)
                fail("consumed input after done");
        o->consumed += (size_t)rc;
        return true;
}

static void decode(const uint8_t *in, size_t len, const size_t *cuts, size_t ncuts,
                   struct outcome *o)
{
        struct chunked c;
        size_t at = 0;

        o->len = 0;
        o->rc = 0;
        o->consumed = 0;
        chunked_init(&c);
        for (size_t k = 0; k <= ncuts; k++) {
                size_t end = k < ncuts ? cuts[k] : len;

                if (!feed(&c, in + at, end - at, o))
                        break;
                at = end;
        }
        o->done = c.done;
}

static void compare(const struct outcome *a, const struct outcome *b, const char *how)
{
        if (a->rc != b->rc) {
                fprintf(stderr, "fuzz-chunked: %s: rc %ld vs %ld\n", how, a->rc, b->rc);
                fail("a different error");
        }
        if (a->len != b->len || memcmp(a->data, b->data, a->len) != 0) {
                fprintf(stderr, "fuzz-chunked: %s: %zu vs %zu data bytes\n", how, a->len, b->len);
                fail("different data");
        }
        if (a->rc == 0 && (a->consumed != b->consumed || a->done != b->done)) {
                fprintf(stderr, "fuzz-chunked: %s: consumed %zu vs %zu, done %d vs %d\n", how,
                        a->consumed, b->consumed, (int)a->done, (int)b->done);
                fail("a different end");
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct outcome whole, halves, bytes;
        static size_t cuts[FUZZ_MAX_INPUT];
        const uint8_t *body = data + 3;
        size_t len, cut, limit;

        if (size < 3 || size - 3 > FUZZ_MAX_INPUT)
                return 0;
        len = size - 3;
        cut = ((size_t)data[0] | (size_t)data[1] << 8) % (len + 1);
        limit = data[2] ? 4 * (size_t)data[2] : SIZE_MAX;
        whole.limit = halves.limit = bytes.limit = limit;

        decode(body, len, NULL, 0, &whole);
        decode(body, len, &cut, 1, &halves);
        for (size_t i = 1; i < len; i++)
                cuts[i - 1] = i;
        decode(body, len, cuts, len ? len - 1 : 0, &bytes);

        compare(&whole, &halves, "whole vs two pieces");
        compare(&whole, &bytes, "whole vs one byte at a time");
        if (whole.rc == 0 && whole.consumed < len && !whole.done)
                fail("not all consumed and not done");
        if (whole.rc == -ECANCELED && whole.len != limit)
                fail("emit failed before its limit");
        return 0;
}
