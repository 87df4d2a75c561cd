#include "autoconf.h"

#include "protocol/multipart.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

enum { PREAMBLE, AFTER_DELIMITER, AFTER_DELIMITER_LF, FINAL_DASH, HEADERS, DATA, EPILOGUE };

/* Where the value of parameter key ("boundary=", "name=") of a header value
 * starts, or NULL. A key counts only at the start of a parameter and
 * outside quotes: "name=" must not match the end of "filename=", nor a
 * "; name=" inside a quoted filename, which the sender chose. */
static const char *find_param(const char *s, const char *key)
{
        size_t klen = strlen(key);
        bool quoted = false;

        for (const char *p = s; *p; p++) {
                if (*p == '"')
                        quoted = !quoted;
                else if (!quoted && p > s && (p[-1] == ' ' || p[-1] == ';' || p[-1] == '\t') &&
                         strncmp(p, key, klen) == 0)
                        return p + klen;
        }
        return NULL;
}

int multipart_init(struct multipart *m, const char *content_type,
                   const struct multipart_handler *handler, void *arg)
{
        const char *b;
        size_t len = 0;

        memset(m, 0, sizeof(*m));
        /* The whole media type: "multipart/form-database" is another one. */
        if (strncasecmp(content_type, "multipart/form-data", 19) != 0 ||
            !strchr("; \t", content_type[19]))
                return -EINVAL;
        b = find_param(content_type, "boundary=");
        if (!b)
                return -EINVAL;
        if (*b == '"') {
                b++;
                while (b[len] && b[len] != '"')
                        len++;
        } else {
                len = strcspn(b, "; \t");
        }
        if (len == 0 || len > MULTIPART_MAX_BOUNDARY || memchr(b, '\r', len) || memchr(b, '\n', len))
                return -EINVAL;
        memcpy(m->delimiter, "\r\n--", 4);
        memcpy(m->delimiter + 4, b, len);
        m->dlen = len + 4;
        m->handler = handler;
        m->arg = arg;
        /* The body opens with "--boundary": as if a CRLF came first. */
        m->state = PREAMBLE;
        m->match = 2;
        return 0;
}

/* Copies the value of parameter key (name= or filename=) of a
 * Content-Disposition line into out. -ENAMETOOLONG when it does not fit:
 * a filename names the file written, so it is never silently cut. */
static int disposition_param(const char *line, const char *key, char *out, size_t size)
{
        const char *p = find_param(line, key);
        size_t n = 0;

        out[0] = '\0';
        if (!p)
                return 0;
        if (*p == '"') {
                p++;
                while (*p && *p != '"' && n + 1 < size)
                        out[n++] = *p++;
                if (*p && *p != '"')
                        return -ENAMETOOLONG;
        } else {
                while (*p && *p != ';' && *p != '\r' && n + 1 < size)
                        out[n++] = *p++;
                if (*p && *p != ';' && *p != '\r')
                        return -ENAMETOOLONG;
        }
        out[n] = '\0';
        return 0;
}

static int headers_done(struct multipart *m)
{
        /* Valid during the begin() callback only. */
        static char name[256], filename[PATH_MAX];
        char *line = m->headers;

        m->headers[m->hlen] = '\0';
        name[0] = filename[0] = '\0';
        while (line && *line) {
                char *next = strstr(line, "\r\n");

                if (next)
                        *next = '\0';
                if (strncasecmp(line, "content-disposition:", 20) == 0 &&
                    (disposition_param(line, "name=", name, sizeof(name)) < 0 ||
                     disposition_param(line, "filename=", filename, sizeof(filename)) < 0))
                        return -ENAMETOOLONG;
                line = next ? next + 2 : NULL;
        }
        m->hlen = 0;
        return m->handler->begin(m->arg, name, filename);
}

/* In DATA (or the preamble, whose bytes are dropped): emits everything up
 * to the delimiter and returns the bytes consumed, the delimiter included
 * when found (then the state moves on). Bytes that may begin the delimiter
 * are held back (only as a count: they equal the delimiter's prefix) and
 * emitted once a mismatch shows they were data. */
static long scan_data(struct multipart *m, const uint8_t *in, size_t len)
{
        bool emit = m->state == DATA;
        size_t run = 0; /* start of the data bytes not yet emitted */
        int rc = 0;

        for (size_t i = 0; i < len && rc >= 0; i++) {
                if (in[i] == (uint8_t)m->delimiter[m->match]) {
                        if (m->match == 0 && emit && i > run)
                                rc = m->handler->data(m->arg, in + run, i - run);
                        run = i + 1;
                        if (rc >= 0 && ++m->match == m->dlen) {
                                m->match = 0;
                                m->state = AFTER_DELIMITER;
                                if (emit)
                                        rc = m->handler->end(m->arg);
                                return rc < 0 ? rc : (long)(i + 1);
                        }
                        continue;
                }
                if (m->match == 0)
                        continue;
                /* A false start: the held bytes were data. Only the
                 * delimiter's first byte (CR) can start it again, since the
                 * boundary holds no CR. */
                if (emit)
                        rc = m->handler->data(m->arg, (const uint8_t *)m->delimiter, m->match);
                m->match = 0;
                if (in[i] == (uint8_t)m->delimiter[0]) {
                        m->match = 1;
                        run = i + 1;
                }
        }
        if (rc >= 0 && emit && len > run)
                rc = m->handler->data(m->arg, in + run, len - run);
        return rc < 0 ? rc : (long)len;
}

int multipart_feed(struct multipart *m, const uint8_t *in, size_t len)
{
        size_t i = 0;

        while (i < len) {
                long n;

                switch (m->state) {
                case PREAMBLE:
                case DATA:
                        n = scan_data(m, in + i, len - i);
                        if (n < 0)
                                return (int)n;
                        i += (size_t)n;
                        break;
                case AFTER_DELIMITER:
                        /* "--" ends the body; CRLF starts a part. */
                        if (in[i] == '-')
                                m->state = FINAL_DASH;
                        else if (in[i] == '\r')
                                m->state = AFTER_DELIMITER_LF;
                        else if (in[i] != ' ' && in[i] != '\t')
                                return -EBADMSG;
                        i++;
                        break;
                case AFTER_DELIMITER_LF:
                        if (in[i++] != '\n')
                                return -EBADMSG;
                        m->state = HEADERS;
                        m->hlen = 0;
                        break;
                case FINAL_DASH:
                        if (in[i++] != '-')
                                return -EBADMSG;
                        m->state = EPILOGUE;
                        m->done = true;
                        break;
                case HEADERS:
                        if (m->hlen + 1 >= sizeof(m->headers))
                                return -EBADMSG;
                        m->headers[m->hlen++] = (char)in[i++];
                        if (m->hlen >= 4 && memcmp(m->headers + m->hlen - 4, "\r\n\r\n", 4) == 0) {
                                int rc;

                                m->hlen -= 2; /* keep the last line's CRLF */
                                rc = headers_done(m);
                                if (rc < 0)
                                        return rc;
                                m->state = DATA;
                        } else if (m->hlen == 2 && memcmp(m->headers, "\r\n", 2) == 0) {
                                /* A part without headers. */
                                int rc;

                                m->hlen = 0;
                                rc = headers_done(m);
                                if (rc < 0)
                                        return rc;
                                m->state = DATA;
                        }
                        break;
                default: /* EPILOGUE: ignored */
                        return 0;
                }
        }
        return 0;
}
