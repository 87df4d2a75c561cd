/* protocol/sign.c: HMAC-SHA256 over the four JSON parts, hex-encoded. */
#include "autoconf.h"

#include "protocol/sign.h"
#include "tests/unit/tap.h"

#include <errno.h>

/* RFC 4231 test cases, the data split across the four signed parts so the
 * test also proves the parts are hashed back to back with nothing between. */
static struct jp_msg split_msg(const char *a, const char *b, const char *c, const char *d)
{
        struct jp_msg msg;

        jp_msg_init(&msg);
        msg.header = (struct jp_bytes){(const uint8_t *)a, strlen(a)};
        msg.parent_header = (struct jp_bytes){(const uint8_t *)b, strlen(b)};
        msg.metadata = (struct jp_bytes){(const uint8_t *)c, strlen(c)};
        msg.content = (struct jp_bytes){(const uint8_t *)d, strlen(d)};
        return msg;
}

static void sign_with(const void *key, size_t keylen, const struct jp_msg *msg, const char *expect,
                      const char *name)
{
        struct jp_signer *s = NULL;
        char hex[JP_SIGNATURE_HEX_LEN + 1];

        memset(hex, 'Z', sizeof(hex));
        is_int(jp_signer_new(key, keylen, &s), 0, "%s: signer created", name);
        if (!s)
                return;
        is_int(jp_signer_sign(s, msg, hex), 0, "%s: signs", name);
        is_str(hex, expect, "%s: signature", name);
        is_int(jp_signer_verify(s, msg, (const uint8_t *)expect, strlen(expect)), 0, "%s: verifies",
               name);
        jp_signer_destroy(&s);
        ok(s == NULL, "%s: destroy clears the caller's pointer", name);
}

static void test_known_answers(void)
{
        uint8_t key1[20], key6[131];
        struct jp_msg msg;

        memset(key1, 0x0b, sizeof(key1));
        memset(key6, 0xaa, sizeof(key6));
        msg = split_msg("Hi", " ", "The", "re");
        sign_with(key1, sizeof(key1), &msg,
                  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
                  "RFC 4231 case 1");
        msg = split_msg("what do ya want ", "", "for nothing?", "");
        sign_with("Jefe", 4, &msg,
                  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
                  "RFC 4231 case 2, with empty parts");
        msg = split_msg("Test Using Larger Than Block-Size Key - Hash Key First", "", "", "");
        sign_with(key6, sizeof(key6), &msg,
                  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
                  "RFC 4231 case 6, a key longer than a block");
        msg = split_msg("", "", "", "");
        sign_with("k", 1, &msg, "8bb990c40a7d61cb97597a942125025be50ac8beb74436e3735b98893a7f6620",
                  "all parts empty");
}

static void test_verify(void)
{
        struct jp_msg msg = split_msg("{\"msg_id\":\"1\"}", "{}", "{}", "{\"code\":\"1+1\"}");
        struct jp_msg other = split_msg("{\"msg_id\":\"2\"}", "{}", "{}", "{\"code\":\"1+1\"}");
        struct jp_signer *s = NULL;
        char good[JP_SIGNATURE_HEX_LEN + 1], again[JP_SIGNATURE_HEX_LEN + 1];
        char bad[JP_SIGNATURE_HEX_LEN + 2];
        const uint8_t blob[] = {1, 2, 3};

        if (jp_signer_new("secret", 6, &s) < 0)
                BAIL_OUT("jp_signer_new");
        is_int(jp_signer_sign(s, &msg, good), 0, "sign");
        is_uint(strlen(good), JP_SIGNATURE_HEX_LEN, "64 hex characters");
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)good, 64), 0, "own signature verifies");

        memcpy(bad, good, sizeof(good));
        bad[63] = bad[63] == '0' ? '1' : '0';
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)bad, 64), -EACCES,
               "last character changed");
        memcpy(bad, good, sizeof(good));
        bad[0] = bad[0] == '0' ? '1' : '0';
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)bad, 64), -EACCES,
               "first character changed");
        memcpy(bad, good, sizeof(good));
        for (int i = 0; i < 64; i++)
                bad[i] = (char)(bad[i] >= 'a' ? bad[i] - 32 : bad[i]);
        ok(strcmp(bad, good) != 0, "the uppercase form differs from the signature");
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)bad, 64), -EACCES,
               "uppercase hex is not the signature");
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)good, 63), -EACCES, "63 characters");
        memcpy(bad, good, sizeof(good));
        bad[64] = '0';
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)bad, 65), -EACCES, "65 characters");
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)"", 0), -EACCES,
               "an empty signature with a key");
        is_int(jp_signer_verify(s, &other, (const uint8_t *)good, 64), -EACCES,
               "the signature of another message");

        /* The context is reused: signing B in between must not disturb A. */
        is_int(jp_signer_sign(s, &other, again), 0, "sign another message");
        ok(strcmp(again, good) != 0, "different messages, different signatures");
        is_int(jp_signer_sign(s, &msg, again), 0, "sign the first again");
        is_str(again, good, "signing is repeatable on one signer");

        /* Buffers are not signed. */
        msg.nbuffers = 1;
        msg.buffers[0] = (struct jp_bytes){blob, sizeof(blob)};
        is_int(jp_signer_sign(s, &msg, again), 0, "sign with a buffer");
        is_str(again, good, "buffers do not change the signature");

        /* Moving a byte from one part to the next keeps the concatenation
         * and so the signature: documents that parts are not delimited. */
        {
                struct jp_msg a = split_msg("ab", "c", "", "");
                struct jp_msg b = split_msg("a", "bc", "", "");
                char sa[JP_SIGNATURE_HEX_LEN + 1], sb[JP_SIGNATURE_HEX_LEN + 1];

                jp_signer_sign(s, &a, sa);
                jp_signer_sign(s, &b, sb);
                is_str(sa, sb, "the HMAC covers the plain concatenation, as jupyter_client's");
        }
        jp_signer_destroy(&s);
        jp_signer_destroy(&s);
        ok(s == NULL, "destroying twice is harmless");

        if (jp_signer_new("secreT", 6, &s) < 0)
                BAIL_OUT("jp_signer_new");
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)good, 64), -EACCES,
               "another key does not verify");
        jp_signer_destroy(&s);
}

static void test_empty_key(void)
{
        struct jp_msg msg = split_msg("{}", "{}", "{}", "{}");
        struct jp_signer *s = NULL;
        char hex[JP_SIGNATURE_HEX_LEN + 1];

        is_int(jp_signer_new("", 0, &s), 0, "an empty key is allowed");
        memset(hex, 'Z', sizeof(hex));
        is_int(jp_signer_sign(s, &msg, hex), 0, "sign with an empty key");
        is_str(hex, "", "an empty key gives an empty signature");
        is_int(jp_signer_verify(s, &msg, (const uint8_t *)"", 0), 0, "an empty signature verifies");
        is_int(jp_signer_verify(s, &msg,
                                (const uint8_t *)"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e83"
                                                 "10c060f61caaff8a",
                                64),
               -EACCES, "a signature is refused when no key is set");
        jp_signer_destroy(&s);
}

static void test_key_limits(void)
{
        uint8_t key[JP_MAX_KEY_LEN + 1];
        struct jp_signer *s = (struct jp_signer *)&s;

        memset(key, 'k', sizeof(key));
        is_int(jp_signer_new(key, JP_MAX_KEY_LEN, &s), 0, "a key of %d bytes", JP_MAX_KEY_LEN);
        jp_signer_destroy(&s);
        s = (struct jp_signer *)&s;
        is_int(jp_signer_new(key, JP_MAX_KEY_LEN + 1, &s), -EINVAL, "a key of %d bytes is refused",
               JP_MAX_KEY_LEN + 1);
        ok(s == NULL, "a failed jp_signer_new sets the output to NULL");
}

/* A signer copied from another with its own key signs as one made for that
 * key (RFC 4231 case 2, a key shorter than the proto's and one longer
 * than a block), and leaves the proto as it was; without a proto, or with
 * an empty key, it is jp_signer_new's. */
static void test_new_like(void)
{
        struct jp_signer *proto = NULL, *s = NULL;
        char hex[JP_SIGNATURE_HEX_LEN + 1], before[JP_SIGNATURE_HEX_LEN + 1];
        struct jp_msg msg = split_msg("what do ya want ", "", "for nothing?", "");
        uint8_t key6[131];

        memset(key6, 0xaa, sizeof(key6));
        if (jp_signer_new("a key of the zygote", 19, &proto) < 0)
                BAIL_OUT("jp_signer_new");
        is_int(jp_signer_sign(proto, &msg, before), 0, "the proto signs");
        is_int(jp_signer_new_like(proto, "Jefe", 4, &s), 0, "a copy keyed Jefe");
        is_int(jp_signer_sign(s, &msg, hex), 0, "it signs");
        is_str(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
               "with its own key (RFC 4231 case 2)");
        jp_signer_destroy(&s);
        is_int(jp_signer_sign(proto, &msg, hex), 0, "the proto still signs");
        is_str(hex, before, "with its own key, unchanged by the copy");
        msg = split_msg("Test Using Larger Than Block-Size Key - Hash Key First", "", "", "");
        is_int(jp_signer_new_like(proto, key6, sizeof(key6), &s), 0, "a copy with a long key");
        is_int(jp_signer_sign(s, &msg, hex), 0, "it signs");
        is_str(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
               "as RFC 4231 case 6");
        jp_signer_destroy(&s);
        is_int(jp_signer_new_like(proto, "", 0, &s), 0, "a copy with no key");
        is_int(jp_signer_sign(s, &msg, hex), 0, "signs");
        is_str(hex, "", "with nothing, as an empty key's signer");
        jp_signer_destroy(&s);
        is_int(jp_signer_new_like(NULL, "Jefe", 4, &s), 0, "no proto: a signer of its own");
        jp_signer_destroy(&s);
        is_int(jp_signer_new_like(proto, key6, JP_MAX_KEY_LEN + 1, &s), -EINVAL,
               "a key over the limit is refused");
        ok(s == NULL, "and nothing is made");
        jp_signer_destroy(&proto);
}

int main(void)
{
        test_known_answers();
        test_new_like();
        test_verify();
        test_empty_key();
        test_key_limits();
        return done_testing();
}
