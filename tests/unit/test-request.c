/* protocol/request.c: which client messages are malformed (1007), which are
 * refused with an error reply, and which pass (with defaults filled in). */
#include "autoconf.h"

#include "protocol/request.h"
#include "tests/unit/tap.h"

#include <errno.h>

#define HEADER(type) "{\"msg_id\":\"m1\",\"msg_type\":\"" type "\",\"session\":\"s\"}"

static int check(const char *header, const char *content, bool parse_all, struct jp_request *out)
{
        struct jp_msg msg;

        jp_msg_init(&msg);
        msg.header = (struct jp_bytes){(const uint8_t *)header, strlen(header)};
        msg.parent_header = (struct jp_bytes){(const uint8_t *)"{}", 2};
        msg.metadata = (struct jp_bytes){(const uint8_t *)"{}", 2};
        msg.content = (struct jp_bytes){(const uint8_t *)content, strlen(content)};
        return jp_request_check(&msg, parse_all, out);
}

static void test_malformed(void)
{
        struct jp_request r;

        is_int(check("{\"msg_id\":\"m1\",\"session\":\"s\"}", "{}", false, &r), -EBADMSG,
               "a header without msg_type is malformed");
        ok(strstr(r.reason, "msg_type") != NULL, "the reason names msg_type: %s", r.reason);
        is_int(check("{\"msg_type\":\"kernel_info_request\"}", "{}", false, &r), -EBADMSG,
               "a header without msg_id is malformed");
        is_int(check("{\"msg_id\":\"m1\",\"msg_type\":7}", "{}", false, &r), -EBADMSG,
               "a msg_type that is not a string is malformed");
        is_int(check("{\"msg_id\":\"m1\",\"msg_type\":\"\"}", "{}", false, &r), -EBADMSG,
               "an empty msg_type is malformed");
        is_int(check("{not json", "{}", true, &r), -EBADMSG, "a header that is not JSON");
        ok(strstr(r.reason, "header is not a JSON object") != NULL, "says so: %s", r.reason);
        is_int(check("[1]", "{}", true, &r), -EBADMSG, "a header that is not an object");
        is_int(check(HEADER("comm_msg"), "{\"a\":", true, &r), -EBADMSG,
               "v1: content that does not parse is malformed");
        is_int(check(HEADER("comm_msg"), "{\"a\":", false, &r), 0,
               "JSON format: content already parsed is not parsed again");
}

static void test_refused(void)
{
        struct jp_request r;

        is_int(check(HEADER("bogus_request"), "{}", false, &r), -EPROTO,
               "an unknown msg_type is refused");
        is_str(r.ename, "UnknownMessageType", "as UnknownMessageType");
        is_str(r.reply_type, "bogus_reply", "answered as bogus_reply");
        is_str(r.msg_id, "m1", "in the parent of msg_id m1");
        is_int(check(HEADER("bogus"), "{}", false, &r), -EPROTO, "an unknown non-request");
        is_str(r.reply_type, "bogus_reply", "answered as bogus_reply too");
        is_int(check(HEADER("execute_request"), "{}", false, &r), -EPROTO,
               "execute_request without code is refused");
        is_str(r.reply_type, "execute_reply", "answered as execute_reply");
        ok(strstr(r.reason, "content.code") != NULL, "the reason names the field: %s", r.reason);
        is_int(check(HEADER("execute_request"), "{\"code\":42}", false, &r), -EPROTO,
               "execute_request with code 42 is refused");
        is_int(check(HEADER("execute_request"), "{\"code\":\"1\",\"silent\":\"no\"}", false, &r),
               -EPROTO, "a silent that is not a boolean is refused");
        is_int(check(HEADER("complete_request"), "{\"code\":\"x\"}", false, &r), -EPROTO,
               "complete_request without cursor_pos is refused");
        is_int(check(HEADER("shutdown_request"), "{}", false, &r), -EPROTO,
               "shutdown_request without restart is refused");
}

static void test_passes(void)
{
        struct jp_request r;

        is_int(check(HEADER("execute_request"), "{\"code\":\"1\",\"silent\":false}", true, &r), 0,
               "a complete execute_request passes");
        ok(r.content == NULL, "unchanged");
        is_int(check(HEADER("execute_request"), "{\"code\":\"1\"}", false, &r), 0,
               "an execute_request without silent passes");
        is_str(r.content, "{\"code\":\"1\",\"silent\":false}", "with silent: false filled in");
        jp_request_release(&r);
        ok(r.content == NULL, "released");
        is_int(check(HEADER("kernel_info_request"), "{}", true, &r), 0, "kernel_info_request");
        is_int(check(HEADER("comm_msg"), "{\"comm_id\":\"c\",\"data\":{}}", true, &r), 0,
               "comm_msg");
        is_int(check(HEADER("input_reply"), "{\"value\":\"x\"}", true, &r), 0, "input_reply");
        is_int(check(HEADER("complete_request"), "{\"code\":\"x\",\"cursor_pos\":1}", true, &r), 0,
               "a complete complete_request");
        is_int(
            check(HEADER("execute_request"), "{\"code\":\"a\\u0000b\",\"silent\":true}", true, &r),
            0, "code with a NUL character (Python reads it)");
}

int main(void)
{
        test_malformed();
        test_refused();
        test_passes();
        return done_testing();
}
