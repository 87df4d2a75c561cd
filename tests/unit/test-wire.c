/* protocol/wire.c: the ZMQ wire layout, its signature and its limits. */
#include "autoconf.h"

#include "protocol/wire.h"
#include "tests/unit/tap.h"

#include <errno.h>

static const char header[] = "{\"msg_id\":\"m1\",\"msg_type\":\"execute_request\"}";
static const char parent[] = "{}";
static const char metadata[] = "{\"k\":1}";
static const char content[] = "{\"code\":\"print(1)\"}";

static struct jp_bytes bytes(const void *p, size_t len)
{
        return (struct jp_bytes){p, len};
}

static struct jp_bytes str(const char *s)
{
        return bytes(s, strlen(s));
}

static void fill_msg(struct jp_msg *msg, size_t nidentities, size_t nbuffers)
{
        static const char id_data[JP_MAX_IDENTITIES][8] = {"id-0", "id-1\0x"};
        static uint8_t buf_data[JP_MAX_BUFFERS][4];

        jp_msg_init(msg);
        msg->header = str(header);
        msg->parent_header = str(parent);
        msg->metadata = str(metadata);
        msg->content = str(content);
        msg->nidentities = nidentities;
        for (size_t i = 0; i < nidentities; i++)
                msg->identities[i] = bytes(id_data[i], i == 1 ? 6 : 4);
        msg->nbuffers = nbuffers;
        for (size_t i = 0; i < nbuffers; i++) {
                memset(buf_data[i], (int)i, sizeof(buf_data[i]));
                buf_data[i][0] = 0xff;
                /* Buffer 0 is empty, so empty frames are covered. */
                msg->buffers[i] = bytes(buf_data[i], i == 0 ? 0 : sizeof(buf_data[i]));
        }
}

static int same(struct jp_bytes a, struct jp_bytes b)
{
        return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static int same_msg(const struct jp_msg *a, const struct jp_msg *b)
{
        if (a->nidentities != b->nidentities || a->nbuffers != b->nbuffers ||
            a->channel != b->channel || !same(a->header, b->header) ||
            !same(a->parent_header, b->parent_header) || !same(a->metadata, b->metadata) ||
            !same(a->content, b->content))
                return 0;
        for (size_t i = 0; i < a->nidentities; i++) {
                if (!same(a->identities[i], b->identities[i]))
                        return 0;
        }
        for (size_t i = 0; i < a->nbuffers; i++) {
                if (!same(a->buffers[i], b->buffers[i]))
                        return 0;
        }
        return 1;
}

static void round_trip(struct jp_signer *signer, size_t nids, size_t nbufs, const char *name)
{
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        char sig[JP_SIGNATURE_HEX_LEN + 1];
        struct jp_msg in, out;
        int n;

        fill_msg(&in, nids, nbufs);
        in.channel = JP_CONTROL;
        n = jp_wire_encode(&in, signer, sig, frames);
        is_int(n, (int)(nids + 6 + nbufs), "%s: frame count", name);
        if (n < 0)
                return;
        ok(same(frames[nids], str(JP_WIRE_DELIMITER)), "%s: delimiter after the identities", name);
        ok(frames[nids + 1].ptr == (const uint8_t *)sig && same(frames[nids + 1], str(sig)),
           "%s: the signature frame points at the signature", name);
        ok(same(frames[nids + 2], in.header) && same(frames[nids + 5], in.content),
           "%s: JSON parts follow the signature", name);
        jp_msg_init(&out);
        out.channel = JP_CONTROL; /* decode leaves the channel to the caller */
        is_int(jp_wire_decode(frames, (size_t)n, signer, &out), 0, "%s: decodes", name);
        ok(same_msg(&in, &out), "%s: decoded message equals the original", name);
        ok(out.header.ptr == frames[nids + 2].ptr, "%s: decoded parts are views, not copies", name);
}

static void test_round_trips(void)
{
        struct jp_signer *keyed = NULL, *empty = NULL;
        struct jp_bytes frames[JP_WIRE_MAX_FRAMES];
        char sig[JP_SIGNATURE_HEX_LEN + 1];
        struct jp_msg in;

        if (jp_signer_new("0123456789abcdef", 16, &keyed) < 0 || jp_signer_new("", 0, &empty) < 0)
                BAIL_OUT("jp_signer_new");
        round_trip(keyed, 0, 0, "plain");
        round_trip(keyed, 2, 3, "identities and buffers");
        round_trip(keyed, JP_MAX_IDENTITIES, JP_MAX_BUFFERS, "every identity and buffer allowed");
        round_trip(empty, 1, 1, "empty key");

        fill_msg(&in, 0, 0);
        is_int(jp_wire_encode(&in, empty, sig, frames), 6, "encode with an empty key");
        is_uint(frames[1].len, 0, "an empty key gives an empty signature frame");

        fill_msg(&in, 0, 0);
        in.nidentities = JP_MAX_IDENTITIES + 1;
        is_int(jp_wire_encode(&in, keyed, sig, frames), -E2BIG, "encode refuses %d identities",
               JP_MAX_IDENTITIES + 1);
        fill_msg(&in, 0, 0);
        in.nbuffers = JP_MAX_BUFFERS + 1;
        is_int(jp_wire_encode(&in, keyed, sig, frames), -E2BIG, "encode refuses %d buffers",
               JP_MAX_BUFFERS + 1);
        jp_signer_destroy(&keyed);
        jp_signer_destroy(&empty);
}

/* Builds [ids...] <IDS|MSG> sig h p m c [bufs...] by hand. */
static size_t build(struct jp_bytes *f, size_t nids, size_t nbufs, const char *sig)
{
        static const uint8_t b = 0x42;
        size_t n = 0;

        for (size_t i = 0; i < nids; i++)
                f[n++] = str("ident");
        f[n++] = str(JP_WIRE_DELIMITER);
        f[n++] = str(sig);
        f[n++] = str(header);
        f[n++] = str(parent);
        f[n++] = str(metadata);
        f[n++] = str(content);
        for (size_t i = 0; i < nbufs; i++)
                f[n++] = bytes(&b, 1);
        return n;
}

static void test_malformed(void)
{
        struct jp_bytes f[JP_WIRE_MAX_FRAMES + 8];
        struct jp_signer *keyed = NULL, *empty = NULL;
        struct jp_msg msg, ref;
        char sig[JP_SIGNATURE_HEX_LEN + 1];
        char bad[JP_SIGNATURE_HEX_LEN + 1];
        char changed[sizeof(content)];
        size_t n;

        if (jp_signer_new("key", 3, &keyed) < 0 || jp_signer_new("", 0, &empty) < 0)
                BAIL_OUT("jp_signer_new");
        fill_msg(&ref, 0, 0);
        jp_signer_sign(keyed, &ref, sig);

        n = build(f, 0, 0, sig);
        is_int(jp_wire_decode(f, n, keyed, &msg), 0, "the well-formed baseline decodes");

        n = build(f, 0, 0, sig);
        f[0] = str("<IDS|MSG");
        is_int(jp_wire_decode(f, n, keyed, &msg), -EBADMSG, "no delimiter (one byte short)");
        f[0] = str("<ids|msg>");
        is_int(jp_wire_decode(f, n, keyed, &msg), -EBADMSG, "no delimiter (wrong case)");
        f[0] = bytes("<IDS|MSG>\0", 10);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EBADMSG, "no delimiter (trailing NUL)");
        is_int(jp_wire_decode(f, 0, keyed, &msg), -EBADMSG, "no frames at all");

        for (size_t drop = 1; drop <= 5; drop++) {
                n = build(f, 2, 0, sig);
                is_int(jp_wire_decode(f, n - drop, keyed, &msg), -EBADMSG,
                       "too few frames: %zu missing", drop);
        }

        n = build(f, JP_MAX_IDENTITIES, 0, sig);
        is_int(jp_wire_decode(f, n, keyed, &msg), 0, "%d identities are allowed",
               JP_MAX_IDENTITIES);
        is_uint(msg.nidentities, JP_MAX_IDENTITIES, "all of them kept");
        n = build(f, JP_MAX_IDENTITIES + 1, 0, sig);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EBADMSG, "%d identities are too many",
               JP_MAX_IDENTITIES + 1);

        n = build(f, 0, JP_MAX_BUFFERS, sig);
        is_int(jp_wire_decode(f, n, keyed, &msg), 0, "%d buffers are allowed", JP_MAX_BUFFERS);
        is_uint(msg.nbuffers, JP_MAX_BUFFERS, "all of them kept");
        n = build(f, 0, JP_MAX_BUFFERS + 1, sig);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EBADMSG, "%d buffers are too many",
               JP_MAX_BUFFERS + 1);

        /* The first delimiter splits; a later frame equal to it is data. */
        n = build(f, 1, 1, sig);
        f[n - 1] = str(JP_WIRE_DELIMITER);
        is_int(jp_wire_decode(f, n, keyed, &msg), 0, "a buffer equal to the delimiter");
        ok(msg.nidentities == 1 && msg.nbuffers == 1, "splits at the first delimiter");

        memcpy(bad, sig, sizeof(sig));
        bad[10] = bad[10] == 'a' ? 'b' : 'a';
        n = build(f, 0, 0, bad);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EACCES, "a wrong signature");
        n = build(f, 0, 0, "");
        is_int(jp_wire_decode(f, n, keyed, &msg), -EACCES, "a missing (empty) signature");
        memcpy(bad, sig, sizeof(sig));
        bad[JP_SIGNATURE_HEX_LEN - 1] = '\0';
        n = build(f, 0, 0, bad);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EACCES, "a truncated signature");

        n = build(f, 0, 0, sig);
        memcpy(changed, content, sizeof(content));
        changed[10] ^= 0x20;
        f[5] = str(changed);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EACCES, "content changed after signing");
        n = build(f, 0, 0, sig);
        f[3] = str(metadata); /* header and metadata swapped */
        f[5] = str(header);
        f[4] = str(parent);
        f[2] = str(content);
        is_int(jp_wire_decode(f, n, keyed, &msg), -EACCES, "parts reordered after signing");

        n = build(f, 0, 3, sig);
        f[n - 1] = str("a different buffer");
        is_int(jp_wire_decode(f, n, keyed, &msg), 0, "buffers are not signed");

        /* Empty key: only an empty signature verifies. */
        n = build(f, 0, 0, "");
        is_int(jp_wire_decode(f, n, empty, &msg), 0, "empty key, empty signature");
        n = build(f, 0, 0, sig);
        is_int(jp_wire_decode(f, n, empty, &msg), -EACCES, "empty key, a signature present");
        jp_signer_destroy(&keyed);
        jp_signer_destroy(&empty);
}

int main(void)
{
        test_round_trips();
        test_malformed();
        return done_testing();
}
