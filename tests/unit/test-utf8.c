/* protocol/utf8.c: terminal bytes made valid UTF-8, cut characters kept
 * for the next piece. */
#include "autoconf.h"

#include "protocol/utf8.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <string.h>

static void check(const char *in, size_t len, bool final, const char *want, ssize_t consumed,
                  const char *name)
{
        struct buf out;
        ssize_t n;

        buf_init(&out, 1024);
        n = utf8_sanitize((const uint8_t *)in, len, final, &out);
        is_int((int)n, (int)consumed, "%s: bytes consumed", name);
        is_mem(out.data ? out.data : "", out.len, want, strlen(want), "%s: text", name);
        buf_free(&out);
}

int main(void)
{
        check("plain $ ls\r\n", 12, false, "plain $ ls\r\n", 12, "ASCII passes through");
        check("h\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80", 12, false,
              "h\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80", 12, "2, 3 and 4 byte characters");
        check("ab\xe2\x98", 4, false, "ab", 2, "a cut character waits for the next piece");
        check("ab\xf0", 3, false, "ab", 2, "a lone lead byte at the end waits too");
        check("ab\xe2\x98", 4, true, "ab\xef\xbf\xbd\xef\xbf\xbd", 4,
              "at the end of output it is replaced");
        check("a\xffz", 3, false, "a\xef\xbf\xbdz", 3, "an invalid byte becomes U+FFFD");
        check("\xc0\xaf", 2, false, "\xef\xbf\xbd\xef\xbf\xbd", 2, "an overlong form is refused");
        check("\xed\xa0\x80", 3, false, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3,
              "a surrogate is refused");
        check("\xf4\x90\x80\x80", 4, false, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 4,
              "past U+10FFFF is refused");
        check("\xe2(x", 3, false, "\xef\xbf\xbd(x", 3, "a sequence broken in the middle");
        check("", 0, false, "", 0, "nothing");
        {
                struct buf small;

                buf_init(&small, 2);
                is_int((int)utf8_sanitize((const uint8_t *)"abc", 3, false, &small), -E2BIG,
                       "a full buffer says so");
                buf_free(&small);
        }
        return done_testing();
}
