#include "autoconf.h"

#include "protocol/sign.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>

struct jp_signer {
        EVP_MAC *mac;
        EVP_MAC_CTX *ctx; /* keyed once; re-initialised without a key per message */
        size_t keylen;
};

int jp_signer_new(const void *key, size_t keylen, struct jp_signer **out)
{
        struct jp_signer *s;
        OSSL_PARAM params[2];
        int rc = -ENOMEM;

        *out = NULL;
        if (keylen > JP_MAX_KEY_LEN)
                return -EINVAL;
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->keylen = keylen;
        if (keylen == 0)
                goto done;
        s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        if (!s->mac)
                goto fail;
        s->ctx = EVP_MAC_CTX_new(s->mac);
        if (!s->ctx)
                goto fail;
        params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
        params[1] = OSSL_PARAM_construct_end();
        if (!EVP_MAC_init(s->ctx, key, keylen, params)) {
                rc = -EINVAL;
                goto fail;
        }
done:
        *out = s;
        return 0;
fail:
        jp_signer_destroy(&s);
        return rc;
}

int jp_signer_new_like(const struct jp_signer *proto, const void *key, size_t keylen,
                       struct jp_signer **out)
{
        struct jp_signer *s;

        *out = NULL;
        if (keylen > JP_MAX_KEY_LEN)
                return -EINVAL;
        if (!proto || !proto->ctx || keylen == 0)
                return jp_signer_new(key, keylen, out);
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->keylen = keylen;
        if (!EVP_MAC_up_ref(proto->mac))
                goto fail;
        s->mac = proto->mac;
        /* The copy keeps the digest: keyed with no parameters, nothing is
         * fetched. */
        s->ctx = EVP_MAC_CTX_dup(proto->ctx);
        if (!s->ctx)
                goto fail;
        if (!EVP_MAC_init(s->ctx, key, keylen, NULL)) {
                jp_signer_destroy(&s);
                return -EINVAL;
        }
        *out = s;
        return 0;
fail:
        jp_signer_destroy(&s);
        return -ENOMEM;
}

void jp_signer_destroy(struct jp_signer **signer)
{
        struct jp_signer *s = *signer;

        if (!s)
                return;
        EVP_MAC_CTX_free(s->ctx);
        EVP_MAC_free(s->mac);
        free(s);
        *signer = NULL;
}

static int compute(struct jp_signer *s, const struct jp_msg *msg,
                   unsigned char digest[JP_SIGNATURE_HEX_LEN / 2])
{
        const struct jp_bytes *parts[4] = {&msg->header, &msg->parent_header, &msg->metadata,
                                           &msg->content};
        size_t outlen = 0;

        /* A NULL key reuses the key set in jp_signer_new. */
        if (!EVP_MAC_init(s->ctx, NULL, 0, NULL))
                return -EIO;
        for (size_t i = 0; i < 4; i++) {
                if (parts[i]->len && !EVP_MAC_update(s->ctx, parts[i]->ptr, parts[i]->len))
                        return -EIO;
        }
        if (!EVP_MAC_final(s->ctx, digest, &outlen, JP_SIGNATURE_HEX_LEN / 2) ||
            outlen != JP_SIGNATURE_HEX_LEN / 2)
                return -EIO;
        return 0;
}

int jp_signer_sign(struct jp_signer *s, const struct jp_msg *msg,
                   char hex[JP_SIGNATURE_HEX_LEN + 1])
{
        static const char digits[] = "0123456789abcdef";
        unsigned char digest[JP_SIGNATURE_HEX_LEN / 2];
        int rc;

        hex[0] = '\0';
        if (s->keylen == 0)
                return 0;
        rc = compute(s, msg, digest);
        if (rc < 0)
                return rc;
        for (size_t i = 0; i < sizeof(digest); i++) {
                hex[2 * i] = digits[digest[i] >> 4];
                hex[2 * i + 1] = digits[digest[i] & 15];
        }
        hex[JP_SIGNATURE_HEX_LEN] = '\0';
        return 0;
}

int jp_signer_verify(struct jp_signer *s, const struct jp_msg *msg, const uint8_t *signature,
                     size_t len)
{
        char expected[JP_SIGNATURE_HEX_LEN + 1];
        int rc;

        if (s->keylen == 0)
                return len == 0 ? 0 : -EACCES;
        if (len != JP_SIGNATURE_HEX_LEN)
                return -EACCES;
        rc = jp_signer_sign(s, msg, expected);
        if (rc < 0)
                return rc;
        /* Constant time, so the answer's timing reveals nothing of the key. */
        return CRYPTO_memcmp(expected, signature, JP_SIGNATURE_HEX_LEN) == 0 ? 0 : -EACCES;
}
