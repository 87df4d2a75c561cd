#include "autoconf.h"

#include "protocol/utf8.h"

#include <errno.h>

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

/* The length of the sequence a lead byte starts, and the range its second
 * byte must fall in (which rules out overlong forms, surrogates and code
 * points past U+10FFFF, as RFC 3629 says); 0 for a byte no sequence starts
 * with. */
static size_t sequence(uint8_t lead, uint8_t *lo, uint8_t *hi)
{
        *lo = 0x80;
        *hi = 0xbf;
        if (lead < 0x80)
                return 1;
        if (lead >= 0xc2 && lead <= 0xdf)
                return 2;
        if (lead >= 0xe0 && lead <= 0xef) {
                if (lead == 0xe0)
                        *lo = 0xa0;
                else if (lead == 0xed)
                        *hi = 0x9f;
                return 3;
        }
        if (lead >= 0xf0 && lead <= 0xf4) {
                if (lead == 0xf0)
                        *lo = 0x90;
                else if (lead == 0xf4)
                        *hi = 0x8f;
                return 4;
        }
        return 0;
}

ssize_t utf8_sanitize(const uint8_t *in, size_t len, bool final, struct buf *out)
{
        size_t i = 0, run = 0; /* run: valid bytes from i - run not yet appended */
        int rc;

        while (i < len) {
                uint8_t lo, hi;
                size_t n = sequence(in[i], &lo, &hi), k = 1;

                while (n && k < n && i + k < len) {
                        uint8_t c = in[i + k];

                        if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xbf))
                                break;
                        k++;
                }
                if (n && k == n) {
                        i += n;
                        run += n;
                        continue;
                }
                /* Cut off by the end of this piece: the rest may follow. */
                if (n && i + k == len && !final)
                        break;
                rc = buf_append(out, in + i - run, run);
                if (rc == 0)
                        rc = buf_append(out, replacement, 3);
                if (rc < 0)
                        return rc;
                run = 0;
                i += 1;
        }
        rc = buf_append(out, in + i - run, run);
        return rc < 0 ? rc : (ssize_t)i;
}
