/* HMAC-SHA256 message signatures, as the connection file's key demands.
 *
 * The signature is the lowercase hex HMAC over header, parent_header,
 * metadata and content, in that order; buffers are not signed. An empty key
 * means no signing: the signature is the empty string and only an empty
 * signature verifies. */
#ifndef GLOVEBOX_SIGN_H
#define GLOVEBOX_SIGN_H

#include "protocol/message.h"

#define JP_SIGNATURE_HEX_LEN 64
#define JP_MAX_KEY_LEN       256

struct jp_signer;

/* Creates a signer for key (copied). The caller destroys it. 0 or -errno. */
int jp_signer_new(const void *key, size_t keylen, struct jp_signer **out);
/* The same for key with proto's MAC and digest, which it takes rather than
 * looks up again: where proto was made once before a fork, a child keys a
 * signer of its own without writing to OpenSSL's shared tables
 * (kernel-host/zygote_wire.c). A proto without a key: jp_signer_new. */
int jp_signer_new_like(const struct jp_signer *proto, const void *key, size_t keylen,
                       struct jp_signer **out);
void jp_signer_destroy(struct jp_signer **signer);
/* Writes the signature of msg and a NUL into hex (empty for an empty key). */
int jp_signer_sign(struct jp_signer *signer, const struct jp_msg *msg,
                   char hex[JP_SIGNATURE_HEX_LEN + 1]);
/* 0 when signature (len bytes, not NUL-terminated) matches, compared in
 * constant time; -EACCES otherwise. */
int jp_signer_verify(struct jp_signer *signer, const struct jp_msg *msg, const uint8_t *signature,
                     size_t len);

#endif
