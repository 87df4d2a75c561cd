#include "autoconf.h"

#include "protocol/message.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const channel_names[JP_CHANNEL_COUNT] = {"shell", "control", "stdin", "iopub",
                                                            "hb"};

void jp_msg_init(struct jp_msg *msg)
{
        memset(msg, 0, sizeof(*msg));
}

void jp_msg_release(struct jp_msg *msg)
{
        free(msg->owned);
        jp_msg_init(msg);
}

const char *jp_channel_name(enum jp_channel channel)
{
        if ((unsigned)channel >= JP_CHANNEL_COUNT)
                return "unknown";
        return channel_names[channel];
}

int jp_channel_parse(const char *name, size_t len, enum jp_channel *out)
{
        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                if (strlen(channel_names[i]) == len && memcmp(channel_names[i], name, len) == 0) {
                        *out = (enum jp_channel)i;
                        return 0;
                }
        }
        return -EINVAL;
}

static int copy_string_field(json_t *obj, const char *key, char *out, size_t size)
{
        json_t *v = json_object_get(obj, key);
        size_t len;

        if (!json_is_string(v))
                return -EBADMSG;
        len = json_string_length(v);
        if (len >= size)
                return -EBADMSG;
        memcpy(out, json_string_value(v), len);
        out[len] = '\0';
        return 0;
}

int jp_header_fields(struct jp_bytes header, char msg_id[JP_MSG_ID_SIZE],
                     char msg_type[JP_MSG_TYPE_SIZE])
{
        json_t *root;
        int rc = -EBADMSG;

        msg_id[0] = '\0';
        msg_type[0] = '\0';
        root = json_loadb((const char *)header.ptr, header.len, 0, NULL);
        if (!json_is_object(root))
                goto out;
        rc = copy_string_field(root, "msg_id", msg_id, JP_MSG_ID_SIZE);
        if (rc == 0)
                rc = copy_string_field(root, "msg_type", msg_type, JP_MSG_TYPE_SIZE);
out:
        json_decref(root);
        return rc;
}
