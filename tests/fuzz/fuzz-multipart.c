/* libFuzzer target for the streaming multipart/form-data parser
 * (protocol/multipart.c).
 *
 * Input: a mode byte, then two bytes (little-endian) choosing where the
 * body is cut. Then, by bit 0 of the mode byte:
 *
 *   0, parse: a Content-Type value up to the first LF, and the body after
 *      it. A part named "stop" makes begin fail with -ECANCELED.
 *   1, round trip: bits 1 and 2 of the mode byte add a preamble and an
 *      epilogue; then parts, each a flags byte (bit 0: a filename, bit 1: a
 *      Content-Type header, bit 2: no headers at all), a two-byte length
 *      and that many payload bytes (a short last payload takes what is
 *      left). The harness writes the body with a fixed boundary, skipping
 *      inputs whose payloads hold the delimiter.
 *
 * Every event (begin with its name and filename, data, end) is written to
 * a log. Invariants: parsed whole, in two pieces and one byte at a time,
 * the log, the return code and done are the same; events nest (no data or
 * end outside a part, no begin inside one, no empty data); done means
 * every part ended; the only errors are -EBADMSG and the harness's own; a
 * Content-Type accepted gives a delimiter of CRLF "--" and 1 to
 * MULTIPART_MAX_BOUNDARY bytes without CR or LF. A round trip returns 0,
 * is done, and logs exactly the parts written. */
#include "autoconf.h"

#include "protocol/multipart.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1 << 16)
#define MAX_PARTS      64
#define MAX_LOG        (8 * FUZZ_MAX_INPUT + 2 * PATH_MAX)
#define RT_BOUNDARY    "----GloveboxFuzzBoundary7MA4YWxkTrZu0gW"

struct outcome {
        char log[MAX_LOG];
        size_t len;
        int begins, ends;
        bool in_part;
        int rc;
        bool done;
};

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-multipart: invariant broken: %s\n", what);
        abort();
}

static void log_append(struct outcome *o, const void *p, size_t n)
{
        if (n > sizeof(o->log) - o->len)
                fail("the log outgrew its bound");
        memcpy(o->log + o->len, p, n);
        o->len += n;
}

static void log_str(struct outcome *o, const char *s)
{
        log_append(o, s, strlen(s));
}

static int on_begin(void *arg, const char *name, const char *filename)
{
        struct outcome *o = arg;

        if (o->in_part)
                fail("begin inside a part");
        if (strlen(name) > 255 || strlen(filename) >= PATH_MAX)
                fail("a name or filename longer than its buffer");
        o->in_part = true;
        o->begins++;
        log_str(o, "<begin name=");
        log_str(o, name);
        log_str(o, " filename=");
        log_str(o, filename);
        log_str(o, ">");
        return strcmp(name, "stop") == 0 ? -ECANCELED : 0;
}

static int on_data(void *arg, const uint8_t *data, size_t len)
{
        struct outcome *o = arg;

        if (!o->in_part)
                fail("data outside a part");
        if (len == 0)
                fail("data with nothing");
        log_append(o, data, len);
        return 0;
}

static int on_end(void *arg)
{
        struct outcome *o = arg;

        if (!o->in_part)
                fail("end outside a part");
        o->in_part = false;
        o->ends++;
        log_str(o, "<end>");
        return 0;
}

static const struct multipart_handler handler = {on_begin, on_data, on_end};

static void parse(const char *ct, const uint8_t *body, size_t len, const size_t *cuts, size_t ncuts,
                  struct outcome *o)
{
        static struct multipart m;
        size_t at = 0;

        o->len = 0;
        o->begins = o->ends = 0;
        o->in_part = false;
        if (multipart_init(&m, ct, &handler, o) != 0)
                fail("multipart_init refused what it accepted before");
        o->rc = 0;
        for (size_t k = 0; k <= ncuts && o->rc == 0; k++) {
                size_t end = k < ncuts ? cuts[k] : len;

                o->rc = multipart_feed(&m, body + at, end - at);
                at = end;
        }
        if (o->rc != 0 && o->rc != -EBADMSG && o->rc != -ENAMETOOLONG && o->rc != -ECANCELED)
                fail("an error that is neither -EBADMSG, -ENAMETOOLONG nor a handler's");
        o->done = m.done;
        if (o->done && (o->rc != 0 || o->in_part || o->begins != o->ends))
                fail("done with a part still open or after an error");
}

static void compare(const struct outcome *a, const struct outcome *b, const char *how)
{
        if (a->rc != b->rc || a->done != b->done || a->begins != b->begins || a->ends != b->ends ||
            a->len != b->len || memcmp(a->log, b->log, a->len) != 0) {
                fprintf(stderr,
                        "fuzz-multipart: %s: rc %d vs %d, done %d vs %d, %d vs %d begins, "
                        "%d vs %d ends, log %zu vs %zu bytes\n",
                        how, a->rc, b->rc, (int)a->done, (int)b->done, a->begins, b->begins,
                        a->ends, b->ends, a->len, b->len);
                fail("the outcome depends on where the body is cut");
        }
}

/* Parses whole, in two pieces and byte by byte; leaves the whole parse in
 * *whole. */
static void parse_three_ways(const char *ct, const uint8_t *body, size_t len, size_t cut,
                             struct outcome *whole)
{
        static struct outcome halves, bytes;
        static size_t cuts[FUZZ_MAX_INPUT];

        parse(ct, body, len, NULL, 0, whole);
        parse(ct, body, len, &cut, 1, &halves);
        for (size_t i = 1; i < len; i++)
                cuts[i - 1] = i;
        parse(ct, body, len, cuts, len ? len - 1 : 0, &bytes);
        compare(whole, &halves, "whole vs two pieces");
        compare(whole, &bytes, "whole vs one byte at a time");
}

/* Whether ct is accepted; what it gives is checked. */
static bool check_content_type(const char *ct)
{
        static struct multipart m;

        if (multipart_init(&m, ct, &handler, NULL) != 0)
                return false;
        if (m.dlen < 5 || m.dlen > MULTIPART_MAX_BOUNDARY + 4 ||
            memcmp(m.delimiter, "\r\n--", 4) != 0 || memchr(m.delimiter + 4, '\r', m.dlen - 4) ||
            memchr(m.delimiter + 4, '\n', m.dlen - 4))
                fail("an accepted boundary out of bounds or holding CR or LF");
        return true;
}

static void parse_mode(const uint8_t *in, size_t size, size_t cut_seed)
{
        static char ct[512];
        static struct outcome whole;
        const uint8_t *lf = memchr(in, '\n', size < sizeof(ct) ? size : sizeof(ct));
        size_t ct_len, len;
        const uint8_t *body;

        if (!lf)
                return;
        ct_len = (size_t)(lf - in);
        memcpy(ct, in, ct_len);
        ct[ct_len] = '\0';
        if (!check_content_type(ct))
                return;
        body = lf + 1;
        len = size - ct_len - 1;
        parse_three_ways(ct, body, len, cut_seed % (len + 1), &whole);
}

static void append(uint8_t *out, size_t *len, size_t max, const void *p, size_t n)
{
        if (n > max - *len)
                fail("the round-trip body outgrew its buffer");
        memcpy(out + *len, p, n);
        *len += n;
}

static void append_str(uint8_t *out, size_t *len, size_t max, const char *s)
{
        append(out, len, max, s, strlen(s));
}

static void round_trip(uint8_t mode, const uint8_t *in, size_t size, size_t cut_seed)
{
        static const char delim[] = "\r\n--" RT_BOUNDARY;
        static uint8_t body[2 * FUZZ_MAX_INPUT];
        static char want[MAX_LOG];
        static struct outcome whole;
        size_t len = 0, wlen = 0, at = 0, nparts = 0;
        char head[256];
        int n;

        /* A preamble may hold a CRLF, dashes and most of the delimiter. */
        if (mode & 2)
                append_str(body, &len, sizeof(body),
                           "preamble\r\n-\r\n----GloveboxFuzzBoundary\r\n");
        while (at < size && nparts < MAX_PARTS) {
                uint8_t flags = in[at++];
                size_t plen = 0;
                const uint8_t *payload;

                if (at < size)
                        plen = in[at++];
                if (at < size)
                        plen |= (size_t)in[at++] << 8;
                if (plen > size - at)
                        plen = size - at;
                payload = in + at;
                at += plen;
                /* The one thing a sender must avoid. */
                if (plen >= sizeof(delim) - 1 &&
                    memmem(payload, plen, delim, sizeof(delim) - 1) != NULL)
                        return;
                if (flags & 4) {
                        n = snprintf(head, sizeof(head), "--%s\r\n\r\n", RT_BOUNDARY);
                        append(body, &len, sizeof(body), head, (size_t)n);
                        n = snprintf(want + wlen, sizeof(want) - wlen, "<begin name= filename=>");
                } else {
                        n = snprintf(head, sizeof(head),
                                     "--%s\r\nContent-Disposition: form-data; name=\"p%zu\"%s%s"
                                     "\r\n%s\r\n",
                                     RT_BOUNDARY, nparts, flags & 1 ? "; filename=\"f" : "",
                                     flags & 1 ? ".bin\"" : "",
                                     flags & 2 ? "Content-Type: application/octet-stream\r\n" : "");
                        append(body, &len, sizeof(body), head, (size_t)n);
                        n = snprintf(want + wlen, sizeof(want) - wlen,
                                     "<begin name=p%zu filename=%s>", nparts,
                                     flags & 1 ? "f.bin" : "");
                }
                wlen += (size_t)n;
                append(body, &len, sizeof(body), payload, plen);
                append(body, &len, sizeof(body), "\r\n", 2);
                memcpy(want + wlen, payload, plen);
                wlen += plen;
                memcpy(want + wlen, "<end>", 5);
                wlen += 5;
                nparts++;
        }
        append_str(body, &len, sizeof(body), "--" RT_BOUNDARY "--");
        if (mode & 4)
                append_str(body, &len, sizeof(body), "\r\nepilogue\r\n--" RT_BOUNDARY "\r\n");

        parse_three_ways("multipart/form-data; boundary=" RT_BOUNDARY, body, len,
                         cut_seed % (len + 1), &whole);
        if (whole.rc != 0)
                fail("a round trip failed");
        if (!whole.done)
                fail("a round trip is not done");
        if (whole.len != wlen || memcmp(whole.log, want, wlen) != 0)
                fail("a round trip returned other parts than were written");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        size_t cut_seed;

        if (size < 3 || size > FUZZ_MAX_INPUT)
                return 0;
        cut_seed = (size_t)data[1] | (size_t)data[2] << 8;
        if (data[0] & 1)
                round_trip(data[0], data + 3, size - 3, cut_seed);
        else
                parse_mode(data + 3, size - 3, cut_seed);
        return 0;
}
