/* libFuzzer target for the ZMQ wire codec (protocol/wire.c).
 *
 * Input: one flags byte, then frames, each a length byte and that many
 * bytes (a short last frame takes what is left). Flags bit 0 signs with a
 * key instead of the empty key; bit 1 has the harness write the correct
 * signature into the frame after the first delimiter, so the fuzzer gets
 * past verification, which it could never guess.
 *
 * Invariant: a message that decodes re-encodes into exactly its frames. */
#include "autoconf.h"

#include "protocol/wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT_FRAMES (JP_WIRE_MAX_FRAMES + 8)

static const char fuzz_key[] = "fuzz-key-0123456789abcdef";

static int same(struct jp_bytes a, struct jp_bytes b)
{
        return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-wire: invariant broken: %s\n", what);
        abort();
}

/* Overwrites the signature frame with the right one, when the frames have
 * the shape of a message at all. */
static void sign_in_place(struct jp_bytes *frames, size_t n, struct jp_signer *signer,
                          char sig[JP_SIGNATURE_HEX_LEN + 1])
{
        struct jp_msg msg;
        size_t d = 0;

        while (d < n && !(frames[d].len == JP_WIRE_DELIMITER_LEN &&
                          memcmp(frames[d].ptr, JP_WIRE_DELIMITER, JP_WIRE_DELIMITER_LEN) == 0))
                d++;
        if (d + 6 > n)
                return;
        jp_msg_init(&msg);
        msg.header = frames[d + 2];
        msg.parent_header = frames[d + 3];
        msg.metadata = frames[d + 4];
        msg.content = frames[d + 5];
        if (jp_signer_sign(signer, &msg, sig) < 0)
                fail("signing failed");
        frames[d + 1] = (struct jp_bytes){(const uint8_t *)sig, strlen(sig)};
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct jp_signer *keyed, *empty;
        struct jp_bytes frames[MAX_INPUT_FRAMES], out[JP_WIRE_MAX_FRAMES];
        char sig[JP_SIGNATURE_HEX_LEN + 1], resig[JP_SIGNATURE_HEX_LEN + 1];
        struct jp_signer *signer;
        struct jp_msg msg;
        size_t n = 0, at = 1;
        int rc, count;

        if (!keyed && (jp_signer_new(fuzz_key, strlen(fuzz_key), &keyed) < 0 ||
                       jp_signer_new("", 0, &empty) < 0))
                fail("jp_signer_new");
        if (size < 1)
                return 0;
        signer = data[0] & 1 ? keyed : empty;
        while (at < size && n < MAX_INPUT_FRAMES) {
                size_t len = data[at++];

                if (len > size - at)
                        len = size - at;
                frames[n++] = (struct jp_bytes){data + at, len};
                at += len;
        }
        if (data[0] & 2)
                sign_in_place(frames, n, signer, sig);

        jp_msg_init(&msg);
        msg.channel = JP_STDIN;
        rc = jp_wire_decode(frames, n, signer, &msg);
        if (rc != 0 && rc != -EBADMSG && rc != -EACCES)
                fail("unexpected error code");
        if (rc != 0)
                return 0;
        if (msg.channel != JP_STDIN)
                fail("decode changed the channel");

        count = jp_wire_encode(&msg, signer, resig, out);
        if (count < 0 || (size_t)count != n)
                fail("re-encoding gave a different frame count");
        for (size_t i = 0; i < n; i++) {
                if (!same(out[i], frames[i]))
                        fail("re-encoding gave different frames");
        }
        return 0;
}
