/* The Jupyter message model shared by every codec.
 *
 * A message is held as views of its JSON parts exactly as they travel on
 * the ZMQ wire (header, parent_header, metadata, content), plus binary
 * buffers and, on ROUTER sockets, routing identities. Codecs fill views that
 * point into the caller's frames, so relaying never re-encodes JSON; a
 * decoder that has to build new bytes keeps them in msg->owned, released by
 * jp_msg_release(). */
#ifndef GLOVEBOX_MESSAGE_H
#define GLOVEBOX_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#define JP_MAX_BUFFERS    64 /* binary buffers per message */
#define JP_MAX_IDENTITIES 16 /* ZMQ routing identities before "<IDS|MSG>" */
#define JP_MSG_ID_SIZE    128
#define JP_MSG_TYPE_SIZE  64

enum jp_channel {
        JP_SHELL = 0,
        JP_CONTROL,
        JP_STDIN,
        JP_IOPUB,
        JP_HB,
        JP_CHANNEL_COUNT,
};

struct jp_bytes {
        const uint8_t *ptr;
        size_t len;
};

struct jp_msg {
        enum jp_channel channel;
        struct jp_bytes header;
        struct jp_bytes parent_header;
        struct jp_bytes metadata;
        struct jp_bytes content;
        size_t nbuffers;
        struct jp_bytes buffers[JP_MAX_BUFFERS];
        size_t nidentities;
        struct jp_bytes identities[JP_MAX_IDENTITIES];
        void *owned; /* storage some decoders allocate; see jp_msg_release */
};

/* Resets the message: no parts, no buffers, no identities (the arrays
 * themselves are not cleared; only their first n entries count). */
void jp_msg_init(struct jp_msg *msg);
/* Frees msg->owned (the views into it become invalid) and re-initialises. */
void jp_msg_release(struct jp_msg *msg);

const char *jp_channel_name(enum jp_channel channel);
/* Parses a channel name of len bytes; 0 or -EINVAL. */
int jp_channel_parse(const char *name, size_t len, enum jp_channel *out);

/* Reads msg_id and msg_type out of a header's JSON. Both outputs are always
 * NUL-terminated; -EBADMSG when the header is not an object with string
 * msg_id and msg_type that fit. */
int jp_header_fields(struct jp_bytes header, char msg_id[JP_MSG_ID_SIZE],
                     char msg_type[JP_MSG_TYPE_SIZE]);

/* Finds the string value of key (a plain key, no escapes) at the top level
 * of a JSON object without parsing it: *token gets the string as it is in
 * the JSON, quotes included, ready to be copied into other JSON. The token
 * is checked (valid escapes, no raw control characters, UTF-8); with
 * duplicate keys the last counts, as in jansson. 0, -ENOENT when the key
 * is absent, or -EBADMSG when the scan is unsure (the caller then parses). */
int jp_json_string_token(struct jp_bytes object, const char *key, struct jp_bytes *token);
/* The same for n keys in one pass over the object (tokens[i] for keys[i]);
 * -ENOENT when any is absent. */
int jp_json_string_tokens(struct jp_bytes object, const char *const *keys, struct jp_bytes *tokens,
                          size_t n);

#endif
