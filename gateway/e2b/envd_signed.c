/* E2B's signed file URLs. download_url(path, user, expiration) and
 * upload_url(...) give
 *     {origin}/files?path=P[&username=U]&signature=v1_S[&signature_expiration=E]
 * on the sandbox URL's origin, for a bare GET (read) or POST (write) that
 * carries nothing of the sandbox's: S is the unpadded base64 of
 * SHA-256("P:read:U:T") (or "P:write:U:T", and ":E" after T when E is
 * given), T the sandbox's access token. So a URL is good only for its
 * path, operation, user, expiry and sandbox: the token is the sandbox's
 * secret, and whichever sandbox's token makes S is the sandbox the URL
 * reads or writes. Checked at the headers, before any of a body is read,
 * as envd checks it (internal/api/auth.go): the signature, then the
 * expiry. */
#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/core/http.h"

#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIGNATURE_VERSION "v1_"
/* "v1_" and the unpadded base64 of a SHA-256: 3 + 43 characters. */
#define SIGNATURE_LEN 46
#define USER_MAX      64

struct signed_request {
        char path[PATH_MAX + 1];
        char user[USER_MAX];
        const char *operation; /* "read" or "write" */
        char expiration[24];   /* as given; "" when absent */
        char signature[SIGNATURE_LEN + 2];
};

bool envd_signed(struct http_request *r)
{
        char signature[SIGNATURE_LEN + 2];

        return http_query_arg(r->wsi, "signature", signature, sizeof(signature)) != -ENOENT;
}

/* What the SDK computes (e2b/sandbox/signature.py): the version, then
 * base64 without its '=' padding. */
static void sign(const struct signed_request *q, const char *token, char out[SIGNATURE_LEN + 1])
{
        unsigned char digest[EVP_MAX_MD_SIZE], b64[64];
        unsigned int dlen = 0;
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        int n;

        out[0] = '\0';
        if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
            EVP_DigestUpdate(md, q->path, strlen(q->path)) != 1 ||
            EVP_DigestUpdate(md, ":", 1) != 1 ||
            EVP_DigestUpdate(md, q->operation, strlen(q->operation)) != 1 ||
            EVP_DigestUpdate(md, ":", 1) != 1 ||
            EVP_DigestUpdate(md, q->user, strlen(q->user)) != 1 ||
            EVP_DigestUpdate(md, ":", 1) != 1 || EVP_DigestUpdate(md, token, strlen(token)) != 1 ||
            (q->expiration[0] &&
             (EVP_DigestUpdate(md, ":", 1) != 1 ||
              EVP_DigestUpdate(md, q->expiration, strlen(q->expiration)) != 1)) ||
            EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != 32)
                goto out;
        n = EVP_EncodeBlock(b64, digest, (int)dlen);
        while (n > 0 && b64[n - 1] == '=')
                n--;
        snprintf(out, SIGNATURE_LEN + 1, SIGNATURE_VERSION "%.*s", n, (const char *)b64);
out:
        EVP_MD_CTX_free(md);
}

/* Whether token made the request's signature (constant time). */
static bool signed_with(const char *token, void *arg_)
{
        const struct signed_request *q = arg_;
        char expected[SIGNATURE_LEN + 1];
        bool ok;

        sign(q, token, expected);
        ok = expected[0] && strlen(q->signature) == strlen(expected) &&
             CRYPTO_memcmp(q->signature, expected, strlen(expected)) == 0;
        OPENSSL_cleanse(expected, sizeof(expected));
        return ok;
}

/* An expiration is a Unix time in seconds, digits only (an optional '-'
 * for one already past, as the SDK makes for a negative duration). */
static bool parse_expiration(const char *text, long long *out)
{
        char *end;

        errno = 0;
        *out = strtoll(text, &end, 10);
        return text[0] && text[0] != '+' && text[0] != ' ' && *end == '\0' && errno == 0;
}

bool envd_signed_admit(struct http_request *r)
{
        struct signed_request q = {.operation = r->method == HTTP_POST ? "write" : "read"};
        long long expiration = 0;
        int rc;

        if (r->method != HTTP_GET && r->method != HTTP_POST) {
                e2b_reply_error(r, 405, "a signed file URL takes GET (download) or POST (upload)");
                return false;
        }
        if (http_query_arg(r->wsi, "signature", q.signature, sizeof(q.signature)) != 0) {
                e2b_reply_error(r, 401, "invalid signature");
                return false;
        }
        if (http_query_arg(r->wsi, "path", q.path, sizeof(q.path)) != 0) {
                e2b_reply_error(r, 400, "the path parameter is missing or too long");
                return false;
        }
        /* No username signs as "": the sandbox's default user. */
        if (http_query_arg(r->wsi, "username", q.user, sizeof(q.user)) == -E2BIG) {
                e2b_reply_error(r, 400, "the username parameter is too long");
                return false;
        }
        rc = http_query_arg(r->wsi, "signature_expiration", q.expiration, sizeof(q.expiration));
        if (rc == -E2BIG || (rc == 0 && !parse_expiration(q.expiration, &expiration))) {
                e2b_reply_error(r, 400, "signature_expiration must be a Unix time in seconds");
                return false;
        }
        return e2b_admit_signed(r, signed_with, &q,
                                q.expiration[0] && expiration < (long long)time(NULL));
}
