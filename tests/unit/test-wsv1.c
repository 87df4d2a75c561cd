/* protocol/wsv1.c: the v1.kernel.websocket.jupyter.org binary format. */
#include "autoconf.h"

#include "protocol/wsv1.h"
#include "tests/unit/tap.h"

#include <errno.h>

static uint64_t get_le64(const uint8_t *p)
{
        uint64_t v = 0;

        for (int i = 7; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
        for (int i = 0; i < 8; i++, v >>= 8)
                p[i] = (uint8_t)v;
}

static struct jp_bytes str(const char *s)
{
        return (struct jp_bytes){(const uint8_t *)s, strlen(s)};
}

static int same(struct jp_bytes a, struct jp_bytes b)
{
        return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void fill(struct jp_msg *msg, enum jp_channel channel, size_t nbufs)
{
        static const uint8_t raw[] = {0xff, 0x00, 0x7f, 0x80};

        jp_msg_init(msg);
        msg->channel = channel;
        /* Deliberately not compact: v1 relays the JSON parts untouched. */
        msg->header = str("{\"msg_id\": \"m\", \"msg_type\": \"execute_request\"}");
        msg->parent_header = str("{}");
        msg->metadata = str("");
        msg->content = str("{\"code\": \"h\xc3\xa9\"}");
        msg->nbuffers = nbufs;
        for (size_t i = 0; i < nbufs; i++)
                msg->buffers[i] = (struct jp_bytes){raw, i % (sizeof(raw) + 1)};
}

static void round_trip(enum jp_channel channel, size_t nbufs)
{
        const char *name = jp_channel_name(channel);
        struct jp_msg in, out;
        struct buf frame;
        const uint8_t *f;
        size_t count = 6 + nbufs, flen, bad = 0;
        const size_t prefix = 3;

        fill(&in, channel, nbufs);
        buf_init(&frame, 1 << 20);
        buf_append(&frame, "PRE", prefix);
        is_int(jp_wsv1_encode(&in, &frame), 0, "%s, %zu buffers: encodes", name, nbufs);
        f = (const uint8_t *)frame.data + prefix;
        flen = frame.len - prefix;
        {
                /* The envelope with the content put back is the whole frame. */
                struct buf env, joined;
                size_t at = 0;

                buf_init(&env, 1 << 20);
                buf_init(&joined, 1 << 20);
                is_int(jp_wsv1_encode_envelope(&in, &env, &at), 0,
                       "%s, %zu buffers: envelope encodes", name, nbufs);
                buf_append(&joined, env.data, at);
                buf_append(&joined, in.content.ptr, in.content.len);
                buf_append(&joined, env.data + at, env.len - at);
                is_mem(joined.data, joined.len, f, flen,
                       "%s, %zu buffers: envelope + content = the frame", name, nbufs);
                buf_free(&env);
                buf_free(&joined);
        }
        is_uint(get_le64(f), count, "%s, %zu buffers: offset_number = 6 + #buffers", name, nbufs);
        is_uint(get_le64(f + 8), 8 * (count + 1), "%s, %zu buffers: offset_0 = 8 * (1 + n)", name,
                nbufs);
        is_uint(get_le64(f + 8 * count), flen, "%s, %zu buffers: the last offset is the length",
                name, nbufs);
        is_mem(f + 8 * (count + 1), strlen(name), name, strlen(name),
               "%s, %zu buffers: the channel comes first", name, nbufs);
        is_int(jp_wsv1_decode(f, flen, &out), 0, "%s, %zu buffers: decodes", name, nbufs);
        is_int(out.channel, channel, "%s, %zu buffers: channel", name, nbufs);
        ok(same(out.header, in.header) && same(out.parent_header, in.parent_header) &&
               same(out.metadata, in.metadata) && same(out.content, in.content),
           "%s, %zu buffers: JSON parts come back byte for byte", name, nbufs);
        ok(out.header.ptr >= f && out.header.ptr < f + flen,
           "%s, %zu buffers: parts are views into the frame", name, nbufs);
        is_uint(out.nbuffers, nbufs, "%s, %zu buffers: buffer count", name, nbufs);
        for (size_t i = 0; i < nbufs && i < out.nbuffers; i++)
                bad += !same(out.buffers[i], in.buffers[i]);
        is_uint(bad, 0, "%s, %zu buffers: every buffer comes back", name, nbufs);
        buf_free(&frame);
}

/* A hand-made frame: the given offset table, then body bytes. */
static size_t make(uint8_t *out, uint64_t count, const uint64_t *offsets, size_t noffsets,
                   const char *body)
{
        size_t at = 8 + 8 * noffsets;

        put_le64(out, count);
        for (size_t i = 0; i < noffsets; i++)
                put_le64(out + 8 + 8 * i, offsets[i]);
        memcpy(out + at, body, strlen(body));
        return at + strlen(body);
}

static void expect_bad(const uint8_t *f, size_t len, const char *name)
{
        struct jp_msg msg;

        is_int(jp_wsv1_decode(f, len, &msg), -EBADMSG, "%s", name);
}

static void test_malformed(void)
{
        /* "shell" "{}" "{}" "{}" "{}": offsets 56 61 63 65 67 69 */
        const uint64_t good[6] = {56, 61, 63, 65, 67, 69};
        uint64_t offs[6];
        uint8_t f[1024], copy[1024];
        struct jp_msg msg;
        size_t len;

        len = make(f, 6, good, 6, "shell{}{}{}{}");
        is_uint(len, 69, "the hand-made baseline is 69 bytes");
        is_int(jp_wsv1_decode(f, len, &msg), 0, "the hand-made baseline decodes");
        ok(msg.channel == JP_SHELL && msg.content.len == 2 && msg.nbuffers == 0, "baseline fields");

        for (size_t cut = 0; cut < 8; cut++)
                expect_bad(f, cut, "shorter than the offset count");
        expect_bad(f, 40, "truncated inside the offset table");
        expect_bad(f, 60, "truncated inside the channel");
        expect_bad(f, 68, "truncated by one byte");

        memcpy(copy, f, len);
        put_le64(copy, 5);
        expect_bad(copy, len, "offset_number 5 (fewer than 6)");
        memcpy(copy, f, len);
        put_le64(copy, 0);
        expect_bad(copy, len, "offset_number 0");
        memcpy(copy, f, len);
        put_le64(copy, 6 + JP_MAX_BUFFERS + 1);
        expect_bad(copy, len, "one buffer more than allowed");
        memcpy(copy, f, len);
        put_le64(copy, UINT64_MAX);
        expect_bad(copy, len, "offset_number 2^64-1");
        memcpy(copy, f, len);
        put_le64(copy, (uint64_t)1 << 61);
        expect_bad(copy, len, "offset_number 2^61 (8 * (n + 1) wraps to 8)");
        memcpy(copy, f, len);
        put_le64(copy, 7);
        expect_bad(copy, len, "offset_number 7 with one offset missing");

        memcpy(offs, good, sizeof(good));
        offs[0] = 48;
        len = make(copy, 6, offs, 6, "shell{}{}{}{}");
        expect_bad(copy, len, "offset_0 inside the offset table");
        memcpy(offs, good, sizeof(good));
        offs[0] = 70;
        len = make(copy, 6, offs, 6, "shell{}{}{}{}");
        expect_bad(copy, len, "offset_0 past the end");
        memcpy(offs, good, sizeof(good));
        offs[2] = 60;
        len = make(copy, 6, offs, 6, "shell{}{}{}{}");
        expect_bad(copy, len, "offsets out of order");
        memcpy(offs, good, sizeof(good));
        offs[5] = 70;
        len = make(copy, 6, offs, 6, "shell{}{}{}{}");
        expect_bad(copy, len, "the last offset past the end");
        memcpy(offs, good, sizeof(good));
        offs[3] = UINT64_MAX;
        len = make(copy, 6, offs, 6, "shell{}{}{}{}");
        expect_bad(copy, len, "an offset of 2^64-1");

        memcpy(offs, good, sizeof(good));
        len = make(copy, 6, offs, 6, "shelx{}{}{}{}");
        expect_bad(copy, len, "unknown channel");
        len = make(copy, 6, offs, 6, "Shell{}{}{}{}");
        expect_bad(copy, len, "channel in the wrong case");
        offs[0] = 56;
        offs[1] = 56;
        len = make(copy, 6, offs, 6, "shell{}{}{}{}");
        expect_bad(copy, len, "empty channel");

        /* Zero-length JSON parts are not the codec's business: they are
         * relayed as they are. */
        {
                const uint64_t empty_parts[6] = {56, 58, 58, 58, 58, 58};

                len = make(copy, 6, empty_parts, 6, "hb");
                is_int(jp_wsv1_decode(copy, len, &msg), 0, "empty JSON parts are relayed");
                ok(msg.channel == JP_HB && msg.header.len == 0 && msg.content.len == 0,
                   "hb with empty parts");
        }
}

int main(void)
{
        for (int c = 0; c < JP_CHANNEL_COUNT; c++)
                round_trip((enum jp_channel)c, 0);
        round_trip(JP_SHELL, 3);
        round_trip(JP_IOPUB, JP_MAX_BUFFERS);
        test_malformed();
        return done_testing();
}
