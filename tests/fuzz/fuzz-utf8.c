/* libFuzzer target for terminal output made valid UTF-8 (protocol/utf8.c).
 *
 * Input: one byte choosing where the bytes are cut, then the bytes. They
 * are sanitized whole, and in two pieces (the first one's unconsumed tail
 * carried in front of the second, as the gateway does between reads).
 * Invariants: the output is valid UTF-8 (jansson accepts it as a string);
 * both ways give the same text; a piece that is not final leaves at most 3
 * bytes, only at its end; a final piece consumes everything. */
#include "autoconf.h"

#include "protocol/utf8.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1 << 16)

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-utf8: invariant broken: %s\n", what);
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static uint8_t carried[FUZZ_MAX_INPUT + 4];
        struct buf whole, pieces;
        size_t cut, rest;
        ssize_t n;
        json_t *s;

        if (size < 1 || size > FUZZ_MAX_INPUT)
                return 0;
        cut = data[0] % size;
        data++;
        size--;
        buf_init(&whole, 4 * (size_t)FUZZ_MAX_INPUT);
        buf_init(&pieces, 4 * (size_t)FUZZ_MAX_INPUT);
        n = utf8_sanitize(data, size, true, &whole);
        if (n != (ssize_t)size)
                fail("a final piece is consumed whole");
        s = json_stringn(whole.data ? whole.data : "", whole.len);
        if (!s)
                fail("the output is valid UTF-8");
        json_decref(s);

        n = utf8_sanitize(data, cut, false, &pieces);
        if (n < 0 || (size_t)n > cut || cut - (size_t)n > 3)
                fail("a piece leaves at most 3 bytes");
        rest = cut - (size_t)n;
        memcpy(carried, data + n, rest);
        memcpy(carried + rest, data + cut, size - cut);
        n = utf8_sanitize(carried, rest + size - cut, true, &pieces);
        if (n != (ssize_t)(rest + size - cut))
                fail("the last piece is consumed whole");
        if (whole.len != pieces.len || (whole.len && memcmp(whole.data, pieces.data, whole.len) != 0))
                fail("whole and in pieces give the same text");
        buf_free(&whole);
        buf_free(&pieces);
        return 0;
}
