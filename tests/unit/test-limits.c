/* gateway/kernels/limits.c: which requested limits the host's controllers cannot
 * enforce, and the message that says so. */
#include "autoconf.h"

#include "gateway/kernels/limits.h"
#include "protocol/hostmsg.h"
#include "tests/unit/tap.h"

#include <errno.h>

#define ALL (HOSTMSG_CONTROLLER_MEMORY | HOSTMSG_CONTROLLER_PIDS | HOSTMSG_CONTROLLER_CPU)

static void check_refusal(const char *request, unsigned controllers, int want, const char *message)
{
        json_t *limits = json_loads(request, 0, NULL);
        char err[256] = "";

        if (!limits)
                BAIL_OUT("json_loads %s", request);
        is_int(limits_refusal(limits, controllers, err, sizeof(err)), want, "%s with %#x", request,
               controllers);
        is_str(err, message, "%s with %#x: message", request, controllers);
        json_decref(limits);
}

static void check_list(unsigned controllers, bool sandboxed, const char *want)
{
        json_t *list = limits_not_enforced(controllers, sandboxed);
        char *text = json_dumps(list, JSON_COMPACT);

        is_str(text, want, "not enforced with %#x%s", controllers, sandboxed ? "" : ", no sandbox");
        free(text);
        json_decref(list);
}

/* A state record's limits come back as they went in, as the keys the
 * records on disk have always used. */
static void check_record(void)
{
        const struct hostmsg_limits in = {
            .memory_mb = 5000000, .cpu_millis = 1500, .pids = 77, .disk_mb = 1024};
        struct hostmsg_limits out = {.memory_mb = 1, .cpu_millis = 1, .pids = 1, .disk_mb = 1};
        json_t *rec = limits_record(&in);
        char *text = rec ? json_dumps(rec, JSON_SORT_KEYS | JSON_COMPACT) : NULL;

        is_str(text, "{\"cpu_millis\":1500,\"disk_mb\":1024,\"memory_mb\":5000000,\"pids\":77}",
               "the record's keys and values");
        limits_from_record(rec, &out);
        ok(out.memory_mb == in.memory_mb && out.cpu_millis == in.cpu_millis &&
               out.pids == in.pids && out.disk_mb == in.disk_mb,
           "read back as written");
        limits_from_record(NULL, &out);
        ok(out.memory_mb == 0 && out.cpu_millis == 0 && out.pids == 0 && out.disk_mb == 0,
           "a record without them: none");
        free(text);
        json_decref(rec);
}

int main(void)
{
        check_record();
        check_refusal("{\"cpus\": 0.5}", ALL, 0, "");
        check_refusal("{\"cpus\": 0.5}", ALL & ~HOSTMSG_CONTROLLER_CPU, -EPERM,
                      "cpus limit needs the cgroup cpu controller, which this host does not "
                      "delegate to Glovebox");
        check_refusal("{\"memory_mb\": 128, \"pids\": 32}", HOSTMSG_CONTROLLER_MEMORY, -EPERM,
                      "pids limit needs the cgroup pids controller, which this host does not "
                      "delegate to Glovebox");
        check_refusal("{\"memory_mb\": 128}", 0, -EPERM,
                      "memory_mb limit needs the cgroup memory controller, which this host does "
                      "not delegate to Glovebox");
        /* Positive controls: what needs no missing controller passes. */
        check_refusal("{\"disk_mb\": 64}", 0, 0, "");
        check_refusal("{\"memory_mb\": 128, \"pids\": 32}",
                      HOSTMSG_CONTROLLER_MEMORY | HOSTMSG_CONTROLLER_PIDS, 0, "");
        check_refusal("{}", 0, 0, "");
        {
                char err[16] = "";

                is_int(limits_refusal(NULL, 0, err, sizeof(err)), 0, "no limits object");
        }
        check_list(ALL, true, "[]");
        check_list(HOSTMSG_CONTROLLER_MEMORY | HOSTMSG_CONTROLLER_PIDS, true, "[\"cpus\"]");
        check_list(0, true, "[\"memory_mb\",\"cpus\",\"pids\"]");
        check_list(ALL, false, "[\"memory_mb\",\"cpus\",\"pids\",\"disk_mb\"]");
        return done_testing();
}
