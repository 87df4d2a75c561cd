/* Terminal output as text: a pseudo-terminal gives bytes, cut wherever a
 * read ends, and not always UTF-8; a WebSocket text frame and a JSON string
 * must be valid UTF-8. */
#ifndef GLOVEBOX_UTF8_H
#define GLOVEBOX_UTF8_H

#include "protocol/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Appends in[0..len) to out as valid UTF-8: each invalid byte becomes
 * U+FFFD. Unless final, a character cut off at the end (at most 3 bytes)
 * is left for the next call: returns how many bytes were consumed (the
 * caller keeps the rest in front of its next piece). -E2BIG or -ENOMEM
 * when out cannot take it. */
ssize_t utf8_sanitize(const uint8_t *in, size_t len, bool final, struct buf *out);

#endif
