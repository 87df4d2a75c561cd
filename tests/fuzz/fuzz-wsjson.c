/* libFuzzer target for the default WebSocket format (protocol/wsjson.c).
 *
 * Input: one flags byte (bit 0: the frame is binary), then the frame.
 *
 * Invariants: a decoded message re-encodes into a frame that decodes to the
 * same message, and encoding that again gives the same bytes. */
#include "autoconf.h"

#include "protocol/wsjson.h"

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
        fprintf(stderr, "fuzz-wsjson: invariant broken: %s\n", what);
        abort();
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
        char err[128], msg_id[JP_MSG_ID_SIZE], msg_type[JP_MSG_TYPE_SIZE];
        struct jp_msg first, second;
        struct buf once, twice;
        bool binary, binary2;
        int rc;

        if (size < 1)
                return 0;
        rc = jp_wsjson_decode(data + 1, size - 1, data[0] & 1, &first, err, sizeof(err));
        if (rc != 0 && rc != -EBADMSG)
                fail("unexpected error code");
        if (rc != 0) {
                if (!err[0] || first.owned)
                        fail("a refusal without a reason, or with storage left");
                return 0;
        }
        if (first.channel == JP_IOPUB || first.channel == JP_HB)
                fail("a client frame was accepted on a read-only channel");
        if (jp_header_fields(first.header, msg_id, msg_type) < 0) {
                msg_id[0] = '\0';
                msg_type[0] = '\0';
        }

        buf_init(&once, SIZE_MAX);
        buf_init(&twice, SIZE_MAX);
        if (jp_wsjson_encode(&first, msg_id, msg_type, &once, &binary) < 0)
                fail("encoding a decoded message failed");
        if (binary != (first.nbuffers > 0))
                fail("binary flag does not follow the buffers");
        rc = jp_wsjson_decode((const uint8_t *)once.data, once.len, binary, &second, err,
                              sizeof(err));
        if (rc != 0) {
                fprintf(stderr, "fuzz-wsjson: %s\n", err);
                fail("our own frame does not decode");
        }
        if (!same_msg(&first, &second))
                fail("decode(encode(msg)) differs from msg");
        if (jp_wsjson_encode(&second, msg_id, msg_type, &twice, &binary2) < 0 ||
            binary2 != binary || once.len != twice.len || memcmp(once.data, twice.data, once.len))
                fail("encoding is not stable");
        jp_msg_release(&first);
        jp_msg_release(&second);
        buf_free(&once);
        buf_free(&twice);
        return 0;
}
