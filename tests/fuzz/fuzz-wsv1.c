/* libFuzzer target for the v1.kernel.websocket.jupyter.org format
 * (protocol/wsv1.c).
 *
 * Invariants: a decoded message re-encodes into a frame that decodes to the
 * same message; a canonical frame (offset_0 right after the table, the last
 * offset at the end) re-encodes into exactly its own bytes. */
#include "autoconf.h"

#include "protocol/wsv1.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int same(struct jp_bytes a, struct jp_bytes b)
{
        return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-wsv1: invariant broken: %s\n", what);
        abort();
}

static uint64_t le64(const uint8_t *p)
{
        uint64_t v = 0;

        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

static int same_msg(const struct jp_msg *a, const struct jp_msg *b)
{
        if (a->channel != b->channel || a->nbuffers != b->nbuffers || !same(a->header, b->header) ||
            !same(a->parent_header, b->parent_header) || !same(a->metadata, b->metadata) ||
            !same(a->content, b->content))
                return 0;
        for (size_t i = 0; i < a->nbuffers; i++) {
                if (!same(a->buffers[i], b->buffers[i]))
                        return 0;
        }
        return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct jp_msg first, second;
        struct buf frame;
        uint64_t count;
        int rc;

        rc = jp_wsv1_decode(data, size, &first);
        if (rc != 0 && rc != -EBADMSG)
                fail("unexpected error code");
        if (rc != 0)
                return 0;
        if (first.nbuffers > JP_MAX_BUFFERS || first.owned)
                fail("decoded message out of bounds");

        buf_init(&frame, SIZE_MAX);
        if (jp_wsv1_encode(&first, &frame) < 0)
                fail("encoding a decoded message failed");
        if (jp_wsv1_decode((const uint8_t *)frame.data, frame.len, &second) != 0)
                fail("our own frame does not decode");
        if (!same_msg(&first, &second))
                fail("decode(encode(msg)) differs from msg");

        count = le64(data);
        if (le64(data + 8) == 8 * (count + 1) && le64(data + 8 * count) == size &&
            (frame.len != size || memcmp(frame.data, data, size) != 0))
                fail("a canonical frame does not re-encode into itself");
        buf_free(&frame);
        return 0;
}
