#include "autoconf.h"

#include "protocol/request.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A field a request's content must have, of a JSON type. */
struct required_field {
        const char *name;
        json_type type; /* JSON_INTEGER, JSON_STRING, JSON_TRUE (any boolean) */
};

/* Every msg_type a client sends to a kernel (messaging spec 5.3 to 5.5,
 * with what ipykernel also serves: connect, apply, abort, clear, usage), and
 * the fields of its content that ipykernel reads without a default: without
 * them the kernel raises in its handler and sends nothing back. */
static const struct {
        const char *msg_type;
        struct required_field fields[3];
} known[] = {
    {"execute_request", {{"code", JSON_STRING}}},
    {"inspect_request", {{"code", JSON_STRING}, {"cursor_pos", JSON_INTEGER}}},
    {"complete_request", {{"code", JSON_STRING}, {"cursor_pos", JSON_INTEGER}}},
    {"is_complete_request", {{"code", JSON_STRING}}},
    {"history_request", {{"hist_access_type", JSON_STRING}}},
    {"shutdown_request", {{"restart", JSON_TRUE}}},
    {"kernel_info_request", {{NULL, 0}}},
    {"comm_info_request", {{NULL, 0}}},
    {"connect_request", {{NULL, 0}}},
    {"interrupt_request", {{NULL, 0}}},
    {"debug_request", {{NULL, 0}}},
    {"usage_request", {{NULL, 0}}},
    {"apply_request", {{NULL, 0}}},
    {"abort_request", {{NULL, 0}}},
    {"clear_request", {{NULL, 0}}},
    {"create_subshell_request", {{NULL, 0}}},
    {"delete_subshell_request", {{NULL, 0}}},
    {"list_subshell_request", {{NULL, 0}}},
    {"comm_open", {{NULL, 0}}},
    {"comm_msg", {{NULL, 0}}},
    {"comm_close", {{NULL, 0}}},
    {"input_reply", {{NULL, 0}}},
};

#define NKNOWN (sizeof(known) / sizeof(known[0]))

static bool type_matches(json_t *v, json_type type)
{
        if (type == JSON_TRUE)
                return json_is_boolean(v);
        return v && json_typeof(v) == type;
}

static const char *type_name(json_type type)
{
        switch (type) {
        case JSON_STRING:
                return "a string";
        case JSON_INTEGER:
                return "an integer";
        default:
                return "a boolean";
        }
}

/* Parses part as a JSON object; NULL (and a reason) when it is not one. */
static json_t *parse_object(struct jp_bytes part, const char *name, struct jp_request *out)
{
        json_error_t jerr;
        /* (Code may hold \u0000, which Python reads.) */
        json_t *v = json_loadb((const char *)part.ptr, part.len, JSON_ALLOW_NUL, &jerr);

        if (!json_is_object(v)) {
                snprintf(out->reason, sizeof(out->reason), "%s is not a JSON object%s%s", name,
                         v ? "" : ": ", v ? "" : jerr.text);
                json_decref(v);
                return NULL;
        }
        return v;
}

/* Copies a string field of header into dst (size bytes, NUL included). */
static int header_string(json_t *header, const char *key, char *dst, size_t size,
                         struct jp_request *out)
{
        json_t *v = json_object_get(header, key);
        size_t len = json_string_length(v);

        if (!json_is_string(v) || len == 0 || len >= size || strlen(json_string_value(v)) != len) {
                snprintf(out->reason, sizeof(out->reason),
                         "header.%s must be a non-empty string of at most %zu bytes", key,
                         size - 1);
                return -EBADMSG;
        }
        memcpy(dst, json_string_value(v), len + 1);
        return 0;
}

static void reply_type_of(const char *msg_type, char *out, size_t size)
{
        static const char suffix[] = "_request";
        size_t len = strlen(msg_type), slen = sizeof(suffix) - 1;

        if (len > slen && strcmp(msg_type + len - slen, suffix) == 0)
                len -= slen;
        snprintf(out, size, "%.*s_reply", (int)len, msg_type);
}

int jp_request_check(const struct jp_msg *msg, bool parse_all, struct jp_request *out)
{
        static const char *const part_names[3] = {"parent_header", "metadata", "content"};
        const struct jp_bytes *parts[3] = {&msg->parent_header, &msg->metadata, &msg->content};
        json_t *header = NULL, *content = NULL, *v;
        size_t which = NKNOWN;
        int rc;

        memset(out, 0, sizeof(*out));
        header = parse_object(msg->header, "header", out);
        if (!header) {
                rc = -EBADMSG;
                goto out;
        }
        rc = header_string(header, "msg_id", out->msg_id, sizeof(out->msg_id), out);
        if (rc == 0)
                rc = header_string(header, "msg_type", out->msg_type, sizeof(out->msg_type), out);
        if (rc < 0)
                goto out;
        reply_type_of(out->msg_type, out->reply_type, sizeof(out->reply_type));
        for (size_t i = 0; i < NKNOWN; i++) {
                if (strcmp(known[i].msg_type, out->msg_type) == 0)
                        which = i;
        }
        /* The JSON format has parsed (and re-encoded) every part already;
         * v1 relays them as they came, so a part a kernel cannot parse is
         * caught here. Content is parsed when its fields are checked. */
        for (int i = 0; parse_all && i < 2; i++) {
                v = parse_object(*parts[i], part_names[i], out);
                json_decref(v);
                if (!v) {
                        rc = -EBADMSG;
                        goto out;
                }
        }
        if (parse_all || (which < NKNOWN && known[which].fields[0].name)) {
                content = parse_object(*parts[2], part_names[2], out);
                if (!content) {
                        rc = -EBADMSG;
                        goto out;
                }
        }
        if (which == NKNOWN) {
                out->ename = "UnknownMessageType";
                snprintf(out->reason, sizeof(out->reason),
                         "unknown message type %s: no kernel would answer it", out->msg_type);
                rc = -EPROTO;
                goto out;
        }
        for (size_t f = 0; f < 3 && known[which].fields[f].name; f++) {
                const struct required_field *field = &known[which].fields[f];

                if (!type_matches(json_object_get(content, field->name), field->type)) {
                        out->ename = "BadRequest";
                        snprintf(out->reason, sizeof(out->reason), "%s needs content.%s, %s",
                                 out->msg_type, field->name, type_name(field->type));
                        rc = -EPROTO;
                        goto out;
                }
        }
        if (strcmp(out->msg_type, "execute_request") == 0) {
                v = json_object_get(content, "silent");
                if (v && !json_is_boolean(v)) {
                        out->ename = "BadRequest";
                        snprintf(out->reason, sizeof(out->reason),
                                 "execute_request's content.silent must be a boolean");
                        rc = -EPROTO;
                        goto out;
                }
                /* The spec gives silent a default (false) but ipykernel reads
                 * it without one: fill it in rather than refuse the cell. */
                if (!v) {
                        json_object_set_new(content, "silent", json_false());
                        out->content = json_dumps(content, JSON_COMPACT);
                        if (!out->content) {
                                rc = -ENOMEM;
                                goto out;
                        }
                }
        }
        rc = 0;
out:
        json_decref(header);
        json_decref(content);
        return rc;
}

void jp_request_release(struct jp_request *out)
{
        free(out->content);
        out->content = NULL;
}
