#include "autoconf.h"

#include "protocol/ids.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

static const char hex_digits[] = "0123456789abcdef";

int jp_random_bytes(void *out, size_t n)
{
        unsigned char *p = out;

        while (n > 0) {
                ssize_t got = getrandom(p, n, 0);

                if (got < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += got;
                n -= (size_t)got;
        }
        return 0;
}

int jp_random_hex(char *out, size_t nbytes)
{
        unsigned char raw[64];
        size_t done = 0;

        while (done < nbytes) {
                size_t chunk = nbytes - done < sizeof(raw) ? nbytes - done : sizeof(raw);
                int rc = jp_random_bytes(raw, chunk);

                if (rc < 0)
                        return rc;
                for (size_t i = 0; i < chunk; i++) {
                        out[2 * (done + i)] = hex_digits[raw[i] >> 4];
                        out[2 * (done + i) + 1] = hex_digits[raw[i] & 15];
                }
                done += chunk;
        }
        out[2 * nbytes] = '\0';
        return 0;
}

static void uuid_format(unsigned char b[16], char out[JP_UUID_SIZE])
{
        size_t o = 0;

        b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
        b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
        for (size_t i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10)
                        out[o++] = '-';
                out[o++] = hex_digits[b[i] >> 4];
                out[o++] = hex_digits[b[i] & 15];
        }
        out[o] = '\0';
}

int jp_uuid4(char out[JP_UUID_SIZE])
{
        unsigned char b[16];
        int rc = jp_random_bytes(b, sizeof(b));

        if (rc < 0)
                return rc;
        uuid_format(b, out);
        return 0;
}

void jp_uuid_derive(const char *base, const char *old, char out[JP_UUID_SIZE])
{
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int len = 0;

        HMAC(EVP_sha256(), base, (int)strlen(base), (const unsigned char *)old, strlen(old), mac,
             &len);
        uuid_format(mac, out);
}

int jp_uuid_valid(const char *s, size_t len)
{
        if (len != 36)
                return 0;
        for (size_t i = 0; i < 36; i++) {
                char c = s[i];

                if (i == 8 || i == 13 || i == 18 || i == 23) {
                        if (c != '-')
                                return 0;
                } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                        return 0;
                }
        }
        return 1;
}

void jp_timestamp_format(const struct timespec *when, char out[JP_TIMESTAMP_SIZE])
{
        struct tm tm;
        size_t n;

        gmtime_r(&when->tv_sec, &tm);
        n = strftime(out, JP_TIMESTAMP_SIZE, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out + n, JP_TIMESTAMP_SIZE - n, ".%06uZ",
                 (unsigned)(when->tv_nsec / 1000) % 1000000u);
}

void jp_timestamp_now(char out[JP_TIMESTAMP_SIZE])
{
        struct timespec now;

        clock_gettime(CLOCK_REALTIME, &now);
        jp_timestamp_format(&now, out);
}
